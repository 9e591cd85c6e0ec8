"""The detection task on a real model: the shipped YOLOX, raw (grid outputs) and with its decoding
appended to the graph (YOLOv5-style decoded rows), gives the same boxes either way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from framewire.app.compose.model import model_info
from framewire.engines.onnxruntime import OnnxRuntimeEngine
from framewire.stages import detections
from framewire.stages.tasks import resolve_task
from framewire.stages.tasks.detection_formats import grid_cells

pytestmark = pytest.mark.timeout(120)

YOLOX = Path(__file__).resolve().parents[3] / "assets/models/yolox_ddddocr/common_det.onnx"
PREPROCESS = {
    "rounding": "floor",
    "pad": "top_left",
    "channels": "bgr",
    "scale": "none",
    "score_threshold": 0.1,
}


def _decoded_copy(path: Path, out: Path) -> Path:
    """YOLOX with `decode_in_inference` appended: xy = (xy + grid) * stride, wh = exp(wh) * stride."""
    model = onnx.load(str(path))
    raw = model.graph.output[0].name
    grids, steps = [], []
    for stride in (8, 16, 32):
        xv, yv = np.meshgrid(np.arange(416 // stride), np.arange(416 // stride))
        grids.append(np.stack((xv, yv), 2).reshape(-1, 2))
        steps.append(np.full((grids[-1].shape[0], 1), stride))
    grid = np.concatenate(grids)[None].astype(np.float32)
    step = np.concatenate(steps)[None].astype(np.float32)
    assert grid.shape[1] == grid_cells(416, 416, (8, 16, 32))
    constants = {
        "grid": grid,
        "step": step,
        "s0": np.array([0], np.int64),
        "s2": np.array([2], np.int64),
        "s4": np.array([4], np.int64),
        "end": np.array([1 << 30], np.int64),
        "axis": np.array([2], np.int64),
    }
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
    model.graph.node.extend(
        [
            helper.make_node("Slice", [raw, "s0", "s2", "axis"], ["xy"]),
            helper.make_node("Slice", [raw, "s2", "s4", "axis"], ["wh"]),
            helper.make_node("Slice", [raw, "s4", "end", "axis"], ["rest"]),
            helper.make_node("Add", ["xy", "grid"], ["xy_grid"]),
            helper.make_node("Mul", ["xy_grid", "step"], ["xy_px"]),
            helper.make_node("Exp", ["wh"], ["wh_exp"]),
            helper.make_node("Mul", ["wh_exp", "step"], ["wh_px"]),
            helper.make_node("Concat", ["xy_px", "wh_px", "rest"], ["decoded"], axis=2),
        ]
    )
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("decoded", onnx.TensorProto.FLOAT, [1, 3549, 6]))
    onnx.save(model, str(out))
    return out


def _run(path: Path, frames: Sequence[np.ndarray], **params: object) -> list[list[dict]]:
    task = resolve_task("detection", {**PREPROCESS, **params})
    task.use_model(model_info(str(path), "model.path"))
    engine = OnnxRuntimeEngine(str(path), threads=1, dynamic_axes=task.dynamic_axes())
    out = []
    for frame in frames:
        height, width = frame.shape[:2]
        buffer = np.zeros(task.input_spec(width, height).shape, dtype=np.float32)
        meta = task.preprocess(frame, buffer)
        outputs = engine.infer({task.input_name: buffer}, task.output_names)
        out.append(task.postprocess(outputs, meta, width, height).data[detections.KEY])
    engine.close()
    return out


def test_yolox_raw_and_decoded_in_the_graph_give_the_same_boxes(
    tmp_path: Path, decode_frames: Callable[[str, Sequence[int]], list[np.ndarray]]
) -> None:
    frames = decode_frames("bikes.mp4", [100, 150])
    raw = _run(YOLOX, frames)  # format found: yolox
    decoded = _run(_decoded_copy(YOLOX, tmp_path / "decoded.onnx"), frames, format="yolov5")
    assert sum(len(found) for found in raw) >= 2
    for ours, theirs in zip(raw, decoded, strict=True):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(a["box"], b["box"], atol=0.02)
            assert a["score"] == pytest.approx(b["score"], abs=1e-4)
