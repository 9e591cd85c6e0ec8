"""Lines and zones on tracks: counts in and out of a line, occupancy, entries, exits and dwell of a zone.

It runs inside the tracking stage, right after the tracker (stages.tracking), so it sees each
source's tracked detections in seq order on one worker, and keeps its counts per source. With the
defaults the rules are supervision's (its LineZone with one anchor, its PolygonZone), so its counts
are the reference's; a line's `hysteresis` and `once` and a source's `track_class: majority` change
them (Line, SourceAnalytics._classed; docs/guides/analytics.md shows each on the showcase clip):

- a track's anchor (bottom-centre of its box by default) is on one side of a line or the other by
  the sign of a cross product; the side is only looked at while the anchor is between the two
  perpendiculars through the line's ends (within the segment); when a track's side differs from its
  side the last time it was within the segment, it crossed: `in` from right to left walking from
  `start` to `end`, `out` the other way;
- a zone is a polygon filled into a mask (its edges are inside); a track is in it when its anchor,
  rounded up, falls on the mask. (supervision's PolygonZone first clips the whole box to the zone's
  bounding box, which moves the anchor of a box reaching past the zone's right or bottom edge into
  the zone; here the anchor is the box's own, so the reference is fed the anchor points.)
  Occupancy counts the tracks of this frame's detections in the zone. A track enters
  when it is seen in it and was not in it (or is new), leaves when it is seen out of it or when the
  tracker drops it; a track the detector missed for a few frames keeps its place. Its dwell is video
  time (the frame's `time`) since it entered.

Each frame's result gets `analytics` (docs/reference/wire-formats.md): the totals of every line and
zone, and the events of this frame (crossed, entered, left).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from framewire.config.analytics import SourceAnalyticsConfig
from framewire.config.source_settings import analytics_of

log = logging.getLogger(__name__)

KEY = "analytics"
"""The key of a frame's results (and of a record's `results`) that holds the counts and events."""


def anchor_of(box: Sequence[float], anchor: str) -> tuple[float, float]:
    """The anchor point of an [x, y, w, h] box: bottom-centre or centre."""
    x, y, w, h = (float(v) for v in box)
    return (x + w / 2.0, y + h if anchor == "bottom_center" else y + h / 2.0)


def _cross(a: tuple[float, float], b: tuple[float, float], p: tuple[float, float]) -> float:
    """The cross product of a->b and a->p: its sign says on which side of a->b the point p lies."""
    return (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])


def _class_key(detection: Mapping[str, Any]) -> str:
    label = detection.get("label")
    return str(label) if label not in (None, "") else str(detection.get("class_id", 0))


def _wanted(classes: Collection[str | int] | None, detection: Mapping[str, Any]) -> bool:
    return classes is None or detection.get("label") in classes or detection.get("class_id") in classes


@dataclass
class Line:
    """One line's state on one source: each track's last side within the segment, and the counts.

    `hysteresis` (in pixels, or a share of the box across the line with `unit` box) is a band on
    each side of the line: a track's side changes only once its anchor is past the band, so a track
    that jitters on the line crosses once. `once`: a track counts at most once in each direction.
    With neither, this is supervision's LineZone."""

    name: str
    start: tuple[float, float]
    end: tuple[float, float]
    classes: Collection[str | int] | None
    hysteresis: float = 0.0
    unit: str = "pixels"
    once: bool = False
    sides: dict[int, bool] = field(default_factory=dict)
    counts: dict[str, Counter[str]] = field(default_factory=lambda: {"in": Counter(), "out": Counter()})
    counted: dict[int, set[str]] = field(default_factory=dict)
    """With `once`: the directions each track has been counted in."""

    def __post_init__(self) -> None:
        dx, dy = self.end[0] - self.start[0], self.end[1] - self.start[1]
        norm = math.hypot(dx, dy)
        self._length = norm
        # The perpendiculars through the ends, pointing opposite ways (supervision's limits).
        px, py = -dy / norm, dx / norm
        self._normal = (px, py)
        self._limits = (
            (self.start, (self.start[0] + px, self.start[1] + py)),
            (self.end, (self.end[0] - px, self.end[1] - py)),
        )

    def within(self, point: tuple[float, float]) -> bool:
        """Whether the point lies between the perpendiculars through the line's ends."""
        first = _cross(*self._limits[0], point) > 0
        second = _cross(*self._limits[1], point) > 0
        return first == second

    def see(
        self, track_id: int, point: tuple[float, float], box: Sequence[float] = (0.0, 0.0, 0.0, 0.0)
    ) -> str | None:
        """The direction the track crossed in, `in` or `out`, if it did since it was last seen within
        (and, with `once`, had not yet been counted in that direction)."""
        if not self.within(point):
            return None
        cross = _cross(self.start, self.end, point)
        band = self._band(box)
        if band > 0 and abs(cross) / self._length <= band:
            return None  # inside the band: on neither side yet, the side it had stays
        side = cross < 0
        before = self.sides.get(track_id)
        self.sides[track_id] = side
        if before is None or before == side:
            return None
        direction = "in" if side else "out"
        if self.once:
            done = self.counted.setdefault(track_id, set())
            if direction in done:
                return None
            done.add(direction)
        return direction

    def _band(self, box: Sequence[float]) -> float:
        """The hysteresis in pixels: as given, or a share of the box's extent across the line."""
        if self.unit != "box" or not self.hysteresis:
            return self.hysteresis
        w, h = float(box[2]), float(box[3])
        return self.hysteresis * (abs(w * self._normal[0]) + abs(h * self._normal[1]))

    def forget(self, alive: Collection[int]) -> None:
        """Tracks the tracker dropped: their sides and counted directions go."""
        for gone in [t for t in self.sides if t not in alive]:
            del self.sides[gone]
        for gone in [t for t in self.counted if t not in alive]:
            del self.counted[gone]

    def state(self) -> dict[str, Any]:
        return {
            "in": dict(self.counts["in"]),
            "out": dict(self.counts["out"]),
            "points": [[round(v, 2) for v in self.start], [round(v, 2) for v in self.end]],
        }


