"""`analytics:`: counting lines and zones on the tracks of a source, keyed by source id.

The shapes are checked here (a line of two distinct points, a polygon of at least 3, normalised
coordinates within 0..1); what needs the model or the video (class names among the model's labels,
pixel points inside the frame) is checked at start by framewire.app.compose; the counting itself is
stages.analytics.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from framewire.config.base import _Model

Point = tuple[float, float]
NAME = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"


class LineConfig(_Model):
    """A counting line: a track crosses it when its anchor changes side within the segment."""

    name: str = Field(pattern=NAME, description="What it is called in records, events and metrics.")
    start: Point = Field(description="One end, [x, y]: pixels of the source frame, or 0..1 with normalized.")
    end: Point = Field(
        description="The other end. Walking from start to end, a track crossing from right to left "
        "counts `in` (supervision's LineZone convention), the other way `out`."
    )
    classes: tuple[str | int, ...] | None = Field(
        default=None, description="Count only these labels (or class ids) of the model; default: all."
    )
    hysteresis: float = Field(
        default=0.0,
        ge=0.0,
        description="How far past the line a track's anchor must go before its side changes (a "
        "crossing): in `hysteresis_unit`s. A track that jitters within this band of the line is not "
        "counted again and again. 0 (the default): supervision's plain rule, any change of side.",
    )
    hysteresis_unit: Literal["pixels", "box"] = Field(
        default="pixels",
        description="pixels: pixels of the frame (with normalized: true too); box: a share of the "
        "track's box across the line (its extent along the line's normal): 0.5 is half a box, so that "
        "near and far objects need the same part of a step.",
    )
    once: bool = Field(
        default=False,
        description="Count a track at most once in each direction: a track that crosses in, back out "
        "and in again counts one in and one out. false (the default): every crossing counts.",
    )

    @model_validator(mode="after")
    def _two_points(self) -> LineConfig:
        if self.start == self.end:
            raise ValueError(f"line {self.name!r}: start and end are the same point; a line needs two")
        return self


class ZoneConfig(_Model):
    """A polygon zone: occupancy now, entries, exits and dwell time of the tracks whose anchor is in it."""

    name: str = Field(pattern=NAME, description="What it is called in records, events and metrics.")
    polygon: tuple[Point, ...] = Field(
        description="Its corners, [[x, y], ...], at least 3: pixels of the source frame, or 0..1 with "
        "normalized."
    )
    classes: tuple[str | int, ...] | None = Field(
        default=None, description="Count only these labels (or class ids) of the model; default: all."
    )

    @field_validator("polygon")
    @classmethod
    def _three_points(cls, polygon: tuple[Point, ...]) -> tuple[Point, ...]:
        if len(polygon) < 3:
            raise ValueError(f"a polygon needs at least 3 points, this one has {len(polygon)}")
        return polygon


class SourceAnalyticsConfig(_Model):
    """The lines and zones of one source."""

    normalized: bool = Field(
        default=False,
        description="Points are fractions of the frame's width and height (0..1) instead of pixels.",
    )
    anchor: Literal["bottom_center", "center"] = Field(
        default="bottom_center",
        description="The point of a track's box that crosses lines and is in zones (supervision's "
        "PolygonZone default: bottom_center, where a person or vehicle meets the ground).",
    )
    track_class: Literal["detection", "majority"] = Field(
        default="detection",
        description="The class a track is counted as, by its lines and zones and in their events: "
        "detection (the default, supervision's): the label of the detection in this frame, so a "
        "track whose label flips moves the per-class totals; majority: the label it had most often so "
        "far (the first of a tie), one stable class per track.",
    )
    lines: tuple[LineConfig, ...] = Field(default=(), description="Counting lines.")
    zones: tuple[ZoneConfig, ...] = Field(default=(), description="Polygon zones.")

    def shapes(self) -> list[tuple[str, int, str, tuple[Point, ...], tuple[str | int, ...] | None]]:
        """Each line and zone as (`lines` or `zones`, its index, name, points as given, classes)."""
        lines = [("lines", i, x.name, (x.start, x.end), x.classes) for i, x in enumerate(self.lines)]
        return lines + [("zones", i, x.name, x.polygon, x.classes) for i, x in enumerate(self.zones)]

    @model_validator(mode="after")
    def _shapes(self) -> SourceAnalyticsConfig:
        names: set[str] = set()
        for kind, i, name, points, _ in self.shapes():
            if name in names:
                raise ValueError(f"{kind}.{i}.name: duplicate name {name!r}")
            names.add(name)
            if self.normalized and any(not (0.0 <= v <= 1.0) for p in points for v in p):
                raise ValueError(f"{kind}.{i}: {name!r} has a point outside 0..1 (normalized: true)")
        if not names:
            raise ValueError("no lines and no zones: give at least one, or leave the source out")
        return self

    def pixels(
        self, width: int, height: int
    ) -> tuple[dict[str, tuple[Point, ...]], dict[str, tuple[Point, ...]]]:
        """Each line's two points and each zone's corners in pixels of a `width` x `height` frame."""
        sx, sy = (float(width), float(height)) if self.normalized else (1.0, 1.0)

        def scaled(points: tuple[Point, ...]) -> tuple[Point, ...]:
            return tuple((x * sx, y * sy) for x, y in points)

        lines = {line.name: scaled((line.start, line.end)) for line in self.lines}
        zones = {zone.name: scaled(zone.polygon) for zone in self.zones}
        return lines, zones

    def outside(self, width: int, height: int) -> str | None:
        """The first line or zone with a point outside a `width` x `height` frame, described; or None."""
        lines, zones = self.pixels(width, height)
        for kind, shapes in (("lines", lines), ("zones", zones)):
            for i, (name, points) in enumerate(shapes.items()):
                for x, y in points:
                    if not (0.0 <= x <= width and 0.0 <= y <= height):
                        return (
                            f"{kind}.{i}: {name!r} has the point [{x:g}, {y:g}] outside the "
                            f"{width}x{height} frame"
                        )
        return None
