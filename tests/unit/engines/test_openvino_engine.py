"""OpenVinoEngine against the real openvino wheel: shipped models beside ONNX Runtime fp32, batches
split across requests, the compiled-model cache, the precision that ran, devices and their errors."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

ov = pytest.importorskip("openvino")

from framewire.engines.cpu_features import cpu_flags, default_precision  # noqa: E402
from framewire.engines.openvino import OpenVinoEngine, check_device, reason  # noqa: E402
from framewire.pipeline.errors import ConfigError, EngineError  # noqa: E402
from framewire.pipeline.wire.tensors import TensorSpec  # noqa: E402

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
YUNET = ROOT / "assets/models/yunet/face_detection_yunet_2023mar.onnx"
NANODET = ROOT / "assets/models/nanodet_coco/nanodet_m_416.onnx"
F32 = np.dtype(np.float32)
AVAILABLE = ov.Core().available_devices


def _reference(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    return np.einsum("oc,nchw->nohw", weights[:, :, 0, 0], x)


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def test_loads_an_onnx_file_and_describes_it(
    conv_model: Path, conv_weights: np.ndarray, tmp_path: Path, caplog
) -> None:
    with caplog.at_level(logging.INFO, logger="framewire.engines.openvino"):
        engine = OpenVinoEngine(str(conv_model), precision="fp32", threads=1, cache_dir=str(tmp_path))
    assert engine.backend == "openvino"
    assert engine.provider == "OpenVINO CPU fp32"
    assert engine.inputs == (TensorSpec("x", F32, (1, 3, 8, 8)),)
    assert engine.outputs == (TensorSpec("y", F32, (1, 2, 8, 8)), TensorSpec("z", F32, (1, 64, 2)))
    (message,) = [r.getMessage() for r in caplog.records]
    assert (
        message.startswith(f"model {conv_model} compiled by OpenVINO ")
        and "(fp32, 1 stream(s), 1 thread(s))" in message
    )
    x = np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)
    out = engine.infer({"x": x})
    assert list(out) == ["y", "z"]
    np.testing.assert_allclose(out["y"], _reference(x, conv_weights), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["z"], out["y"].transpose(0, 2, 3, 1).reshape(1, -1, 2))
    assert list(engine.infer({"x": x}, ["z"])) == ["z"]


def test_a_batch_runs_as_one_request_a_frame_in_order(
    conv_model: Path, conv_weights: np.ndarray, tmp_path: Path
) -> None:
    engine = OpenVinoEngine(
        str(conv_model), precision="fp32", streams=2, dynamic_axes={"x": (0,)}, cache_dir=str(tmp_path)
    )
    assert engine.inputs[0].shape == (None, 3, 8, 8)  # the Infer stage batches it
    x = np.random.default_rng(1).random((5, 3, 8, 8), dtype=np.float32)
    out = engine.infer({"x": x})
    assert out["y"].shape == (5, 2, 8, 8) and out["z"].shape == (5, 64, 2)
    np.testing.assert_allclose(out["y"], _reference(x, conv_weights), rtol=1e-5, atol=1e-6)
    single = engine.infer({"x": x[3:4]})
    np.testing.assert_array_equal(single["y"], out["y"][3:4])


def test_yunet_reshaped_to_the_sources_size_matches_onnx_runtime(tmp_path: Path) -> None:
    shapes = {"input": [(1, 3, 288, 640), (1, 3, 288, 640)]}
    engine = OpenVinoEngine(
        str(YUNET), precision="fp32", threads=1, dynamic_axes={"input": (0, 2, 3)},
        input_shapes=lambda: shapes, cache_dir=str(tmp_path),
    )  # fmt: skip
    assert engine.inputs[0].shape == (None, 3, 288, 640)  # compiled static, batches split
    x = np.random.default_rng(2).random((2, 3, 288, 640), dtype=np.float32) * 255
    out = engine.infer({"input": x})
    assert out["cls_8"].shape == (2, 2880, 1) and out["kps_32"].shape == (2, 180, 10)
    from framewire.engines.onnx_model import load_model_bytes

    dynamic = tmp_path / "yunet-dynamic.onnx"
    dynamic.write_bytes(load_model_bytes(YUNET, {"input": (2, 3)}))
    for frame in range(2):
        reference = _ort(dynamic, {"input": x[frame : frame + 1]})
        for name, value in reference.items():
            np.testing.assert_allclose(out[name][frame : frame + 1], value, rtol=1e-3, atol=1e-3)


def test_sources_of_several_sizes_keep_the_dims_dynamic(tmp_path: Path) -> None:
    shapes = {"input": [(1, 3, 288, 640), (1, 3, 480, 640)]}
    engine = OpenVinoEngine(
        str(YUNET),
        precision="fp32",
        dynamic_axes={"input": (2, 3)},
        input_shapes=lambda: shapes,
        cache_dir=str(tmp_path),
    )
    assert engine.inputs[0].shape == (1, 3, None, None)
    assert engine.infer({"input": np.zeros((1, 3, 480, 640), np.float32)})["cls_8"].shape == (1, 4800, 1)
    assert engine.infer({"input": np.zeros((1, 3, 288, 640), np.float32)})["cls_8"].shape == (1, 2880, 1)


def test_nanodet_at_fp32_matches_onnx_runtime(tmp_path: Path) -> None:
    engine = OpenVinoEngine(str(NANODET), precision="fp32", threads=1, cache_dir=str(tmp_path))
    x = np.random.default_rng(3).normal(0, 1, (1, 3, 416, 416)).astype(np.float32)
    out = engine.infer({"input_1:0": x})
    reference = _ort(NANODET, {"input_1:0": x})
    assert list(out) == list(reference)
    for name, value in reference.items():
        np.testing.assert_allclose(out[name], value, rtol=1e-3, atol=2e-4)


def test_a_second_open_is_a_cache_hit(tmp_path: Path) -> None:
    first = OpenVinoEngine(str(NANODET), precision="fp32", threads=1, cache_dir=str(tmp_path))
    assert not first.loaded_from_cache
    assert [p.suffix for p in (tmp_path / "openvino").iterdir()] == [".blob"]
    first.close()
    second = OpenVinoEngine(str(NANODET), precision="fp32", threads=1, cache_dir=str(tmp_path))
    assert second.loaded_from_cache
    import openvino.properties as props

    other = OpenVinoEngine(str(NANODET), precision="fp32", threads=2, cache_dir=str(tmp_path))
    assert other.loaded_from_cache and other._compiled is not None  # threads are not in the blob
    assert other._compiled.get_property(props.inference_num_threads) == 2
    uncached = OpenVinoEngine(str(NANODET), precision="fp32", cache_dir=str(tmp_path / "none"), cache=False)
    assert not uncached.loaded_from_cache and not (tmp_path / "none").exists()


def test_auto_runs_the_cpus_own_default(tmp_path: Path) -> None:
    engine = OpenVinoEngine(str(NANODET), precision="auto", threads=1, cache_dir=str(tmp_path))
    assert engine.precision_run == default_precision(cpu_flags())
    assert engine.provider == f"OpenVINO CPU {engine.precision_run}"


def test_bf16_says_what_ran(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="framewire.engines.openvino"):
        engine = OpenVinoEngine(str(NANODET), precision="bf16", threads=1, cache_dir=str(tmp_path))
    if default_precision(cpu_flags()) == "bf16":
        assert engine.precision_run == "bf16" and not caplog.records
    else:  # this CPU has no bf16: OpenVINO runs f32, and says so once
        assert engine.precision_run == "fp32"
        (message,) = [r.getMessage() for r in caplog.records]
        assert message.startswith("engine.precision bf16: OpenVINO runs fp32 on CPU instead")


def test_int8_needs_a_quantized_model(conv_model: Path, tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"^engine.precision: int8 needs a quantized model, and .*conv.onnx has no"
    ):
        OpenVinoEngine(str(conv_model), precision="int8", cache_dir=str(tmp_path))


def test_int8_runs_frameworks_own_qdq_model(tmp_path: Path) -> None:
    from framewire.engines.quantize import quantize_model

    rng = np.random.default_rng(4)
    feeds = [{"input": rng.random((1, 3, 128, 160), dtype=np.float32) * 255} for _ in range(4)]
    quantized = tmp_path / "yunet-int8.onnx"
    quantize_model(YUNET, quantized, feeds, dynamic_axes={"input": (2, 3)})
    engine = OpenVinoEngine(
        str(quantized), precision="int8", dynamic_axes={"input": (2, 3)}, cache_dir=str(tmp_path)
    )
    assert engine.precision_run.startswith("int8+")
    out = engine.infer(feeds[0])
    reference = _ort(quantized, feeds[0])
    assert abs(float(out["cls_8"].mean()) - float(reference["cls_8"].mean())) < 0.02


def test_an_ir_pair_loads_and_its_weights_are_checked(
    conv_model: Path, conv_weights: np.ndarray, tmp_path: Path
) -> None:
    xml = tmp_path / "conv.xml"
    ov.save_model(ov.Core().read_model(str(conv_model)), str(xml), compress_to_fp16=False)
    engine = OpenVinoEngine(
        str(xml), precision="fp32", dynamic_axes={"x": (0, 2, 3)}, cache_dir=str(tmp_path)
    )
    assert engine.inputs[0].shape == (None, 3, None, None)
    x = np.random.default_rng(5).random((2, 3, 16, 24), dtype=np.float32)
    np.testing.assert_allclose(engine.infer({"x": x})["y"], _reference(x, conv_weights), rtol=1e-5, atol=1e-6)
    xml.with_suffix(".bin").unlink()
    with pytest.raises(ConfigError, match=r"conv.xml': its weights conv.bin are missing$"):
        OpenVinoEngine(str(xml), cache_dir=str(tmp_path))


def test_missing_and_corrupt_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^model file '.*nothing.onnx' does not exist$"):
        OpenVinoEngine(str(tmp_path / "nothing.onnx"), cache_dir=str(tmp_path))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(ConfigError, match=r"^model file '.*bad.onnx' is not a valid ONNX model: "):
        OpenVinoEngine(str(bad), cache_dir=str(tmp_path))


def test_inference_errors_name_the_model_and_the_input(conv_model: Path, tmp_path: Path) -> None:
    engine = OpenVinoEngine(str(conv_model), cache_dir=str(tmp_path))
    with pytest.raises(
        EngineError, match=r"conv.onnx: inference failed for input 'x' float32 \(1, 3, 4, 4\): "
    ):
        engine.infer({"x": np.zeros((1, 3, 4, 4), np.float32)})
    engine.close()
    with pytest.raises(EngineError, match="engine is closed"):
        engine.infer({"x": np.zeros((1, 3, 8, 8), np.float32)})


def test_threads_and_streams_reach_the_compiled_model(conv_model: Path, tmp_path: Path) -> None:
    import openvino.properties as props

    engine = OpenVinoEngine(str(conv_model), threads=2, streams=2, cache_dir=str(tmp_path))
    assert engine._compiled is not None
    assert int(engine._compiled.get_property(props.num_streams)) == 2
    assert engine._compiled.get_property(props.inference_num_threads) == 2
    assert not engine._compiled.get_property(props.hint.enable_cpu_pinning)


def test_an_unknown_device_names_engine_device() -> None:
    with pytest.raises(ConfigError, match=r"^engine.device: 'TPU' is not one of CPU, GPU, NPU, AUTO"):
        check_device(ov.Core(), "TPU")
    check_device(ov.Core(), "CPU")
    check_device(ov.Core(), "AUTO:CPU")


@pytest.mark.parametrize("device", ["GPU", "NPU", "GPU.1"])
def test_a_device_openvino_does_not_see_is_one_line(device: str) -> None:
    """Written against the real API; where the device exists (an Intel GPU or NPU) it must pass."""
    if device in AVAILABLE:
        check_device(ov.Core(), device)
        return
    with pytest.raises(ConfigError) as caught:
        check_device(ov.Core(), device)
    message = str(caught.value)
    assert message.startswith(f"engine.device: '{device}' is not available here (OpenVINO ")
    assert (
        f"sees {', '.join(AVAILABLE)})" in message and "\n" not in message and "Exception from" not in message
    )


def test_auto_needs_one_of_its_devices(tmp_path: Path) -> None:
    # The CPU is always there: AUTO falls back to it, without the devices whose plugins do not load
    # (OpenVINO's AUTO would fail on them).
    usable = [d for d in ("GPU", "CPU") if d in AVAILABLE]
    assert check_device(ov.Core(), "AUTO:GPU,CPU") == f"AUTO:{','.join(usable)}"
    engine = OpenVinoEngine(str(NANODET), device="AUTO:GPU,CPU", cache_dir=str(tmp_path))
    assert engine.provider.startswith("OpenVINO ") and engine.devices
    if "GPU" in AVAILABLE or "NPU" in AVAILABLE:
        return
    with pytest.raises(
        ConfigError, match=r"^engine.device: 'AUTO:GPU,NPU': none of its devices is here: 'GPU'"
    ):
        check_device(ov.Core(), "AUTO:GPU,NPU")


def test_reason_drops_openvinos_source_lines() -> None:
    error = RuntimeError(
        "Exception from src/inference/src/cpp/core.cpp:117:\nException from src/x.cpp:9:\nNo device\n"
    )
    assert reason(error) == "No device"


def test_a_fixed_size_model_never_asks_the_sources(tmp_path: Path) -> None:
    def sources() -> dict[str, list[tuple[int, ...]]]:
        raise AssertionError("opened the sources for a model of fixed size")

    engine = OpenVinoEngine(
        str(NANODET),
        precision="fp32",
        dynamic_axes={"input_1:0": (0,)},
        input_shapes=sources,
        cache_dir=str(tmp_path),
    )
    assert engine.inputs[0].shape == (None, 3, 416, 416)
