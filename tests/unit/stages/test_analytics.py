"""Lines and zones on tracks (stages.analytics): the counts equal supervision's LineZone and
PolygonZone fed with the same tracks; events, per-class counts, class filters, start errors."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from framewire.config.analytics import SourceAnalyticsConfig
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import Frame
from framewire.stages.analytics import Analytics, SourceAnalytics
from framewire.stages.tracking import TrackStage, resolve_tracking

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = ROOT / ".venv" / "supervision-ref"
SUPERVISION = "supervision==0.25.1"  # MIT licence; the reference, never imported by framewire
WIDTH, HEIGHT = 640, 360
LINE = ((320.0, 40.0), (320.0, 300.0))
ZONE = ((400.0, 80.0), (600.0, 100.0), (580.0, 330.0), (420.0, 300.0))


@pytest.fixture(scope="module")
def sv() -> ModuleType:
    """supervision, installed once into .venv/supervision-ref and imported from there (last on the
    path, so framewire's own numpy and OpenCV stay the ones in use)."""
    if not (REFERENCE / "supervision").is_dir():
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--target", str(REFERENCE), SUPERVISION],
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert done.returncode == 0, f"could not install the reference {SUPERVISION}: {done.stderr[-2000:]}"
    if str(REFERENCE) not in sys.path:
        sys.path.append(str(REFERENCE))
    import supervision

    return supervision


def _scene(frames: int = 160, seed: int = 7) -> list[list[dict[str, Any]]]:
    """Detections of objects walking across the line and through the zone, back and forth, some
    past the line's ends, with jitter: deterministic."""
    rng = np.random.default_rng(seed)
    movers = [  # start x, start y, dx, dy, first frame, last frame, class
        (100, 120, 5.0, 0.5, 0, 150, (0, "person")),
        (560, 200, -5.0, 0.0, 5, 155, (2, "car")),
        (220, 150, 4.0, -0.2, 10, 130, (0, "person")),
        (250, 20, 2.5, 0.0, 0, 100, (0, "person")),  # bottom at y=80..: within the segment
        (200, 300, 3.0, 0.4, 20, 159, (2, "car")),  # bottom below the line's end: never within
        (380, 150, 1.5, 1.0, 30, 140, (0, "person")),
        (150, 60, 6.0, 2.0, 40, 160, (2, "car")),
    ]
    out: list[list[dict[str, Any]]] = [[] for _ in range(frames)]
    for x0, y0, dx, dy, first, last, (class_id, label) in movers:
        for f in range(first, min(last, frames)):
            t = f - first
            # Back and forth: after 60 frames the object turns round.
            turn = t if t < 60 else 120 - t
            x = x0 + dx * turn + rng.normal(0, 1.5)
            y = y0 + dy * turn + rng.normal(0, 1.5)
            w, h = (30.0, 60.0) if label == "person" else (70.0, 40.0)
            out[f].append(
                {"box": [round(x, 2), round(y, 2), w, h], "score": 0.9, "class_id": class_id, "label": label}
            )
    return out


def _tracked(scene: list[list[dict[str, Any]]], config: SourceAnalyticsConfig) -> list[Frame]:
    """The scene through the real tracking stage with analytics on; each frame's `meta["alive"]`:
    the tracks the tracker still keeps after it."""
    stage = TrackStage(resolve_tracking({}), Analytics({"cam": config}))
    done: list[Frame] = []
    for seq, found in enumerate(scene):
        frame = Frame("cam", seq, seq, seq / 25, WIDTH, HEIGHT)
        frame.result = {"detections": found}
        done += list(stage.process(frame))
        tracker = stage._trackers["cam"]
        frame.meta["alive"] = {t.track_id for t in tracker.tracked} | {t.track_id for t in tracker.lost}
    return done


def _config(**extra: Any) -> SourceAnalyticsConfig:
    return SourceAnalyticsConfig.model_validate(
        {"lines": [{"name": "door", "start": LINE[0], "end": LINE[1]}],
         "zones": [{"name": "yard", "polygon": ZONE}], **extra}
    )  # fmt: skip


def _sv_detections(sv: ModuleType, found: list[dict[str, Any]]) -> Any:
    """The tracked detections for supervision, each box shrunk to its bottom-centre: the anchor both
    count on. (PolygonZone clips a whole box to the zone's bounding box before taking its anchor,
    which moves the anchor of a box that reaches past the zone's right or bottom edge into the zone;
    framewire takes the box's own anchor, so the reference gets the points.)"""
    tracked = [d for d in found if "track_id" in d]
    points = [(x + w / 2, y + h) for x, y, w, h in (d["box"] for d in tracked)]
    xyxy = np.array([[x, y, x, y] for x, y in points], dtype=np.float64)
    return sv.Detections(
        xyxy=xyxy.reshape(-1, 4),
        class_id=np.array([d["class_id"] for d in tracked], dtype=int),
        tracker_id=np.array([d["track_id"] for d in tracked], dtype=int),
    )


def test_counts_equal_supervision_line_zone_and_polygon_zone(sv: ModuleType) -> None:
    frames = _tracked(_scene(), _config())
    line = sv.LineZone(sv.Point(*LINE[0]), sv.Point(*LINE[1]), triggering_anchors=[sv.Position.BOTTOM_CENTER])
    zone = sv.PolygonZone(np.array(ZONE, dtype=np.int64))
    labels = {0: "person", 2: "car"}
    inside: dict[int, int] = {}  # track id -> class: in the zone when last seen, and still tracked
    entries: Counter[int] = Counter()
    exits: Counter[int] = Counter()
    crossings = entered_events = 0
    for frame in frames:
        assert frame.result is not None
        found = frame.result["detections"]
        detections = _sv_detections(sv, found)
        line.trigger(detections)
        in_zone = zone.trigger(detections) if len(detections) else np.zeros(0, dtype=bool)
        # Entries and exits from supervision's in-zone answers, per track (PolygonZone has none).
        for t, c, z in zip(detections.tracker_id.tolist(), detections.class_id.tolist(), in_zone, strict=True):
            if z and t not in inside:
                inside[t] = c
                entries[c] += 1
            elif not z and t in inside:
                exits[inside.pop(t)] += 1
        for t in [t for t in inside if t not in frame.meta["alive"]]:
            exits[inside.pop(t)] += 1
        counted = frame.result["analytics"]
        door, yard = counted["lines"]["door"], counted["zones"]["yard"]
        assert door["in"] == {labels[c]: n for c, n in line.in_count_per_class.items()}, frame.seq
        assert door["out"] == {labels[c]: n for c, n in line.out_count_per_class.items()}, frame.seq
        assert sum(yard["occupancy"].values()) == zone.current_count, frame.seq
        assert yard["entries"] == {labels[c]: n for c, n in entries.items()}, frame.seq
        assert yard["exits"] == {labels[c]: n for c, n in exits.items()}, frame.seq
        crossings += sum(e["event"] == "crossed" for e in counted["events"])
        entered_events += sum(e["event"] == "entered" for e in counted["events"])
    # The scene is worth testing: both directions crossed, both classes, entries and exits.
    assert line.in_count >= 3 and line.out_count >= 3, (line.in_count, line.out_count)
    assert set(line.in_count_per_class) == {0, 2}
    assert sum(entries.values()) >= 3 and sum(exits.values()) >= 2
    assert crossings == line.in_count + line.out_count
    assert entered_events == sum(entries.values())


def test_normalised_points_count_as_their_pixels() -> None:
    scene = _scene(120)
    pixels = _tracked(scene, _config())
    normalised = _tracked(
        scene,
        SourceAnalyticsConfig.model_validate(
            {"normalized": True,
             "lines": [{"name": "door", "start": [0.5, 40 / 360], "end": [0.5, 300 / 360]}],
             "zones": [{"name": "yard", "polygon": [[x / WIDTH, y / HEIGHT] for x, y in ZONE]}]}
        ),
    )  # fmt: skip
    last = [f.result["analytics"] for f in (pixels[-1], normalised[-1]) if f.result]
    assert last[0]["lines"]["door"]["in"] == last[1]["lines"]["door"]["in"]
    assert last[0]["zones"]["yard"]["entries"] == last[1]["zones"]["yard"]["entries"]


def test_events_dwell_and_class_filter() -> None:
    """A car drives into the zone and out again: entered, then left after its dwell in video time;
    a line that counts only persons ignores it."""
    config = SourceAnalyticsConfig.model_validate(
        {"lines": [{"name": "walk", "start": [320, 0], "end": [320, 360], "classes": ["person"]}],
         "zones": [{"name": "bay", "polygon": [[300, 0], [500, 0], [500, 360], [300, 360]]}]}
    )  # fmt: skip
    state = SourceAnalytics(config, WIDTH, HEIGHT)
    car = {"class_id": 2, "label": "car", "track_id": 4}
    events: list[dict[str, Any]] = []
    for step, x in enumerate(range(200, 620, 20)):
        counted = state.update([{**car, "box": [x, 100, 40, 40]}], {4}, step * 0.5)
        events += counted["events"]
    assert [e["event"] for e in events] == ["entered", "left"]
    entered, left = events
    assert entered == {"event": "entered", "zone": "bay", "track_id": 4, "label": "car"}
    # Anchor x = box x + 20: in from x=280 (step 4, t=2.0), out from x=500 (step 15, t=7.5).
    assert left["dwell_s"] == 5.5
    assert counted["lines"]["walk"] == {"in": {}, "out": {}, "points": [[320, 0], [320, 360]]}
    assert counted["zones"]["bay"]["occupancy"] == {} and counted["zones"]["bay"]["exits"] == {"car": 1}


def test_a_track_the_tracker_drops_inside_a_zone_has_left() -> None:
    state = SourceAnalytics(_config(), WIDTH, HEIGHT)
    person = {"class_id": 0, "label": "person", "track_id": 9, "box": [480, 150, 30, 60]}
    assert state.update([person], {9}, 1.0)["zones"]["yard"]["occupancy"] == {"person": 1}
    state.update([person], {9}, 1.5)
    still = state.update([], {9}, 2.0)  # lost but kept by the tracker: not seen now, not left either
    assert still["events"] == [] and still["zones"]["yard"]["occupancy"] == {}
    assert still["zones"]["yard"]["dwell_s"] == {"9": 1.0} and still["zones"]["yard"]["exits"] == {}
    gone = state.update([], set(), 3.0)  # dropped: it left, having stayed until it was last seen
    assert gone["events"] == [
        {"event": "left", "zone": "yard", "track_id": 9, "label": "person", "dwell_s": 0.5, "lost": True}
    ]
    assert gone["zones"]["yard"]["exits"] == {"person": 1} and gone["zones"]["yard"]["dwell_s"] == {}


def test_a_line_outside_a_streams_frame_fails_on_its_first_frame() -> None:
    config = SourceAnalyticsConfig.model_validate({"lines": [{"name": "far", "start": [10, 10], "end": [900, 10]}]})
    with pytest.raises(ValueError, match=r"^analytics: lines.0: 'far' has the point \[900, 10\] outside the 640x360 frame$"):
        Analytics({"cam": config}).update("cam", WIDTH, HEIGHT, [], set(), 0.0)


def test_the_end_of_a_source_drops_its_counts() -> None:
    stage = TrackStage(resolve_tracking({}), Analytics({"cam": _config()}))
    frames = _tracked(_scene(100), _config())
    assert frames[-1].result and frames[-1].result["analytics"]["lines"]["door"]["in"]
    for frame in _tracked(_scene(100), _config())[:1]:
        assert frame.result is not None
    list(stage.flush("cam"))
    assert stage.analytics is not None and "cam" not in stage.analytics._sources
    frame = Frame("other", 0, 0, 0.0, WIDTH, HEIGHT)
    frame.result = {"detections": []}
    (out,) = stage.process(frame)
    assert out.result is not None and "analytics" not in out.result  # a source without lines or zones


def test_the_analytics_composite_draws_lines_and_zones_with_their_counts() -> None:
    from framewire.stages.composite import resolve_composite
    from framewire.stages.tasks.base import Result

    state = SourceAnalytics(_config(), WIDTH, HEIGHT)
    person = {"class_id": 0, "label": "person", "track_id": 3}
    state.update([{**person, "box": [280, 100, 30, 60]}], {3}, 0.0)
    counted = state.update([{**person, "box": [480, 150, 30, 60]}], {3}, 0.04)
    assert counted["lines"]["door"]["in"] == {"person": 1}  # walking down the line, it came from the right
    composite = resolve_composite("analytics", {"line_color": [0, 0, 255], "zone_color": [0, 255, 0], "fill": 0})
    frame = np.zeros((HEIGHT, WIDTH, 3), dtype=np.uint8)
    composite.apply(frame, Result(data={"detections": [], "analytics": counted}))
    assert (frame[200, 320] == (0, 0, 255)).all()  # on the line
    assert (frame[90, 500] == (0, 255, 0)).all()  # on the zone's top edge, (400, 80)-(600, 100)
    assert frame[150:250, 100:250].max() == 0  # nowhere near either
    untouched = np.zeros_like(frame)
    composite.apply(untouched, Result(data={"detections": []}))
    assert untouched.max() == 0
    with pytest.raises(ConfigError, match=r"^composite.0.fill: "):
        resolve_composite("analytics", {"fill": 2})


def test_the_hub_counts_events_and_sets_occupancy_in_metrics() -> None:
    """pipeline.ops.track_counts, fed the results the tracking stage writes: one frame, once."""
    from framewire.pipeline.ops import telemetry, track_counts

    metrics = telemetry.declare(telemetry.Metrics())  # the registry, wherever it lives
    frames = _tracked(_scene(), _config())
    for frame in frames:
        track_counts.count(metrics, "cam", frame.result)
    last = frames[-1].result["analytics"] if frames[-1].result else {}
    door, yard = last["lines"]["door"], last["zones"]["yard"]
    for direction in ("in", "out"):
        for cls, n in door[direction].items():
            assert metrics.value(
                "framewire_line_crossings_total", source="cam", line="door", direction=direction, **{"class": cls}
            ) == n
    for cls, n in yard["entries"].items():
        assert metrics.value("framewire_zone_entries_total", source="cam", zone="yard", **{"class": cls}) == n
    for cls, n in yard["exits"].items():
        assert metrics.value("framewire_zone_exits_total", source="cam", zone="yard", **{"class": cls}) == n
    occupancy = {dict(k)["class"]: v for k, v in metrics.values("framewire_zone_occupancy").items()}
    assert {c: v for c, v in occupancy.items() if v} == yard["occupancy"]
    text = metrics.render()
    assert 'framewire_line_crossings_total{class="person",direction="in",line="door",source="cam"}' in text
    track_counts.count(metrics, "cam", {"detections": []})  # no analytics: nothing
    track_counts.count(metrics, "cam", {"analytics": {"events": ["bad", {"event": "crossed"}], "zones": []}})


def _walk(state: SourceAnalytics, track_id: int, xs: list[float], labels: list[str] | None = None,
          width: float = 30.0) -> list[dict[str, Any]]:  # fmt: skip
    """One track whose bottom-centre takes the x positions `xs` (y 200, within the line at x=320),
    with a label a frame (person by default): the crossing events."""
    events: list[dict[str, Any]] = []
    for step, x in enumerate(xs):
        label = (labels or ["person"] * len(xs))[step]
        d = {"track_id": track_id, "label": label, "class_id": {"person": 0, "bicycle": 1}[label],
             "box": [x - width / 2, 140.0, width, 60.0]}  # fmt: skip
        events += [e for e in state.update([d], {track_id}, step * 0.04)["events"] if e["event"] == "crossed"]
    return events


def _line(track_class: str = "detection", **extra: Any) -> SourceAnalyticsConfig:
    """A source with one vertical line at x=320, its keys `extra`."""
    line = {"name": "walk", "start": [320, 0], "end": [320, 360], **extra}
    return SourceAnalyticsConfig.model_validate({"track_class": track_class, "lines": [line]})


# Issue 39, the showcase's track 2 in small: one person sways on the line on their way across it.
SWAY = [290.0, 305.0, 318.0, 323.0, 316.0, 319.0, 324.0, 331.0, 350.0]


def test_hysteresis_counts_a_person_who_sways_on_the_line_once() -> None:
    plain = _walk(SourceAnalytics(_line(), WIDTH, HEIGHT), 2, SWAY)
    assert [e["direction"] for e in plain] == ["in", "out", "in"]  # supervision's rule: three crossings
    banded = _walk(SourceAnalytics(_line(hysteresis=8), WIDTH, HEIGHT), 2, SWAY)
    assert banded == [
        {"event": "crossed", "line": "walk", "direction": "in", "track_id": 2, "label": "person"}
    ]
    # Counted on the frame the anchor is more than 8 px past the line: x=331 (the eighth frame).
    state = SourceAnalytics(_line(hysteresis=8), WIDTH, HEIGHT)
    assert [len(_walk(state, 2, [x])) for x in SWAY] == [0] * 7 + [1, 0]


def test_hysteresis_as_a_share_of_the_box_scales_with_the_object() -> None:
    """0.25 of a 30 px wide box is 7.5 px; of a 120 px wide one, 30 px: the same sway on a near,
    large object stays inside the band, and a far object's small step past the line counts."""
    near = _walk(SourceAnalytics(_line(hysteresis=0.25, hysteresis_unit="box"), WIDTH, HEIGHT), 3,
                 [280.0, 300.0, 318.0, 335.0, 345.0, 352.0], width=120.0)  # fmt: skip
    assert [e["direction"] for e in near] == ["in"]  # at 352: 32 px past, over the band of 30
    state = SourceAnalytics(_line(hysteresis=0.25, hysteresis_unit="box"), WIDTH, HEIGHT)
    assert [len(_walk(state, 4, [x], width=120.0)) for x in (280.0, 300.0, 318.0, 335.0, 345.0)] == [0] * 5
    far = _walk(SourceAnalytics(_line(hysteresis=0.25, hysteresis_unit="box"), WIDTH, HEIGHT), 5, SWAY)
    assert [e["direction"] for e in far] == ["in"]


def test_once_counts_a_track_at_most_once_in_each_direction() -> None:
    there_and_back = [280.0, 360.0, 280.0, 360.0, 280.0, 360.0]
    plain = _walk(SourceAnalytics(_line(), WIDTH, HEIGHT), 6, there_and_back)
    assert [e["direction"] for e in plain] == ["in", "out", "in", "out", "in"]
    once = SourceAnalytics(_line(once=True), WIDTH, HEIGHT)
    assert [e["direction"] for e in _walk(once, 6, there_and_back)] == ["in", "out"]
    assert [e["direction"] for e in _walk(once, 7, there_and_back[:2])] == ["in"]  # another track counts
    line = once.lines[0]
    assert line.counts["in"] == {"person": 2} and line.counts["out"] == {"person": 1}


def test_a_track_keeps_the_class_it_had_most_often() -> None:
    """The showcase's track 14 went from person to bicycle: with track_class majority its crossing,
    its zone entry and their events keep person, the label it had most often so far."""
    labels = ["person", "person", "person", "bicycle", "bicycle"]
    xs = [280.0, 300.0, 310.0, 340.0, 360.0]
    (flipped,) = _walk(SourceAnalytics(_line(), WIDTH, HEIGHT), 8, xs, labels)
    assert flipped["label"] == "bicycle"  # the detection's label on the frame it crossed
    majority = SourceAnalytics(_line(track_class="majority"), WIDTH, HEIGHT)
    (kept,) = _walk(majority, 8, xs, labels)
    assert kept["label"] == "person" and majority.lines[0].counts["in"] == {"person": 1}
    # A tie keeps the label seen first; a class filter keeps or drops the whole track.
    (tie,) = _walk(SourceAnalytics(_line(track_class="majority"), WIDTH, HEIGHT), 9, xs[1:], labels[1:])
    assert tie["label"] == "person"
    only_bikes = SourceAnalytics(_line(track_class="majority", classes=["bicycle"]), WIDTH, HEIGHT)
    assert _walk(only_bikes, 10, xs, labels) == []
    bay = {"name": "bay", "polygon": [[330, 0], [640, 0], [640, 360], [330, 360]]}
    zone = SourceAnalyticsConfig.model_validate({"track_class": "majority", "zones": [bay]})
    state = SourceAnalytics(zone, WIDTH, HEIGHT)
    entered = []
    for step, (x, label) in enumerate(zip(xs, labels, strict=True)):
        d = {"track_id": 11, "label": label, "class_id": 0 if label == "person" else 1,
             "box": [x - 15, 140.0, 30.0, 60.0]}  # fmt: skip
        entered += state.update([d], {11}, step * 0.04)["events"]
    assert entered == [{"event": "entered", "zone": "bay", "track_id": 11, "label": "person"}]


def test_a_predicted_box_does_not_vote() -> None:
    """On frames the detector skipped (tracking.interval) the tracker's box carries the last label:
    it is counted under the track's class, but does not add to the vote."""
    state = SourceAnalytics(_line(track_class="majority"), WIDTH, HEIGHT)
    base = {"track_id": 12, "class_id": 1, "label": "bicycle", "box": [265.0, 140.0, 30.0, 60.0]}
    state.update([base], {12}, 0.0)
    for step in range(1, 4):  # three predicted person boxes
        state.update([{**base, "label": "person", "class_id": 0, "predicted": True}], {12}, step * 0.04)
    assert state.votes[12] == {("bicycle", 1): 1}


def test_the_new_keys_are_checked() -> None:
    with pytest.raises(ValueError, match="hysteresis"):
        _line(hysteresis=-1)
    with pytest.raises(ValueError, match="hysteresis_unit"):
        _line(hysteresis_unit="percent")
    with pytest.raises(ValueError, match="track_class"):
        _line(track_class="mode")
