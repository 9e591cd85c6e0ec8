"""The events the broker outputs send (stages.outputs.events), from records as the jsonl output writes them."""

from __future__ import annotations

from typing import Any

import pytest

from framewire.stages.outputs.events import EventDetector

pytestmark = pytest.mark.timeout(30)


def record(seq: int, *found: dict[str, Any], source: str = "cam", analytics: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    results: dict[str, Any] = {"detections": list(found)}
    if analytics is not None:
        results["analytics"] = {"lines": {}, "zones": {}, "events": analytics}
    return {"v": 2, "source": source, "seq": seq, "pts": seq * 10, "time": seq / 10, "results": results}


def det(label: str, track_id: int | None = None, class_id: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {"box": [1, 2, 3, 4], "score": 0.9, "class_id": class_id, "label": label}
    if track_id is not None:
        out["track_id"] = track_id
    return out


def names(events: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in events]


def run(detector: EventDetector, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for r in records for e in detector.record(r, wall=1.0)]


def test_a_class_appears_and_leaves_after_gone_after_frames_without_it() -> None:
    d = EventDetector(gone_after_frames=3)
    events = run(d, [record(0, det("face"), det("face")), record(1), record(2, det("face")), record(3), record(4), record(5)])
    assert names(events) == ["source", "class_appeared", "class_left"]
    appeared, left = events[1], events[2]
    assert (appeared["label"], appeared["count"], appeared["frame"], appeared["time"]) == ("face", 2, 0, 0.0)
    assert left["frame"] == 5  # three frames (3, 4, 5) without a face after frame 2
    assert all(e["v"] == 2 and e["source"] == "cam" and e["wall"] == 1.0 for e in events)


def test_tracks_start_and_end_and_the_source_end_closes_what_is_open() -> None:
    d = EventDetector(gone_after_frames=2)
    events = run(d, [record(0, det("car", 1)), record(1, det("car", 1), det("car", 2)), record(2, det("car", 2)),
                     record(3, det("car", 2))])  # fmt: skip
    assert names(events) == ["source", "class_appeared", "track_started", "track_started", "track_ended"]
    ended = events[-1]
    assert (ended["track_id"], ended["frames"], ended["duration_s"], ended["frame"]) == (1, 2, 0.1, 3)
    end = d.ended("cam", wall=2.0)
    assert names(end) == ["class_left", "track_ended", "source"]
    assert end[1]["track_id"] == 2 and end[1]["frames"] == 3
    assert end[-1]["state"] == "ended" and end[-1]["frames"] == 4 and end[-1]["frame"] == 3
    assert d.ended("cam") == []  # told twice: nothing more


def test_class_filters_leave_other_labels_out() -> None:
    d = EventDetector(classes=["person"])
    events = run(d, [record(0, det("car", 1), det("person", 2, class_id=1))])
    assert [(e["event"], e.get("label")) for e in events] == [
        ("source", None), ("class_appeared", "person"), ("track_started", "person")]


def test_analytics_events_pass_at_most_once_per_track_in_min_interval_s() -> None:
    d = EventDetector(min_interval_s=0.5)
    cross = {"event": "crossed", "line": "door", "direction": "in", "track_id": 7, "label": "person"}
    records = [record(seq, det("person", 7), analytics=[cross]) for seq in range(8)]  # times 0.0 .. 0.7
    crossed = [e for e in run(d, records) if e["event"] == "crossed"]
    # The track's start at 0.0 counts as its latest event: the next may come at 0.5.
    assert [e["frame"] for e in crossed] == [5]
    assert crossed[0]["line"] == "door" and crossed[0]["direction"] == "in"
    assert d.suppressed == 7


def test_sources_are_apart_and_announcements_pass_as_they_are() -> None:
    d = EventDetector()
    events = run(d, [record(0, det("face"), source="a"), record(0, source="b")])
    assert [(e["event"], e["source"]) for e in events] == [("source", "a"), ("class_appeared", "a"), ("source", "b")]
    segment = {"event": "segment", "source": "a", "output": "output0.video_file", "path": "x.mp4", "frames": 3}
    [passed] = d.announced(segment)
    assert passed["v"] == 2 and {k: passed[k] for k in segment} == segment and "wall" in passed
    offline = {"event": "source", "source": "a", "state": "offline", "wall": 12.5}  # the hub's, with its time
    assert d.announced(offline) == [{"v": 2, **offline}]
