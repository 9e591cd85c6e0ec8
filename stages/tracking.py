"""The tracking stage: a ByteTrack tracker per source gives each detection a `track_id`.

It keeps state per source, so it declares `ordered`: the hub sends every frame of a source to one
worker of this stage, in seq order, and its end of stream (`flush`) drops that source's tracks. If
that worker dies, the source moves to another worker and its tracks start again: ids jump, and
`framewire_source_moves_total` counts it. On a frame the primary model skipped (`tracking.interval`)
the confirmed tracks' predicted boxes become the frame's detections, marked `predicted: true`.
With `analytics:`, the source's lines and zones count the tracks here, right after the tracker, in
the same order and on the same worker (stages.analytics); their counts start again with its tracks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from framewire.pipeline.frame import Frame, Stage
from framewire.pipeline.stagespec import Facts
from framewire.stages import detections
from framewire.stages.analytics import KEY as ANALYTICS
from framewire.stages.analytics import Analytics
from framewire.stages.bytetrack import ByteTracker, TrackerParams
from framewire.stages.schedule import skipped
from framewire.stages.tasks import validation_error

log = logging.getLogger(__name__)


class TrackingParams(BaseModel):
    """The tracker's keys of `tracking:` (ByteTrack's thresholds; defaults: the authors')."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    track_threshold: float = Field(
        0.5, ge=0.0, le=1.0, description="Detections above this are matched first and may start tracks."
    )
    low_threshold: float = Field(
        0.1, ge=0.0, le=1.0, description="Detections between this and track_threshold only continue tracks."
    )
    new_track_threshold: float = Field(
        0.6, ge=0.0, le=1.0, description="A new track needs a detection scoring at least this."
    )
    match_threshold: float = Field(
        0.8, gt=0.0, le=1.0, description="Largest IoU cost (1 - IoU, times the score) of a first match."
    )
    lost_frames: int = Field(
        30, ge=0, le=100000, description="Frames a lost track is kept to be found again."
    )
    fuse_score: bool = Field(
        True, description="Weigh the IoU by the detection's score (ByteTrack's default)."
    )
    classes: tuple[str | int, ...] | None = Field(
        None, description="Track only these labels (or class ids); default: all."
    )

    @model_validator(mode="after")
    def _thresholds_in_order(self) -> TrackingParams:
        if self.low_threshold > self.track_threshold:
            raise ValueError(
                f"tracking.low_threshold {self.low_threshold} is above "
                f"tracking.track_threshold {self.track_threshold}"
            )
        return self


def resolve_tracking(params: Mapping[str, Any]) -> TrackingParams:
    """The tracker's keys validated; errors name `tracking.<key>`."""
    try:
        return TrackingParams.model_validate(dict(params))
    except ValidationError as exc:
        raise validation_error(exc, "tracking", TrackingParams, ("kind",)) from None


class TrackStage(Stage):
    """One tracker per source; reads and writes only the frame's detections."""

    facts = Facts(ordered=True, feeds_tracks=True)

    def __init__(self, params: TrackingParams, analytics: Analytics | None = None) -> None:
        self.params = params
        self.analytics = analytics
        self._trackers: dict[str, ByteTracker] = {}
        self._last: dict[str, dict[int, dict[str, Any]]] = {}
        """Per source, the last detection record of each track (what a predicted box is labelled)."""
        self._classes: dict[str, tuple[str | int, ...]] = {}
        """Sources whose `classes` were changed at run time (`configure`)."""

    def configure(self, source_id: str, settings: dict[str, Any]) -> None:
        """The source's classes, lines and zones changed (PATCH /sources/{id}): from its next frame."""
        classes = settings.get("classes")
        if classes is None:
            self._classes.pop(source_id, None)
        else:
            self._classes[source_id] = tuple(classes)
        if self.analytics is not None:
            self.analytics.configure(source_id, settings)

    def process(self, frame: Frame) -> Iterable[Frame]:
        tracker = self._trackers.get(frame.source_id)
        if tracker is None:
            tracker = self._trackers[frame.source_id] = ByteTracker(self._tracker_params())
            self._last[frame.source_id] = {}
        last = self._last[frame.source_id]
        result = dict(frame.result or {})
        if skipped(frame):
            bounds = np.array([frame.width, frame.height, frame.width, frame.height], dtype=np.float64)
            result[detections.KEY] = [
                self._predicted(track.track_id, np.clip(track.box(), 0, bounds), last)
                for track in tracker.predict(frame.seq)
            ]
        else:
            found = [dict(d) for d in detections.of(result)]
            chosen = [i for i, d in enumerate(found) if self._wanted(frame.source_id, d)]
            boxes = detections.boxes([found[i] for i in chosen])
            scores = np.array([float(found[i].get("score", 1.0)) for i in chosen], dtype=np.float64)
            for index, track_id in tracker.update(frame.seq, boxes, scores).items():
                record = found[chosen[index]]
                record["track_id"] = track_id
                last[track_id] = record
            alive = {t.track_id for t in tracker.tracked} | {t.track_id for t in tracker.lost}
            for track_id in [t for t in last if t not in alive]:
                del last[track_id]
            result[detections.KEY] = found
        if self.analytics is not None:
            alive = {t.track_id for t in tracker.tracked} | {t.track_id for t in tracker.lost}
            counted = self.analytics.update(
                frame.source_id, frame.width, frame.height, result[detections.KEY], alive, frame.time_s
            )
            if counted is not None:
                result[ANALYTICS] = counted
        frame.result = result
        yield frame

    def _predicted(self, track_id: int, box: Any, last: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
        before = last.get(track_id, {})
        return detections.make(
            box,
            float(before.get("score", 0.0)),
            int(before.get("class_id", 0)),
            str(before.get("label", "")),
            track_id=track_id,
            predicted=True,
        )

    def _wanted(self, source_id: str, detection: Mapping[str, Any]) -> bool:
        classes = self._classes.get(source_id, self.params.classes)
        return classes is None or detection.get("label") in classes or detection.get("class_id") in classes

    def _tracker_params(self) -> TrackerParams:
        p = self.params
        return TrackerParams(
            p.track_threshold,
            p.low_threshold,
            p.new_track_threshold,
            p.match_threshold,
            p.lost_frames,
            p.fuse_score,
        )

    def flush(self, source_id: str) -> Iterable[Frame]:
        """The source ended: its tracks (and counts) go."""
        self._trackers.pop(source_id, None)
        if self.analytics is not None:
            self.analytics.drop(source_id)
        self._last.pop(source_id, None)
        return ()