@dataclass
class Zone:
    """One zone's state on one source: the tracks in it (and since when), and the counts."""

    name: str
    polygon: np.ndarray
    mask: np.ndarray
    classes: Collection[str | int] | None
    inside: dict[int, tuple[float, str, float]] = field(default_factory=dict)
    """Track id -> (video time it entered, its class, video time it was last seen in the zone)."""
    entries: Counter[str] = field(default_factory=Counter)
    exits: Counter[str] = field(default_factory=Counter)
    occupancy: Counter[str] = field(default_factory=Counter)
    """The tracks of this frame's detections in the zone, per class (supervision's current_count)."""

    def contains(self, box: Sequence[float], anchor: str) -> bool:
        """Whether the box's anchor, clipped to the mask and rounded up, falls on the zone's mask:
        what supervision's PolygonZone answers for that point."""
        right, bottom = self.mask.shape[1] - 1, self.mask.shape[0] - 1
        x, y = anchor_of(box, anchor)
        return bool(self.mask[math.ceil(min(max(y, 0.0), bottom)), math.ceil(min(max(x, 0.0), right))])

    def state(self, now: float) -> dict[str, Any]:
        return {
            "occupancy": dict(self.occupancy),
            "entries": dict(self.entries),
            "exits": dict(self.exits),
            "dwell_s": {str(t): round(now - since, 3) for t, (since, _, _) in sorted(self.inside.items())},
            "polygon": self.polygon.tolist(),
        }


