"""Bring-your-own-model configs at start: one-line errors naming the key, before any frame; and the
stages a config with tracking and secondary models gets (split and fused, ordered where stateful)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from framewire.app.compose.plan import check, stage_specs
from framewire.config import validate_config
from framewire.pipeline.errors import ConfigError

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "assets" / "models"
DET = str(MODELS / "ppocr" / "ch_PP-OCRv4_det_infer.onnx")
REC = str(MODELS / "ppocr" / "ch_PP-OCRv4_rec_infer.onnx")
YOLOX = str(MODELS / "yolox_ddddocr" / "common_det.onnx")
U2NETP = str(MODELS / "u2netp" / "u2netp.onnx")


def _config(model: dict[str, Any], **more: Any) -> Any:
    raw = {
        "sources": [{"id": "cam", "uri": str(ROOT / "assets" / "videos" / "signs.mp4")}],
        "model": model,
        "outputs": [{"kind": "jsonl", "path": "/tmp/x.jsonl"}],
        **more,
    }
    return validate_config(raw, "test.yaml")


def _error(config: Any) -> str:
    with pytest.raises(ConfigError) as info:
        check(config)
    message = str(info.value)
    assert "\n" not in message
    return message


def _model_with_output(path: Path, shape: list[int]) -> str:
    """A tiny ONNX model: image input, one output of `shape` (a constant)."""
    value = helper.make_tensor(
        "value", onnx.TensorProto.FLOAT, shape, np.zeros(shape, np.float32).ravel().tolist()
    )
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["output0"], value=value)],
        "m",
        [helper.make_tensor_value_info("images", onnx.TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("output0", onnx.TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return str(path)


def test_a_model_that_fits_no_format(tmp_path: Path) -> None:
    path = _model_with_output(tmp_path / "odd.onnx", [1, 3, 8, 8, 85])
    assert _error(_config({"path": path, "task": "detection"})) == (
        "model.format: the model's output 'output0' [1, 3, 8, 8, 85] fit no detection format "
        "(model.format: yolov5 | yolov8 | yolox | end2end | separate | gfl | tf_od)"
    )


def test_a_yolov8_style_model_needs_only_its_path(tmp_path: Path) -> None:
    path = _model_with_output(tmp_path / "v8.onnx", [1, 6, 84])  # 4 + 2 classes at the 84 grid cells of 64x64
    task = check(_config({"path": path}))
    assert task.name == "detection" and task.summary().startswith("detection: format yolov8 ([B, 6, 84]: channels first")


def test_a_model_that_does_not_tell_its_task_needs_one(tmp_path: Path) -> None:
    path = _model_with_output(tmp_path / "cls.onnx", [1, 10])
    assert _error(_config({"path": path})) == (
        "model.task: required key is missing (the model's output 'output0' [1, 10] does not tell its task: "
        "a YOLOv8-style detector's one [B, 4+C, N] output would)"
    )
    assert _error(_config({"path": path, "taks": "detection"})) == "model.taks: unknown key (did you mean task?)"
    assert _error(_config({"path": str(tmp_path / "none.onnx")})) == f"model.path: model file not found: {tmp_path / 'none.onnx'}"


def test_labels_that_do_not_match_the_class_count() -> None:
    message = _error(_config({"path": YOLOX, "task": "detection", "labels": ["a", "b"]}))
    assert message == "model.labels: 2 labels (config) but the model's output 'output' has 1 classes"


def test_a_secondary_model_on_a_primary_that_gives_no_boxes() -> None:
    config = _config(
        {"path": U2NETP, "task": "matting"},
        secondary=[{"name": "text", "path": REC, "task": "text_recognition"}],
    )
    assert _error(config) == (
        "secondary.0: needs a model that gives boxes, but model.task 'matting' gives none "
        "(detection, face_detection, text_detection do)"
    )
    tracking = _config({"path": U2NETP, "task": "matting"}, tracking={})
    assert _error(tracking).startswith("tracking: needs a model that gives boxes")


@pytest.mark.parametrize(
    ("secondary", "expected"),
    [
        ({"task": "matting"}, "secondary.0.task: 'matting' does not run on objects"),
        (
            {"task": "text_recognition", "classes": ["txt"]},
            "secondary.0.classes: 'txt' is not a label of the model (labels: text)",
        ),
        ({"task": "text_recognition", "min_scor": 1}, "secondary.0.min_scor: unknown key (did you mean min_score?)"),
        (
            {"task": "text_recognition", "path": "nope.onnx"},
            "secondary.0.path: model file not found: nope.onnx",
        ),
    ],
)
def test_secondary_errors_name_the_key(secondary: dict[str, Any], expected: str) -> None:
    item = {"name": "text", "path": REC, **secondary}
    assert _error(_config({"path": DET, "task": "text_detection"}, secondary=[item])).startswith(expected)


def test_config_level_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"secondary.0.reinfer_every: needs tracking"):
        _config(
            {"path": DET, "task": "text_detection"},
            secondary=[{"name": "t", "path": REC, "task": "text_recognition", "reinfer_every": 5}],
        )
    with pytest.raises(ConfigError, match=r"secondary.1.name: duplicate name 't'"):
        _config(
            {"path": DET, "task": "text_detection"},
            secondary=[
                {"name": "t", "path": REC, "task": "text_recognition"},
                {"name": "t", "path": REC, "task": "text_recognition"},
            ],
        )
    with pytest.raises(ConfigError, match=r"model.task: 'text_recognition' runs on detected objects"):
        check(_config({"path": REC, "task": "text_recognition"}))


def test_stages_of_a_tracking_cascade_split_and_fused() -> None:
    model = {"path": DET, "task": "text_detection"}
    secondary = [{"name": "text", "path": REC, "task": "text_recognition", "reinfer_every": 10}]
    tracked = _config(model, secondary=secondary, tracking={"interval": 2})
    split = [s for s in stage_specs(tracked) if not s.writes_output]
    assert [s.name for s in split] == ["preprocess", "infer", "postprocess", "track", "secondary"]
    assert [s.name for s in split if s.ordered] == ["track", "secondary"]
    assert [s.name for s in split if s.feeds_tracks] == ["track"]
    plain = stage_specs(_config(model, secondary=[{"name": "text", "path": REC, "task": "text_recognition"}]))
    assert not any(s.ordered for s in plain)  # no tracking, no per-track reuse: nothing stateful
    fused, *outputs = stage_specs(_config(model, tracking={}, stages={"fuse": True}))
    assert all(s.writes_output for s in outputs)
    assert fused.name == "infer" and fused.ordered and fused.feeds_tracks
    assert fused.members == ("preprocess", "infer", "postprocess", "track")
