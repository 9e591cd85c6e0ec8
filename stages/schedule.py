"""`tracking.interval`: the primary model runs on one frame in interval + 1; the tracker fills the others.

Which frames run is decided by `seq` alone (seq % (interval + 1) == 0), so preprocess, infer and
postprocess need no state and keep their parallel workers; the tracking stage, which sees every frame
of a source in order, predicts the boxes of the frames they skipped. A skipped frame carries
`meta["detector"] = False` and no model input, outputs or detections past these stages. The first of
them (preprocess) decides, and the others follow the frame's mark, so that an interval changed at
run time for one source (`PATCH /sources/{id}`, `interval`) cannot reach a frame half way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from framewire.pipeline.frame import Frame, Stage, StageContext
from framewire.pipeline.wire.framepool import FramePool
from framewire.stages import detections

DETECTOR = "detector"
"""The meta key that is False on a frame the primary model skipped."""


@dataclass(frozen=True)
class Schedule:
    """Which frames the primary model runs on."""

    interval: int = 0

    def runs(self, seq: int) -> bool:
        return seq % (self.interval + 1) == 0


def skipped(frame: Frame) -> bool:
    """Whether the primary model skipped this frame (`tracking.interval`)."""
    return frame.meta.get(DETECTOR) is False


class Scheduled(Stage):
    """A preprocess, infer or postprocess stage that passes the frames its schedule skips."""

    def __init__(self, stage: Stage, schedule: Schedule, *, last: bool = False, follow: bool = False) -> None:
        """`follow`: a stage after the first (infer, postprocess), which follows the frame's mark;
        `last`: the postprocess stage, which gives a skipped frame an empty list of detections."""
        self.stage = stage
        self.schedule = schedule
        self.follow = follow
        self.last = last
        self.max_batch, self.max_delay_ms = stage.max_batch, stage.max_delay_ms
        self.schedules: dict[str, Schedule] = {}
        """Sources whose interval was changed at run time (`configure`)."""

    def start(self, ctx: StageContext) -> None:
        self.stage.start(ctx)

    def runs(self, frame: Frame) -> bool:
        """Whether the model runs on the frame: the first stage asks the source's schedule, the others
        follow its decision."""
        if self.follow:
            return not skipped(frame)
        return self.schedules.get(frame.source_id, self.schedule).runs(frame.seq)

    def configure(self, source_id: str, settings: dict[str, Any]) -> None:
        interval = settings.get("interval")
        if interval is None:
            self.schedules.pop(source_id, None)
        else:
            self.schedules[source_id] = Schedule(int(interval))
        self.stage.configure(source_id, settings)

    def process(self, frame: Frame) -> Iterable[Frame]:
        if self.runs(frame):
            return self.stage.process(frame)
        self._skip(frame)
        return (frame,)

    def process_batch(self, frames: Sequence[Frame]) -> list[Frame]:
        runs = [self.runs(f) for f in frames]
        running = [f for f, run in zip(frames, runs, strict=True) if run]
        for frame, run in zip(frames, runs, strict=True):
            if not run:
                self._skip(frame)
        if running:
            self.stage.process_batch(running)
        return list(frames)

    def _skip(self, frame: Frame) -> None:
        frame.meta = {DETECTOR: False}
        frame.tensors = {}
        if self.last:
            frame.result = {detections.KEY: []}

    def flush(self, source_id: str) -> Iterable[Frame]:
        return self.stage.flush(source_id)

    def stop(self) -> None:
        self.stage.stop()

    def describe(self) -> dict[str, Any]:
        return self.stage.describe()

    def pool_added(self, pool: FramePool) -> None:
        self.stage.pool_added(pool)

    def pool_removed(self, pool: FramePool) -> None:
        self.stage.pool_removed(pool)
