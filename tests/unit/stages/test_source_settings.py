"""A source's settings changed at run time, in the stages (`Stage.configure`): lines and zones from
the next frame with the counts of a line that keeps its name, a source's classes, its score
threshold and its interval; other sources untouched; a fused stage hands them to its members."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest

from framewire.config.analytics import SourceAnalyticsConfig
from framewire.pipeline.frame import Frame, Stage
from framewire.stages.analytics import Analytics
from framewire.stages.fused import Fused
from framewire.stages.postprocess import Postprocess
from framewire.stages.schedule import Schedule, Scheduled, skipped
from framewire.stages.tasks.base import Task
from framewire.stages.tracking import TrackStage, resolve_tracking
from tests.unit.stages.test_analytics import HEIGHT, WIDTH

pytestmark = pytest.mark.timeout(60)

LINE = {"name": "door", "start": [320, 0], "end": [320, 360]}


def _person(x: float, track: int = 1) -> dict[str, Any]:
    return {"track_id": track, "label": "person", "class_id": 0, "box": [x - 15, 140.0, 30.0, 60.0]}


def _step(analytics: Analytics, source: str, x: float, t: float) -> dict[str, Any]:
    counted = analytics.update(source, WIDTH, HEIGHT, [_person(x)], {1}, t)
    assert counted is not None
    return counted


def test_a_moved_line_keeps_its_counts_and_counts_on_its_new_place_from_the_next_frame() -> None:
    one = SourceAnalyticsConfig.model_validate({"lines": [LINE]})
    analytics = Analytics({"cam": one, "other": one})
    for i, x in enumerate([300.0, 340.0]):  # crosses the line at x=320: one in
        _step(analytics, "cam", x, i * 0.04)
        _step(analytics, "other", x, i * 0.04)
    moved = {**LINE, "start": [400, 0], "end": [400, 360]}
    analytics.configure("cam", {"lines": [moved]})
    counted = _step(analytics, "cam", 360.0, 0.08)
    assert counted["lines"]["door"]["points"] == [[400.0, 0.0], [400.0, 360.0]]
    assert counted["lines"]["door"]["in"] == {"person": 1}  # carried over
    counted = _step(analytics, "cam", 420.0, 0.12)  # crosses the new place
    assert counted["lines"]["door"]["in"] == {"person": 2} and counted["events"][0]["line"] == "door"
    untouched = _step(analytics, "other", 420.0, 0.08)
    assert untouched["lines"]["door"]["points"] == [[320.0, 0.0], [320.0, 360.0]]
    assert untouched["lines"]["door"]["in"] == {"person": 1}


def test_a_zone_added_to_a_source_without_analytics_counts_and_a_renamed_line_starts_at_zero() -> None:
    analytics = Analytics({})
    assert analytics.update("new", WIDTH, HEIGHT, [_person(100.0)], {1}, 0.0) is None
    zone = {"name": "left", "polygon": [[0, 0], [200, 0], [200, 360], [0, 360]]}
    analytics.configure("new", {"zones": [zone], "lines": [LINE]})
    counted = _step(analytics, "new", 100.0, 0.04)
    assert counted["zones"]["left"]["occupancy"] == {"person": 1}
    assert counted["zones"]["left"]["entries"] == {"person": 1}
    for i, x in enumerate([300.0, 340.0]):
        counted = _step(analytics, "new", x, 0.08 + i * 0.04)
    assert counted["lines"]["door"]["in"] == {"person": 1}
    analytics.configure("new", {"zones": [zone], "lines": [{**LINE, "name": "gate"}]})
    counted = _step(analytics, "new", 350.0, 0.2)
    assert set(counted["lines"]) == {"gate"} and counted["lines"]["gate"]["in"] == {}
    assert counted["zones"]["left"]["entries"] == {"person": 1}  # the zone kept its name and its counts
    analytics.configure("new", {})  # no lines and no zones any more: none counted
    assert analytics.update("new", WIDTH, HEIGHT, [_person(100.0)], {1}, 0.3) is None


def test_a_change_keeps_the_configs_other_keys_and_a_bad_point_leaves_the_old_lines() -> None:
    job = SourceAnalyticsConfig.model_validate({"lines": [LINE], "anchor": "center"})
    analytics = Analytics({"cam": job})
    _step(analytics, "cam", 100.0, 0.0)
    analytics.configure("cam", {"zones": [{"name": "z", "polygon": [[0, 0], [10, 0], [10, 10]]}]})
    assert analytics.configs["cam"].anchor == "center" and [x.name for x in analytics.configs["cam"].lines] == ["door"]
    with pytest.raises(ValueError, match="outside the 640x360 frame"):
        analytics.configure("cam", {"lines": [{**LINE, "end": [320, 900]}]})
    assert _step(analytics, "cam", 100.0, 0.04)["lines"]["door"]["points"] == [[320.0, 0.0], [320.0, 360.0]]


def test_a_sources_classes_are_what_its_tracker_follows() -> None:
    stage = TrackStage(resolve_tracking({}), Analytics({}))
    stage.configure("cam", {"classes": ["car"]})
    found = [
        {"box": [10, 10, 20, 20], "score": 0.9, "label": "person", "class_id": 0},
        {"box": [100, 10, 20, 20], "score": 0.9, "label": "car", "class_id": 2},
    ]
    for source in ("cam", "other"):
        frame = Frame(source, 0, 0, 0.0, WIDTH, HEIGHT)
        frame.result = {"detections": [dict(d) for d in found]}
        (done,) = stage.process(frame)
        tracked = [d["label"] for d in done.result["detections"] if d.get("track_id") is not None]
        assert tracked == (["car"] if source == "cam" else ["person", "car"])


class _Counting(Stage):
    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def process(self, frame: Frame) -> Iterable[Frame]:
        self.seen.append((frame.source_id, frame.seq))
        yield frame


def test_a_sources_interval_is_decided_by_the_first_stage_and_followed_by_the_others() -> None:
    first, later = _Counting(), _Counting()
    pre, post = Scheduled(first, Schedule(0)), Scheduled(later, Schedule(0), follow=True, last=True)
    fused = Fused([("preprocess", pre), ("postprocess", post)])
    fused.configure("cam", {"interval": 2})  # the fused stage hands it to every member
    frames = [Frame(s, q, q, 0.0, 8, 8) for q in range(4) for s in ("cam", "other")]
    for frame in frames:
        list(fused.process(frame))
    assert [(f.source_id, f.seq) for f in frames if skipped(f)] == [("cam", 1), ("cam", 2)]
    assert first.seen == later.seen == [(f.source_id, f.seq) for f in frames if not skipped(f)]
    fused.configure("cam", {})  # back to the job's interval
    frame = Frame("cam", 5, 5, 0.0, 8, 8)
    list(fused.process(frame))
    assert not skipped(frame)


class _Threshold(Task):
    """A task that keeps the scores at or above its threshold (no model)."""

    name = "threshold"

    def check_model(self, inputs: Any, outputs: Any) -> None:
        return None

    @property
    def input_name(self) -> str:
        return "input"

    def input_spec(self, frame_width: int, frame_height: int) -> Any:
        raise NotImplementedError

    def preprocess(self, frame: Any, out: Any) -> dict[str, Any]:
        raise NotImplementedError

    def postprocess(self, outputs: Any, meta: Any, width: int, height: int) -> Any:
        from framewire.stages.tasks.base import Result

        kept = [float(s) for s in outputs["scores"] if s >= self.params.score_threshold]  # type: ignore[attr-defined]
        return Result({"scores": kept})


def test_a_sources_score_threshold_decodes_its_frames_only() -> None:
    from pydantic import Field

    from framewire.stages.tasks.base import TaskParams

    class Params(TaskParams):
        score_threshold: float = Field(0.5, description="The least score kept.")

    stage = Postprocess(_Threshold(Params()))
    stage.configure("cam", {"score_threshold": 0.8})
    got = {}
    for source in ("cam", "other"):
        frame = Frame(source, 0, 0, 0.0, 8, 8)
        frame.tensors = {"scores": np.array([0.6, 0.9], dtype=np.float32)}
        (done,) = stage.process(frame)
        got[source] = done.result["scores"]
    assert got == {"cam": [pytest.approx(0.9)], "other": [pytest.approx(0.6), pytest.approx(0.9)]}
    assert stage.task.params.score_threshold == 0.5  # type: ignore[attr-defined]
