"""Matting (U²-Netp): preparation as rembg does it, alpha from the matte, and a real frame."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from framewire.engines.onnxruntime import OnnxRuntimeEngine
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages.tasks import resolve_task
from framewire.stages.tasks.matting import Matting, MattingParams

pytestmark = pytest.mark.timeout(60)

U2NETP = Path(__file__).resolve().parents[3] / "assets/models/u2netp/u2netp.onnx"
F32 = np.dtype(np.float32)


def _task(**params: object) -> Matting:
    task = resolve_task("matting", params)
    assert isinstance(task, Matting)
    return task


def test_real_frame_gives_a_person_matte(decode_frames) -> None:
    # carphone frame 0: a man's head and shoulders filling the middle of the frame.
    frame = decode_frames("carphone_pristine.mp4", [0])[0]
    height, width = frame.shape[:2]
    task = _task()
    assert task.dynamic_axes() == {}
    engine = OnnxRuntimeEngine(str(U2NETP), threads=2)
    try:
        task.check_model(engine.inputs, engine.outputs)
        assert task.output_names == ("1959",)
        buffer = np.empty(task.input_spec(width, height).shape, dtype=np.float32)
        meta = task.preprocess(frame, buffer)
        result = task.postprocess(
            engine.infer({task.input_name: buffer}, task.output_names), meta, width, height
        )
    finally:
        engine.close()

    alpha = result.arrays["alpha"]
    assert alpha.shape == (320, 320) and alpha.dtype == np.uint8
    assert (alpha.min(), alpha.max()) == (0, 255)
    matte = result.data["matte"]
    assert 0.0 < matte["foreground_fraction"] < 1.0
    # Non-trivial: a large, confident foreground with background around it.
    assert 0.15 < matte["foreground_fraction"] < 0.5
    assert np.count_nonzero((alpha > 25) & (alpha < 230)) / alpha.size < 0.1
    assert alpha[140:180, 140:180].min() > 200  # the face (frame pixels ~77-98 x 64-82)
    assert alpha[:40, :40].max() < 30  # the car's roof, top left
    assert type(matte["mean"]) is float and type(matte["foreground_fraction"]) is float


def test_preprocess_matches_rembg_normalisation() -> None:
    frame = np.random.default_rng(2).integers(0, 200, (144, 176, 3), dtype=np.uint8)
    task = _task()
    buffer = np.empty((1, 3, 320, 320), dtype=np.float32)
    assert task.preprocess(frame, buffer) == {}

    rgb = cv2.cvtColor(
        cv2.resize(frame, (320, 320), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB
    ).astype(np.float64)
    rgb /= rgb.max()
    expected = (rgb - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    np.testing.assert_allclose(buffer[0], expected.transpose(2, 0, 1), atol=1e-5)


def test_preprocess_of_a_black_frame_does_not_divide_by_zero() -> None:
    buffer = np.empty((1, 3, 64, 64), dtype=np.float32)
    _task(input_size=64).preprocess(np.zeros((48, 80, 3), np.uint8), buffer)
    np.testing.assert_allclose(
        buffer[0, :, 0, 0], -np.array([0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225], rtol=1e-6
    )


def test_postprocess_min_max_normalises_the_matte() -> None:
    matte = np.array([[0.2, 0.4], [0.6, 1.0]], dtype=np.float32).reshape(1, 1, 2, 2)
    result = _task().postprocess({"1959": matte, "1960": np.zeros_like(matte)}, {}, 2, 2)
    np.testing.assert_array_equal(result.arrays["alpha"], [[0, 64], [128, 255]])
    assert result.data == {"matte": {"mean": 0.4375, "foreground_fraction": 0.5}}


def test_postprocess_of_a_flat_matte_gives_zero_alpha() -> None:
    matte = np.full((1, 1, 4, 4), 0.7, dtype=np.float32)
    result = _task().postprocess({"1959": matte}, {}, 4, 4)
    assert not result.arrays["alpha"].any()
    assert result.data["matte"] == {"mean": 0.0, "foreground_fraction": 0.0}


def test_output_param_picks_the_matte_output() -> None:
    task = _task(output="1960")
    assert task.output_names == ("1960",)
    first = np.zeros((1, 1, 2, 2), np.float32)
    chosen = np.array([0.0, 1.0, 1.0, 1.0], np.float32).reshape(1, 1, 2, 2)
    result = task.postprocess({"1959": first, "1960": chosen}, {}, 2, 2)
    assert result.data["matte"]["foreground_fraction"] == 0.75


def test_check_model_learns_names_and_rejects_what_does_not_fit() -> None:
    inputs = [TensorSpec("image", F32, (1, 3, "h", "w"))]
    outputs = [TensorSpec("alpha", F32, (1, 1, "h", "w")), TensorSpec("side", F32, (1, 1, "h", "w"))]
    task = _task(input_size=256)
    task.check_model(inputs, outputs)
    assert (task.input_name, task.output_names) == ("image", ("alpha",))
    assert task.input_spec(640, 272) == TensorSpec("image", F32, (1, 3, 256, 256))

    with pytest.raises(ConfigError, match=r"model.output: the model has no output 'nope'"):
        _task(output="nope").check_model(inputs, outputs)
    with pytest.raises(ConfigError, match="'input' has a fixed height of 640 but model.input_size is 320"):
        _task().check_model([TensorSpec("input", F32, (1, 3, 640, 640))], outputs)
    _task(input_size=640).check_model([TensorSpec("input", F32, (1, 3, 320, 320))], outputs)
    with pytest.raises(ConfigError, match=r"'alpha'"):
        _task().check_model(inputs, [TensorSpec("alpha", F32, (1, 4, "h", "w"))])
    with pytest.raises(ConfigError, match=r"'image' float32 \[1, 3, H, W\]"):
        _task().check_model([TensorSpec("image", np.dtype(np.uint8), (1, 3, 320, 320))], outputs)


def test_dynamic_axes_for_a_size_other_than_the_file() -> None:
    assert _task(input_size=256).dynamic_axes() == {"input.1": (2, 3)}
    assert all(field.description for field in MattingParams.model_fields.values())
