"""A JPEG for each event a recording output keeps: the whole frame with its boxes, or the object's crop.

`pick: first` is the event's own frame. `pick: best` starts there too and, while the event's track
lives, writes the JPEG again each time the track's score beats its best so far (an encode only on
a better frame), so when the track ends the snapshot is its best-scored frame. A JPEG is written
beside its name and renamed over it: a reader never sees half a file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from framewire.config.recording import SnapshotsConfig
from framewire.media import yuv
from framewire.pipeline.errors import FramewireError
from framewire.stages import detections

BOX = (0, 200, 255)


@dataclass
class _Best:
    event_id: int
    path: str
    score: float


class Snapshots:
    """The snapshots of one output; `taken` says (event id, path, score) of each JPEG written."""

    def __init__(self, config: SnapshotsConfig) -> None:
        self.config = config
        self._best: dict[tuple[str, int], _Best] = {}

    def take(self, image: np.ndarray, found: Sequence[Mapping[str, Any]], event: Mapping[str, Any], path: str,
             event_id: int) -> float | None:  # fmt: skip
        """Write the event's snapshot; returns the score of its object (None when it has none)."""
        target = _object_of(found, event)
        score = float(target["score"]) if target is not None and "score" in target else None
        self._write(image, found, target, path)
        track = event.get("track_id")
        if self.config.pick == "best" and isinstance(track, int) and score is not None:
            self._best[(str(event.get("source")), track)] = _Best(event_id, path, score)
        return score

    def frame(
        self, source: str, image: np.ndarray, found: Sequence[Mapping[str, Any]]
    ) -> list[tuple[int, str, float]]:
        """`pick: best`: the snapshots this frame betters, written again."""
        better = []
        for d in found:
            track = d.get("track_id")
            best = self._best.get((source, track)) if isinstance(track, int) else None
            if best is not None and float(d.get("score", 0.0)) > best.score:
                best.score = float(d["score"])
                self._write(image, found, d, best.path)
                better.append((best.event_id, best.path, best.score))
        return better

    def track_ended(self, source: str, track_id: Any) -> None:
        if isinstance(track_id, int):
            self._best.pop((source, track_id), None)

    def forget(self, source: str) -> None:
        for key in [k for k in self._best if k[0] == source]:
            del self._best[key]

    def _write(self, image: np.ndarray, found: Sequence[Mapping[str, Any]], target: Mapping[str, Any] | None,
               path: str) -> None:  # fmt: skip
        bgr = yuv.to_bgr(image) if yuv.is_i420(image) else image
        if self.config.crop and target is not None:
            picture = _crop(bgr, target)
        else:
            picture = bgr.copy()
            for d in found:
                x1, y1, x2, y2 = (int(round(v)) for v in detections.xyxy(d))
                cv2.rectangle(picture, (x1, y1), (x2, y2), BOX, 2)
        ok, encoded = cv2.imencode(".jpg", picture, [cv2.IMWRITE_JPEG_QUALITY, self.config.quality])
        if not ok:
            raise FramewireError(f"recording output: JPEG encoding failed for {path}")
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path + ".tmp", "wb") as file:
            file.write(encoded.tobytes())
        os.replace(path + ".tmp", path)


def _object_of(found: Sequence[Mapping[str, Any]], event: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The detection an event is about: its track's, else the first of its label, else None."""
    track, label = event.get("track_id"), event.get("label")
    if isinstance(track, int):
        for d in found:
            if d.get("track_id") == track:
                return d
    return next((d for d in found if label is not None and str(d.get("label")) == str(label)), None)


def _crop(image: np.ndarray, detection: Mapping[str, Any], margin: float = 0.1) -> np.ndarray:
    """The detection's box and a margin around it, inside the frame (at least one pixel)."""
    height, width = image.shape[:2]
    x1, y1, x2, y2 = detections.xyxy(detection)
    dx, dy = (x2 - x1) * margin, (y2 - y1) * margin
    left, top = max(0, int(x1 - dx)), max(0, int(y1 - dy))
    right, bottom = min(width, max(left + 1, int(x2 + dx))), min(height, max(top + 1, int(y2 + dy)))
    return np.ascontiguousarray(image[top:bottom, left:right])