class SourceAnalytics:
    """The lines and zones of one source, set in pixels on its first frame."""

    def __init__(self, config: SourceAnalyticsConfig, width: int, height: int) -> None:
        problem = config.outside(width, height)
        if problem is not None:
            raise ValueError(f"analytics: {problem}")
        self.anchor = config.anchor
        self.majority = config.track_class == "majority"
        self.votes: dict[int, Counter[tuple[Any, Any]]] = {}
        """With track_class majority: each track's labels so far (its detected frames)."""
        self.width, self.height = width, height
        lines, zones = config.pixels(width, height)
        by_name = {name: classes for _, _, name, _, classes in config.shapes()}
        self.lines = [
            Line(x.name, *_ends(lines[x.name]), x.classes, x.hysteresis, x.hysteresis_unit, x.once)
            for x in config.lines
        ]
        self.zones = []
        for name, corners in zones.items():
            polygon = np.asarray(corners, dtype=np.float64).astype(np.int32)
            x_max, y_max = polygon.max(axis=0)
            mask = np.zeros((int(y_max) + 2, int(x_max) + 2), dtype=np.uint8)
            cv2.fillPoly(mask, [polygon], color=1)
            self.zones.append(Zone(name, polygon, mask, by_name[name]))

    def update(
        self, found: Sequence[Mapping[str, Any]], alive: Collection[int], now: float
    ) -> dict[str, Any]:
        """Count this frame's tracked detections; `alive`: the tracks the tracker still keeps (a zone's
        track it dropped has left). The totals and this frame's events."""
        events: list[dict[str, Any]] = []
        tracked = self._classed([d for d in found if d.get("track_id") is not None], alive)
        for line in self.lines:
            for d in tracked:
                if not _wanted(line.classes, d):
                    continue
                direction = line.see(int(d["track_id"]), anchor_of(d["box"], self.anchor), d["box"])
                if direction is not None:
                    line.counts[direction][_class_key(d)] += 1
                    events.append(_event("crossed", d, line=line.name, direction=direction))
            line.forget(alive)
        for zone in self.zones:
            events += self._zone(zone, tracked, alive, now)
        return {
            "lines": {line.name: line.state() for line in self.lines},
            "zones": {zone.name: zone.state(now) for zone in self.zones},
            "events": events,
        }

    def carry(self, old: SourceAnalytics) -> None:
        """Lines and zones changed while the source runs: one that keeps its name keeps its counts,
        and, where its points did not change either, what it knows of each track (its side, who is
        in it); a line moved starts its tracks' sides again, so a track is not counted as crossing
        because the line jumped past it."""
        lines, zones = {x.name: x for x in old.lines}, {x.name: x for x in old.zones}
        for line in self.lines:
            before = lines.get(line.name)
            if before is None:
                continue
            line.counts = before.counts
            if (before.start, before.end) == (line.start, line.end):
                line.sides, line.counted = before.sides, before.counted
        for zone in self.zones:
            was = zones.get(zone.name)
            if was is None:
                continue
            zone.entries, zone.exits = was.entries, was.exits
            if np.array_equal(was.polygon, zone.polygon):
                zone.inside, zone.occupancy = was.inside, was.occupancy
        self.votes = old.votes

    def _classed(self, tracked: list[Mapping[str, Any]], alive: Collection[int]) -> list[Mapping[str, Any]]:
        """The tracked detections, each labelled with its track's class (`track_class`): as detected,
        or the label its track had most often so far (a predicted box, the tracker's guess, does not
        vote). A class filter then keeps or leaves out the whole track."""
        if not self.majority:
            return tracked
        for gone in [t for t in self.votes if t not in alive]:
            del self.votes[gone]
        classed: list[Mapping[str, Any]] = []
        for d in tracked:
            votes = self.votes.setdefault(int(d["track_id"]), Counter())
            own = (d.get("label"), d.get("class_id"))
            if not d.get("predicted"):
                votes[own] += 1
            # The first of a tie wins: a Counter keeps the order labels were first seen in.
            label, class_id = votes.most_common(1)[0][0] if votes else own
            classed.append(d if (label, class_id) == own else {**d, "label": label, "class_id": class_id})
        return classed

    def _zone(
        self, zone: Zone, tracked: Sequence[Mapping[str, Any]], alive: Collection[int], now: float
    ) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        seen: set[int] = set()
        zone.occupancy = Counter()
        for d in tracked:
            if not _wanted(zone.classes, d):
                continue
            track_id = int(d["track_id"])
            seen.add(track_id)
            now_in = zone.contains(d["box"], self.anchor)
            was = zone.inside.get(track_id)
            if now_in:
                zone.occupancy[_class_key(d)] += 1
            if now_in and was is not None:
                zone.inside[track_id] = (was[0], was[1], now)
            elif now_in:
                zone.inside[track_id] = (now, _class_key(d), now)
                zone.entries[_class_key(d)] += 1
                events.append(_event("entered", d, zone=zone.name))
            elif not now_in and was is not None:
                del zone.inside[track_id]
                zone.exits[was[1]] += 1
                events.append(_event("left", d, zone=zone.name, dwell_s=round(now - was[0], 3)))
        for track_id in [t for t in zone.inside if t not in seen and t not in alive]:
            since, cls, last = zone.inside.pop(track_id)
            zone.exits[cls] += 1
            events.append(  # its dwell: until it was last seen in the zone
                {"event": "left", "zone": zone.name, "track_id": track_id, "label": cls,
                 "dwell_s": round(last - since, 3), "lost": True}
            )  # fmt: skip
        return events


def _ends(points: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], tuple[float, float]]:
    """A line's two points (its config holds exactly two)."""
    return points[0], points[1]


def _event(kind: str, detection: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {"event": kind, **extra, "track_id": int(detection["track_id"]), "label": _class_key(detection)}


class Analytics:
    """The analytics of every configured source, each started on the source's first frame."""

    def __init__(self, configs: Mapping[str, SourceAnalyticsConfig]) -> None:
        self.job = dict(configs)
        """The config's `analytics:` entries."""
        self.configs = dict(configs)
        """Each source's lines and zones now: the config's, or as changed at run time (`configure`)."""
        self._sources: dict[str, SourceAnalytics] = {}

    def configure(self, source_id: str, settings: Mapping[str, Any]) -> None:
        """The source's settings changed at run time (validated by the hub): its lines and zones count
        from its next frame, a line or zone that keeps its name with its counts (`carry`)."""
        config = analytics_of(settings, self.job.get(source_id))
        if config is None:
            self.configs.pop(source_id, None)
            self._sources.pop(source_id, None)
            return
        if config == self.configs.get(source_id):
            return
        old = self._sources.get(source_id)
        if old is not None:  # a point outside the frame raises here, and the old ones stay
            new = SourceAnalytics(config, old.width, old.height)
            new.carry(old)
            self._sources[source_id] = new
        self.configs[source_id] = config

    def update(
        self, source_id: str, width: int, height: int, found: Sequence[Mapping[str, Any]],
        alive: Collection[int], now: float,
    ) -> dict[str, Any] | None:  # fmt: skip
        """This frame's `analytics` result, or None for a source without lines or zones."""
        config = self.configs.get(source_id)
        if config is None:
            return None
        state = self._sources.get(source_id)
        if state is not None and (state.width, state.height) != (width, height):
            log.warning(
                "source %s: the frame size changed from %sx%s to %sx%s: its lines and zones start again",
                source_id, state.width, state.height, width, height,
            )  # fmt: skip
            state = None
        if state is None:
            state = self._sources[source_id] = SourceAnalytics(config, width, height)
        return state.update(found, alive, now)

    def drop(self, source_id: str) -> None:
        """The source ended: its counts go."""
        self._sources.pop(source_id, None)
