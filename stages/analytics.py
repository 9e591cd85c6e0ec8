"""Lines and zones on tracks: counts in and out of a line, occupancy, entries, exits and dwell of a zone.

It runs inside the tracking stage, right after the tracker (stages.tracking), so it sees each
source's tracked detections in seq order on one worker, and keeps its counts per source. The rules
are supervision's (its LineZone with one anchor, its PolygonZone), so its counts are the reference's:

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
    """One line's state on one source: each track's last side within the segment, and the counts."""

    name: str
    start: tuple[float, float]
    end: tuple[float, float]
    classes: Collection[str | int] | None
    sides: dict[int, bool] = field(default_factory=dict)
    counts: dict[str, Counter[str]] = field(default_factory=lambda: {"in": Counter(), "out": Counter()})

    def __post_init__(self) -> None:
        dx, dy = self.end[0] - self.start[0], self.end[1] - self.start[1]
        norm = math.hypot(dx, dy)
        # The perpendiculars through the ends, pointing opposite ways (supervision's limits).
        px, py = -dy / norm, dx / norm
        self._limits = (
            (self.start, (self.start[0] + px, self.start[1] + py)),
            (self.end, (self.end[0] - px, self.end[1] - py)),
        )

    def within(self, point: tuple[float, float]) -> bool:
        """Whether the point lies between the perpendiculars through the line's ends."""
        first = _cross(*self._limits[0], point) > 0
        second = _cross(*self._limits[1], point) > 0
        return first == second

    def see(self, track_id: int, point: tuple[float, float]) -> str | None:
        """The direction the track crossed in, `in` or `out`, if it did since it was last seen within."""
        if not self.within(point):
            return None
        side = _cross(self.start, self.end, point) < 0
        before = self.sides.get(track_id)
        self.sides[track_id] = side
        if before is None or before == side:
            return None
        return "in" if side else "out"

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
        self.width, self.height = width, height
        lines, zones = config.pixels(width, height)
        by_name = {name: classes for _, _, name, _, classes in config.shapes()}
        self.lines = [Line(name, points[0], points[1], by_name[name]) for name, points in lines.items()]
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
        tracked = [d for d in found if d.get("track_id") is not None]
        for line in self.lines:
            for d in tracked:
                if not _wanted(line.classes, d):
                    continue
                direction = line.see(int(d["track_id"]), anchor_of(d["box"], self.anchor))
                if direction is not None:
                    line.counts[direction][_class_key(d)] += 1
                    events.append(_event("crossed", d, line=line.name, direction=direction))
            for gone in [t for t in line.sides if t not in alive]:
                del line.sides[gone]
        for zone in self.zones:
            events += self._zone(zone, tracked, alive, now)
        return {
            "lines": {line.name: line.state() for line in self.lines},
            "zones": {zone.name: zone.state(now) for zone in self.zones},
            "events": events,
        }

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


def _event(kind: str, detection: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {"event": kind, **extra, "track_id": int(detection["track_id"]), "label": _class_key(detection)}


class Analytics:
    """The analytics of every configured source, each started on the source's first frame."""

    def __init__(self, configs: Mapping[str, SourceAnalyticsConfig]) -> None:
        self.configs = dict(configs)
        self._sources: dict[str, SourceAnalytics] = {}

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
