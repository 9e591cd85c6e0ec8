"""The lip-sync test models: a generator with exactly the workload's inputs and outputs, and an audio
encoder that turns a log-mel window into the generator's audio features. No lip-sync model with
weights exists in any package these machines reach (assets/SOURCES.md), so the project builds these
with onnx.helper; their output depends on the audio in a way a test can check.

- `generator.onnx`: `image` [N, 6, 320, 320] (the crop with its lower half masked, then the
  reference crop; 0-1) and `audio` [N, 512, 1, 8] -> `output` [N, 3, 320, 320] (0-1):
  the reference crop brightened by `gain` x the audio's energy (the mean square of `audio`), plus
  a convolutional branch (random fixed weights) scaled by 1e-3, which costs what a small generator
  costs (`--layers`, `--channels`) without changing the picture by more than a quarter of a level.
- `audio_encoder.onnx`: `mel` [N, 80, 16] (a log-mel window, natural log of the power) ->
  `features` [N, 512, 1, 8]: a fixed pattern scaled so that its mean square is the mean mel power
  of the window relative to that of a 1 kHz tone at amplitude 0.5, times 0.125 (the mean square of
  that tone's samples): through the encoder, a window gives the generator the energy its raw PCM
  would have given.

`python -m bench.lipsync_models --out assets/models/lipsync_test` writes both (deterministic: the
same bytes each time, which a test checks against the shipped files).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

GAIN = 2.0
"""Brightness (0-1 scale) added per unit of audio energy: a full window of the 0.5-amplitude test tone
(energy 0.125) adds 0.25, 64 levels of 255."""
WORK_SCALE = 1e-3
MEL = {"n_fft": 800, "win_length": 800, "hop_length": 200, "n_mels": 80, "fmin": 55.0, "fmax": 7600.0}
"""The log-mel settings the encoder is made for (Wav2Lip's): 0.2 s at 16 kHz gives 80 x 17 frames;
the lipsync config takes 16 of them (window_ms 190)."""
TONE_HZ, TONE_AMPLITUDE, RATE = 1000.0, 0.5, 16000


def generator(layers: int = 4, channels: int = 32, seed: int = 1234) -> bytes:
    """The generator model, serialised."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Slice", ["image", "ref_start", "ref_end", "axis1"], ["reference"]),
        helper.make_node("Mul", ["audio", "audio"], ["audio_sq"]),
        helper.make_node("ReduceMean", ["audio_sq"], ["energy"], axes=[1, 2, 3], keepdims=1),
        helper.make_node("Mul", ["energy", "gain"], ["lift"]),
        helper.make_node("Add", ["reference", "lift"], ["bright"]),
    ]
    weights = [
        numpy_helper.from_array(np.array([3], np.int64), "ref_start"),
        numpy_helper.from_array(np.array([6], np.int64), "ref_end"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(np.array(GAIN, np.float32), "gain"),
        numpy_helper.from_array(np.array(WORK_SCALE, np.float32), "work_scale"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up"),
    ]
    previous, width = "image", 6
    for i in range(layers + 1):
        name, out = f"w{i}", channels if i < layers else 3
        kernel = 3 if i < layers else 1
        array = rng.normal(0, np.sqrt(2.0 / (width * kernel * kernel)), (out, width, kernel, kernel)).astype(np.float32)
        weights.append(numpy_helper.from_array(array, name))
        stride = [2, 2] if i == 0 else [1, 1]
        pads = [1, 1, 1, 1] if kernel == 3 else [0, 0, 0, 0]
        nodes.append(helper.make_node("Conv", [previous, name], [f"c{i}"], strides=stride, pads=pads))
        nodes.append(helper.make_node("Relu" if i < layers else "Tanh", [f"c{i}"], [f"a{i}"]))
        previous, width = f"a{i}", out
    nodes += [
        helper.make_node("Resize", [previous, "", "up"], ["work_up"], mode="nearest"),
        helper.make_node("Mul", ["work_up", "work_scale"], ["work"]),
        helper.make_node("Add", ["bright", "work"], ["raw"]),
        helper.make_node("Clip", ["raw", "zero", "one"], ["output"]),
    ]
    weights += [numpy_helper.from_array(np.array(0, np.float32), "zero"), numpy_helper.from_array(np.array(1, np.float32), "one")]
    graph = helper.make_graph(
        nodes,
        "lipsync_test_generator",
        [
            helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 6, 320, 320]),
            helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["N", 512, 1, 8]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3, 320, 320])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="framewire")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def reference_mel_power() -> float:
    """The mean mel power (not log) of a window of the test tone, with the encoder's settings."""
    from framewire.components import LogMel, MelSettings

    t = np.arange(int(0.2 * RATE)) / RATE
    tone = (TONE_AMPLITUDE * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.float32)
    mel = LogMel(MelSettings(rate=RATE, scale="ln", **MEL))  # type: ignore[arg-type]
    return float(np.mean(np.exp(mel(tone)[:, :16].astype(np.float64))))


def audio_encoder(seed: int = 99) -> bytes:
    """The audio encoder model, serialised."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    pattern = rng.uniform(0.5, 1.5, (1, 512, 1, 8)).astype(np.float32)
    pattern /= np.sqrt(np.mean(np.square(pattern)))  # mean square 1: the energy is the scale's square
    scale = np.float32(0.125 / reference_mel_power())  # mean mel power -> the energy of the PCM
    nodes = [
        helper.make_node("Exp", ["mel"], ["power"]),
        helper.make_node("ReduceMean", ["power"], ["mean_power"], axes=[1, 2], keepdims=1),
        helper.make_node("Mul", ["mean_power", "scale"], ["energy"]),
        helper.make_node("Sqrt", ["energy"], ["rms"]),
        helper.make_node("Unsqueeze", ["rms", "last"], ["rms4"]),
        helper.make_node("Mul", ["rms4", "pattern"], ["features"]),
    ]
    weights = [
        numpy_helper.from_array(np.array(scale, np.float32), "scale"),
        numpy_helper.from_array(np.array([3], np.int64), "last"),
        numpy_helper.from_array(pattern, "pattern"),
    ]
    graph = helper.make_graph(
        nodes,
        "lipsync_test_audio_encoder",
        [helper.make_tensor_value_info("mel", TensorProto.FLOAT, ["N", 80, 16])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", 512, 1, 8])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="framewire")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def write(out: Path, layers: int = 4, channels: int = 32) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "generator.onnx", out / "audio_encoder.onnx"]
    files[0].write_bytes(generator(layers, channels))
    files[1].write_bytes(audio_encoder())
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="assets/models/lipsync_test", help="folder for the two models")
    parser.add_argument("--layers", type=int, default=4, help="3x3 convolutions of the generator's work branch")
    parser.add_argument("--channels", type=int, default=32, help="their channels")
    args = parser.parse_args()
    for path in write(Path(args.out), args.layers, args.channels):
        print(path, path.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
