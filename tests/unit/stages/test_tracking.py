"""ByteTrack and the tracking stage: confirmation, loss and recovery, frame gaps, predicted frames
(tracking.interval), per-source state and its end; and the schedule that skips the detector."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import Frame, Stage
from framewire.stages.bytetrack import ByteTracker, TrackerParams
from framewire.stages.schedule import DETECTOR, Schedule, Scheduled, skipped
from framewire.stages.tracking import TrackStage, resolve_tracking

pytestmark = pytest.mark.timeout(60)


def _box(x: float, y: float = 50.0, w: float = 40.0, h: float = 40.0) -> list[float]:
    return [x, y, x + w, y + h]


def test_first_frame_tracks_are_confirmed_later_ones_on_their_second_frame() -> None:
    tracker = ByteTracker()
    assert tracker.update(0, np.array([_box(10)]), np.array([0.9])) == {0: 1}
    assert tracker.update(1, np.array([_box(12), _box(200)]), np.array([0.9, 0.9])) == {0: 1}
    assert tracker.update(2, np.array([_box(14), _box(202)]), np.array([0.9, 0.9])) == {0: 1, 1: 2}


def test_low_score_boxes_continue_tracks_but_start_none() -> None:
    tracker = ByteTracker()
    tracker.update(0, np.array([_box(10)]), np.array([0.9]))
    assert tracker.update(1, np.array([_box(12), _box(300)]), np.array([0.3, 0.3])) == {0: 1}
    assert tracker.update(2, np.array([_box(300)]), np.array([0.3])) == {}
    assert tracker.update(3, np.array([_box(300)]), np.array([0.55])) == {}  # under new_track_threshold 0.6


def test_a_lost_track_is_found_again_within_lost_frames_and_gone_after() -> None:
    tracker = ByteTracker(TrackerParams(lost_frames=5))
    for frame in range(3):
        tracker.update(frame, np.array([_box(10 + 2 * frame)]), np.array([0.9]))
    for frame in range(3, 6):
        assert tracker.update(frame, np.zeros((0, 4)), np.zeros(0)) == {}
    assert tracker.update(6, np.array([_box(22)]), np.array([0.9])) == {0: 1}  # moving on: found again
    for frame in range(7, 14):
        tracker.update(frame, np.zeros((0, 4)), np.zeros(0))
    assert tracker.update(14, np.array([_box(38)]), np.array([0.9])) == {}  # gone: a new, unconfirmed track
    assert tracker.update(15, np.array([_box(40)]), np.array([0.9])) == {0: 2}


def test_a_gap_in_frames_predicts_that_many_steps() -> None:
    """An object moving 5 px a frame, seen on frames 0-3 then 10: still its track (1 IoU away)."""
    tracker = ByteTracker()
    for frame in range(4):
        tracker.update(frame, np.array([_box(100 + 5 * frame, w=20)]), np.array([0.9]))
    assert tracker.update(10, np.array([_box(150, w=20)]), np.array([0.9])) == {0: 1}


def test_predict_moves_confirmed_tracks_without_associating() -> None:
    tracker = ByteTracker()
    for frame in range(4):
        tracker.update(frame, np.array([_box(100 + 5 * frame)]), np.array([0.9]))
    moved = tracker.predict(6)
    assert [t.track_id for t in moved] == [1]
    # The filter's velocity is still catching up with 5 px a frame: ahead of frame 3's box, not past 130.
    assert 115.0 < moved[0].box()[0] <= 130.0
    assert tracker.update(7, np.array([_box(135)]), np.array([0.9])) == {0: 1}


def _frame(seq: int, found: list[dict[str, Any]] | None, source: str = "cam") -> Frame:
    frame = Frame(source, seq, seq, seq / 25, 640, 360)
    if found is None:
        frame.meta = {DETECTOR: False}
        frame.result = {"detections": []}
    else:
        frame.result = {"detections": found}
    return frame


def _det(x: float, score: float = 0.9, label: str = "car") -> dict[str, Any]:
    return {"box": [x, 50.0, 40.0, 40.0], "score": score, "class_id": 2, "label": label}


def _run(stage: TrackStage, frame: Frame) -> list[dict[str, Any]]:
    out = list(stage.process(frame))
    assert out == [frame] and frame.result is not None
    return frame.result["detections"]


def test_the_stage_gives_track_ids_and_predicts_skipped_frames() -> None:
    stage = TrackStage(resolve_tracking({}))
    assert TrackStage.facts.ordered and TrackStage.facts.feeds_tracks
    assert [d.get("track_id") for d in _run(stage, _frame(0, [_det(100), _det(300, label="bus")]))] == [1, 2]
    assert [d.get("track_id") for d in _run(stage, _frame(1, [_det(104), _det(304, label="bus")]))] == [1, 2]
    predicted = _run(stage, _frame(2, None))
    assert [(d["track_id"], d["label"], d["predicted"]) for d in predicted] == [
        (1, "car", True),
        (2, "bus", True),
    ]
    assert 104.0 < predicted[0]["box"][0] <= 108.0 and 304.0 < predicted[1]["box"][0] <= 308.0
    other = _run(stage, _frame(0, [_det(500)], source="other"))
    assert [d.get("track_id") for d in other] == [1]  # each source has its own tracks and ids
    assert list(stage.flush("cam")) == []
    assert [d.get("track_id") for d in _run(stage, _frame(5, [_det(500)]))] == [1]  # after the end: fresh


def test_the_stage_tracks_only_the_classes_asked() -> None:
    stage = TrackStage(resolve_tracking({"classes": ["bus"]}))
    found = _run(stage, _frame(0, [_det(100), _det(300, label="bus")]))
    assert [d.get("track_id") for d in found] == [None, 1]


def test_tracking_keys_are_checked_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^tracking.lost_frame: unknown key \(did you mean lost_frames\?\)$"):
        resolve_tracking({"lost_frame": 3})
    with pytest.raises(ConfigError, match=r"low_threshold 0.6 is above tracking.track_threshold 0.5"):
        resolve_tracking({"low_threshold": 0.6})


class _Counting(Stage):
    """Counts what reaches it, one call or a batch."""

    max_batch = 4

    def __init__(self) -> None:
        self.seen: list[int] = []

    def process(self, frame: Frame) -> Iterable[Frame]:
        self.seen.append(frame.seq)
        frame.result = {"detections": [{"box": [0, 0, 1, 1]}]}
        yield frame

    def process_batch(self, frames: Any) -> list[Frame]:
        for frame in frames:
            list(self.process(frame))
        return list(frames)


def test_the_schedule_runs_the_detector_on_one_frame_in_interval_plus_one() -> None:
    assert [s for s in range(10) if Schedule(2).runs(s)] == [0, 3, 6, 9]
    inner = _Counting()
    stage = Scheduled(inner, Schedule(2), last=True)
    assert stage.max_batch == 4
    frames = [Frame("cam", s, s, 0.0, 8, 8) for s in range(7)]
    for frame in frames[:3]:
        list(stage.process(frame))
    stage.process_batch(frames[3:])
    assert inner.seen == [0, 3, 6]
    assert [skipped(f) for f in frames] == [False, True, True, False, True, True, False]
    assert frames[1].result == {"detections": []} and frames[1].tensors == {}
