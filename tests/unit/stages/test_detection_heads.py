"""The multi-output detection formats: distribution heads (gfl) and TensorFlow object detection
(tf_od), found from shapes and names or named; uint8 NHWC inputs; numbered label files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages import detections
from framewire.stages.tasks import resolve_task
from framewire.stages.tasks.base import ModelInfo
from framewire.stages.tasks.detection import Detection

pytestmark = pytest.mark.timeout(60)

F32, U8 = np.dtype(np.float32), np.dtype(np.uint8)
IMAGES = TensorSpec("images", F32, (1, 3, 64, 64))
# 64x64 at strides 8/16/32: 64, 16 and 4 cells; 3 classes; reg_max 7 (32 bins), outputs shuffled.
GFL = (
    TensorSpec("bins32", F32, (1, 4, 32)),
    TensorSpec("cls8", F32, (1, 64, 3)),
    TensorSpec("bins8", F32, (1, 64, 32)),
    TensorSpec("cls16", F32, (1, 16, 3)),
    TensorSpec("bins16", F32, (1, 16, 32)),
    TensorSpec("cls32", F32, (1, 4, 3)),
)
TFLITE = (
    TensorSpec("TFLite_Detection_PostProcess", F32, (1, 5, 4)),
    TensorSpec("TFLite_Detection_PostProcess:1", F32, (1, 5)),
    TensorSpec("TFLite_Detection_PostProcess:2", F32, (1, 5)),
    TensorSpec("TFLite_Detection_PostProcess:3", F32, (1,)),
)


def _task(*outputs: TensorSpec, inputs: tuple[TensorSpec, ...] = (IMAGES,), **params: Any) -> Detection:
    task = resolve_task("detection", params)
    assert isinstance(task, Detection)
    task.use_model(ModelInfo("model.onnx", inputs, tuple(outputs), {}))
    return task


def _bins(distances: list[float], stride: int, reg_max: int = 7) -> np.ndarray:
    """Logits whose softmax expectation is each distance / stride (two neighbouring bins)."""
    out = np.full((4, reg_max + 1), -50.0, dtype=np.float32)
    for side, distance in enumerate(distances):
        value = distance / stride
        low = int(np.floor(value))
        frac = value - low
        out[side, low] = np.log(max(1.0 - frac, 1e-12))
        if frac:
            out[side, low + 1] = np.log(frac)
    return out.reshape(-1)


def test_a_distribution_head_is_found_from_its_shapes() -> None:
    task = _task(*GFL)
    layout = task.layout
    assert layout is not None and layout.format == "gfl" and layout.classes == 3 and layout.reg_max == 7
    assert layout.outputs == ("cls8", "bins8", "cls16", "bins16", "cls32", "bins32")
    assert "gfl" in task.summary() and "32 box bins" in task.summary()


def test_gfl_decodes_distances_from_the_cell_centre_and_keeps_every_class_above_the_threshold() -> None:
    task = _task(*GFL, score_threshold=0.5, resize="stretch")
    arrays = {spec.name: np.zeros(spec.shape, np.float32) for spec in GFL}
    # Stride 8, cell 10 = column 2, row 1: centre (20, 12); sides l, t, r, b = 4, 2, 12, 6.
    arrays["cls8"][0, 10] = [0.9, 0.6, 0.1]
    arrays["bins8"][0, 10] = _bins([4.0, 2.0, 12.0, 6.0], 8)
    # Stride 32, cell 3 = column 1, row 1: centre (48, 48); a box past the input is clipped to it.
    arrays["cls32"][0, 3] = [0.0, 0.0, 0.7]
    arrays["bins32"][0, 3] = _bins([32.0, 16.0, 40.0, 8.0], 32)
    found = task.postprocess(arrays, {}, 128, 64).data[detections.KEY]
    got = [(d["class_id"], d["score"], d["box"]) for d in found]
    # Frame 128x64 stretched to 64x64: x doubles back.
    assert got == [
        (0, 0.9, [32.0, 10.0, 32.0, 8.0]),
        (2, 0.7, [32.0, 32.0, 96.0, 24.0]),
        (1, 0.6, [32.0, 10.0, 32.0, 8.0]),  # same cell, another class above the threshold: kept
    ]


def test_gfl_needs_its_bins_told_apart_and_a_fixed_size() -> None:
    # 3 classes x 4 bins each way: last dims 32 and 32 cannot be told apart without reg_max.
    same = tuple(TensorSpec(s.name, F32, (*s.shape[:2], 32)) for s in GFL)
    with pytest.raises(ConfigError, match=r"gfl cannot tell class scores from box bins at stride 8"):
        _task(*same, format="gfl")
    task = _task(*GFL, format="gfl", reg_max=7)
    assert task.layout is not None and task.layout.reg_max == 7
    with pytest.raises(ConfigError, match=r"gfl needs two outputs \[B, 1, D\] for stride 64"):
        _task(*GFL, format="gfl", strides=(8, 16, 64))
    with pytest.raises(ConfigError, match="gfl needs a fixed input size"):
        _task(*GFL, format="gfl", input_size="auto")


def test_tf_od_outputs_are_found_by_the_tflite_names_and_decoded() -> None:
    task = _task(*TFLITE, resize="stretch", score_threshold=0.5, labels=("person", "bicycle", "car"))
    assert task.layout is not None and task.layout.format == "tf_od"
    arrays = {
        "TFLite_Detection_PostProcess": np.array(
            [[[0.25, 0.5, 0.75, 1.0], [0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.1, 0.1], [0, 0, 1, 1], [0, 0, 1, 1]]],
            np.float32,
        ),
        "TFLite_Detection_PostProcess:1": np.array([[2.0, 0.0, 1.0, 1.0, 1.0]], np.float32),
        "TFLite_Detection_PostProcess:2": np.array([[0.9, 0.8, 0.3, 0.99, 0.99]], np.float32),
        "TFLite_Detection_PostProcess:3": np.array([3.0], np.float32),
    }
    found = task.postprocess(arrays, {}, 200, 100).data[detections.KEY]
    # (ymin, xmin, ymax, xmax) normalised -> frame pixels; 0.3 below the threshold; rows past the count out.
    assert [(d["label"], d["box"]) for d in found] == [
        ("car", [100.0, 25.0, 100.0, 50.0]),
        ("person", [0.0, 0.0, 100.0, 50.0]),
    ]


def test_tf_od_with_unnamed_outputs_must_be_named_and_then_reads_tflite_order() -> None:
    plain = (
        TensorSpec("a", F32, (1, 5, 4)),
        TensorSpec("b", F32, (1, 5)),
        TensorSpec("c", F32, (1, 5)),
        TensorSpec("d", F32, (1,)),
    )
    with pytest.raises(ConfigError, match="fit no detection format"):
        _task(*plain)
    task = _task(*plain, format="tf_od")
    assert task.layout is not None and task.layout.outputs == ("a", "b", "c", "d")
    assert "TFLite's order" in task.layout.why
    with pytest.raises(ConfigError, match=r"tf_od needs boxes \[B, K, 4\]"):
        _task(*plain[:3], format="tf_od")


def test_an_unknown_format_is_refused_with_a_did_you_mean() -> None:
    with pytest.raises(ConfigError, match=r"model.format: .*unknown format 'tf_odd' \(did you mean 'tf_od'\?\)"):
        resolve_task("detection", {"format": "tf_odd"})


def test_a_uint8_nhwc_input_gets_the_raw_pixels() -> None:
    nhwc = TensorSpec("image", U8, (1, 4, 6, 3))
    task = _task(*TFLITE, inputs=(nhwc,), resize="stretch", channels="rgb")
    spec = task.input_spec(12, 8)
    assert spec.shape == (1, 4, 6, 3) and spec.dtype == U8
    frame = np.random.default_rng(1).integers(0, 256, (8, 12, 3), dtype=np.uint8)
    out = np.zeros(spec.shape, U8)
    task.preprocess(frame, out)
    import cv2

    expected = cv2.resize(frame, (6, 4), interpolation=cv2.INTER_LINEAR)[:, :, ::-1]
    assert np.array_equal(out[0], expected)
    assert "uint8 NHWC, raw 0-255 pixels" in task.summary()


def test_a_uint8_input_refuses_a_scale_or_mean() -> None:
    nhwc = TensorSpec("image", U8, (1, 4, 6, 3))
    with pytest.raises(ConfigError, match=r"model.mean: the model's input 'image' is uint8"):
        _task(*TFLITE, inputs=(nhwc,), mean=(1.0, 1.0, 1.0))
    with pytest.raises(ConfigError, match=r"model.scale: .* uint8"):
        _task(*TFLITE, inputs=(nhwc,), scale="1/255")


def test_numbered_label_files_keep_their_ids_and_name_the_gaps(tmp_path: Path) -> None:
    labels = tmp_path / "coco_labels.txt"
    labels.write_text("0  person\n1  bicycle\n3  motorcycle\n")
    task = _task(*TFLITE, labels=str(labels), classes=("motorcycle",))
    assert task.labels() == ("person", "bicycle", "2", "motorcycle")


NANODET = {"resize": "stretch", "channels": "bgr", "scale": "none",
           "mean": (103.53, 116.28, 123.675), "std": (57.375, 57.12, 58.395)}  # fmt: skip


def test_a_family_s_usual_preprocessing_left_at_the_defaults_is_a_warning() -> None:
    """Issue 39: a NanoDet model with the default preprocessing (letterbox, RGB, 1/255: Ultralytics')
    passed `validate` without a word; NanoDet takes BGR and its own mean and std on 0-255."""
    (warning,) = _task(*GFL).warnings()
    assert warning == (
        "model: format gfl (a GFL head, as NanoDet's) usually takes resize: stretch, channels: bgr, "
        "scale: none, mean: [103.53, 116.28, 123.675], std: [57.375, 57.12, 58.395]; these keys are left "
        "at their defaults here: set them under model: as configs/nanodet.yaml does (or set them to the "
        "defaults to keep those)"
    )
    assert _task(*GFL, **NANODET).warnings() == []
    # Keys set, even to other values (PicoDet's mean and std), are the config's choice: not named.
    picodet = {**NANODET, "channels": "rgb", "mean": (123.675, 116.28, 103.53),
               "std": (58.395, 57.12, 57.375)}  # fmt: skip
    assert _task(*GFL, **picodet).warnings() == []
    (partial,) = _task(*GFL, resize="stretch", channels="bgr", scale="none").warnings()
    assert "usually takes mean: [103.53, 116.28, 123.675], std: [57.375, 57.12, 58.395];" in partial
    defaults = {"resize": "letterbox", "channels": "rgb", "scale": "1/255",
                "mean": (0, 0, 0), "std": (1, 1, 1)}  # fmt: skip
    assert _task(*GFL, **defaults).warnings() == []  # the defaults, written out: chosen
    # A uint8 TF detector: raw pixels, so only the resize and the channel order count.
    nhwc = TensorSpec("image", U8, (1, 4, 6, 3))
    (tf_od,) = _task(*TFLITE, inputs=(nhwc,)).warnings()
    assert "usually takes resize: stretch; these keys" in tf_od and "configs/ssd.yaml" in tf_od
    assert _task(*TFLITE, inputs=(nhwc,), resize="stretch").warnings() == []
    assert _task(*GFL[:0], TensorSpec("output0", F32, (1, 84, 8400))).warnings() == []  # yolov8: no family


def test_validate_says_the_warning_and_the_shipped_detectors_give_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from framewire.app.compose.plan import check
    from framewire.config import load_config, resolve_inputs

    root = Path(__file__).resolve().parents[3]
    for name in ("nanodet", "showcase", "ssd", "yolox"):
        config = resolve_inputs(load_config(root / "configs" / f"{name}.yaml"), [root])
        with caplog.at_level("WARNING", logger="framewire.app.compose"):
            caplog.clear()
            check(config)
        assert not caplog.records, (name, caplog.text)
    model = f"{{path: '{root}/assets/models/nanodet_coco/nanodet_m_416.onnx', task: detection}}"
    config = resolve_inputs(load_config(root / "configs" / "nanodet.yaml", [f"model={model}"]), [root])
    caplog.clear()
    with caplog.at_level("WARNING", logger="framewire.app.compose"):
        check(config)
    assert [r.getMessage()[:40] for r in caplog.records] == ["model: format gfl (a GFL head, as NanoDe"]
