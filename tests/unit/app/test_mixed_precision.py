"""framewire.app.mixed_precision's check: the task's own results against fp32, or the raw outputs for a task
whose results hold neither boxes nor a matte."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from framewire.app.accuracy import Tolerance
from framewire.app.mixed_precision import CheckFrame, Judge, describe
from framewire.engines import mixed_precision as mp
from framewire.engines.quantize import QuantizeOptions, quantize_model
from framewire.stages.tasks.base import Result
from tests.unit.engines.test_mixed_precision import _feed, _two_branches

pytestmark = pytest.mark.timeout(60)


class _Task:
    """Just what Judge uses of a Task: postprocess. `boxes`: one detection per frame, where the
    largest output value of `ya` is (a box that moves when int8 moves the peak)."""

    def __init__(self, boxes: bool) -> None:
        self.boxes = boxes

    def postprocess(self, outputs: Mapping[str, np.ndarray], meta: Mapping[str, Any], width: int, height: int) -> Result:
        if not self.boxes:
            return Result({"label": "x"})
        _, channel, y, x = np.unravel_index(int(np.argmax(outputs["ya"])), outputs["ya"].shape)
        return Result({"detections": [{"box": [float(x), float(y + 8 * channel), 1.0, 1.0], "score": 1.0}]})


@pytest.fixture
def models(tmp_path: Path) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    source = _two_branches(tmp_path / "branches.onnx")
    out = tmp_path / "int8.onnx"
    feeds = [_feed(seed, outlier=500.0 if seed == 0 else 0.0) for seed in range(6)]
    quantize_model(source, out, feeds, options=QuantizeOptions(recipe="tensorrt", min_channels=0))
    return onnx.load(str(source)), onnx.load(str(out))


def _judge(task: _Task, fp32: onnx.ModelProto, tolerance: Tolerance, max_output_error: float) -> Judge:
    frames = [CheckFrame(8, 8, _feed(seed), {}, "clip.mp4") for seed in range(20, 30)]
    reference = mp.run_model(fp32, [frame.feed for frame in frames])
    return Judge(task, frames, reference, tolerance, max_output_error)  # type: ignore[arg-type]


def test_a_task_without_boxes_or_matte_is_held_to_the_output_error(models) -> None:  # type: ignore[no-untyped-def]
    fp32, qdq = models
    judge = _judge(_Task(boxes=False), fp32, Tolerance(), max_output_error=1e-3)
    passed, summary = judge.measure(qdq)
    assert not passed and summary["failures"][0].startswith("output error ")
    assert "faces" not in summary and "matte" not in summary
    passed, summary = judge.measure(mp.keep_float(qdq, fp32, ["Conv_a"]))
    assert passed and summary["output_error"] < 1e-3
    assert describe(summary).startswith("output error ")


def test_boxes_are_held_to_the_agreement(models) -> None:  # type: ignore[no-untyped-def]
    fp32, qdq = models
    judge = _judge(_Task(boxes=True), fp32, Tolerance(iou=0.9, min_agreement=1.0), max_output_error=0.0)
    passed, summary = judge.measure(qdq)
    assert not passed and summary["faces"]["agreement"] < 1.0
    assert summary["failures"] == [f"face agreement {summary['faces']['agreement']:.3f} < 1.0"]
    # the output error is reported, but boxes decide: max_output_error 0 does not fail this
    passed, summary = judge.measure(mp.keep_float(qdq, fp32, ["Conv_a"]))
    assert passed and summary["faces"]["agreement"] == 1.0 and summary["output_error"] > 0


def test_the_check_passes_on_each_video_not_only_pooled(models) -> None:  # type: ignore[no-untyped-def]
    """Ten frames of one video whose peak int8 moves, and thirty of another where the model is
    exact (the same fp32 frames on both sides): pooled, 30 of 40 boxes agree; the first video
    alone fails, named."""
    fp32, qdq = models
    mixed = mp.keep_float(qdq, fp32, ["Conv_b"])  # Conv_a, the one that moves the peak, stays int8
    frames = [CheckFrame(8, 8, _feed(seed), {}, "moving.mp4") for seed in range(20, 30)]
    frames += [CheckFrame(8, 8, {"a": np.zeros((1, 4, 8, 8), np.float32), "b": _feed(seed)["b"]}, {}, "still.mp4") for seed in range(30)]
    reference = mp.run_model(fp32, [frame.feed for frame in frames])
    judge = Judge(_Task(boxes=True), frames, reference, Tolerance(min_agreement=0.5), 0.0)  # type: ignore[arg-type]
    passed, summary = judge.measure(mixed)
    assert summary["faces"]["agreement"] >= 0.5
    assert summary["videos"]["still.mp4"]["agreement"] == 1.0
    assert summary["videos"]["moving.mp4"]["agreement"] < 0.5
    assert not passed and summary["failures"][0].startswith("moving.mp4: face agreement ")
    assert "by video: moving.mp4 " in describe(summary)
