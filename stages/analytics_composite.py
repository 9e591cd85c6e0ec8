"""The `analytics` composite: each counting line with its in and out counts, each zone with its
occupancy, drawn from the frame's `analytics` result (stages.analytics), which carries their points.

Like every composite it reads only the frame's result, so it runs on any worker; a frame without an
`analytics` result (a source with no lines or zones) is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import cv2
import numpy as np
from pydantic import Field

from framewire.stages.analytics import KEY
from framewire.stages.composite import BGR, Composite, CompositeParams
from framewire.stages.tasks.base import Result


class AnalyticsParams(CompositeParams):
    """Keys of an `analytics` composite."""

    kind: Literal["analytics"] = Field("analytics", description="Counting lines and zones with their counts.")
    line_color: BGR = Field((0, 255, 255), description="Lines and their counts, BGR.")
    zone_color: BGR = Field((255, 160, 0), description="Zone outlines and their occupancy, BGR.")
    fill: float = Field(0.15, ge=0.0, le=1.0, description="Opacity of the zones' fill; 0: outline only.")
    thickness: int = Field(2, ge=1, le=20, description="Line width in pixels.")
    font_scale: float = Field(0.6, gt=0.0, le=5.0, description="Size of the counts' text.")


class AnalyticsOverlay(Composite):
    """Lines as `name in N out M`, zones as `name N` (N: tracks in it now), all classes summed."""

    kind: ClassVar[str] = "analytics"
    Params: ClassVar[type[CompositeParams]] = AnalyticsParams
    params: AnalyticsParams

    def apply(self, frame: np.ndarray, result: Result) -> None:
        counted = result.data.get(KEY)
        if not isinstance(counted, Mapping):
            return
        p = self.params
        for name, zone in (counted.get("zones") or {}).items():
            polygon = np.asarray(zone["polygon"], dtype=np.int32).reshape(-1, 1, 2)
            if p.fill > 0:
                shaded = frame.copy()
                cv2.fillPoly(shaded, [polygon], _color(p.zone_color))
                cv2.addWeighted(shaded, p.fill, frame, 1.0 - p.fill, 0.0, dst=frame)
            cv2.polylines(frame, [polygon], True, _color(p.zone_color), p.thickness, cv2.LINE_AA)
            x, y = polygon.reshape(-1, 2).min(axis=0)
            self._text(frame, f"{name} {_total(zone.get('occupancy'))}", (int(x) + 4, int(y) + 18), p.zone_color)
        for name, line in (counted.get("lines") or {}).items():
            (x1, y1), (x2, y2) = ((round(float(a)), round(float(b))) for a, b in line["points"])
            cv2.line(frame, (x1, y1), (x2, y2), _color(p.line_color), p.thickness, cv2.LINE_AA)
            caption = f"{name} in {_total(line.get('in'))} out {_total(line.get('out'))}"
            self._text(frame, caption, ((x1 + x2) // 2 + 6, (y1 + y2) // 2), p.line_color)

    def _text(self, frame: np.ndarray, text: str, origin: tuple[int, int], color: Any) -> None:
        """Text on a dark box, so it reads on any picture (ASCII: Hershey fonts)."""
        scale = self.params.font_scale
        (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
        x, y = origin
        cv2.rectangle(frame, (x - 2, y - h - 2), (x + w + 2, y + base), (0, 0, 0), -1)
        cv2.putText(frame, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, _color(color), 1, cv2.LINE_AA)


def _total(counts: Mapping[str, int] | None) -> int:
    return sum((counts or {}).values())


def _color(color: Any) -> tuple[int, int, int]:
    b, g, r = color
    return (int(b), int(g), int(r))
