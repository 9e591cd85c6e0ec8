"""Preprocess stage: the task turns the decoded frame into the model input, in the frame pool or,
when inference runs in the same process, in a buffer of the process's own."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from framewire.pipeline.frame import Frame, Stage
from framewire.pipeline.stagespec import Facts
from framewire.stages.tasks.base import Task


class Preprocess(Stage):
    """Writes the model input into the slot's `input` region; passes the task's meta on.

    With `own_input` (a fused stage whose infer member reads the input in this process), the input
    goes into one of `own_input` buffers of this process instead, reused frame after frame
    (`Frame.scratch`): the pool then needs no `input` region, and the model reads memory that is
    still in the cache rather than a slot of its own for every frame in flight (framewire.app.compose
    `own_model_input`). A batch of up to `own_input` frames gets one buffer each.
    """

    facts = Facts(skips_stale=True)  # a frame already late is not worth preparing for the model

    def __init__(self, task: Task, own_input: int = 0) -> None:
        self.task = task
        self.own_input = own_input
        self._buffers: dict[tuple[int, int], list[np.ndarray]] = {}
        self._turn = 0

    def process(self, frame: Frame) -> Iterable[Frame]:
        if self.own_input:
            frame.scratch = {**(frame.scratch or {}), "input": self._buffer(frame.width, frame.height)}
        # Steps before it (a region) leave their meta for the task, which adds its own.
        frame.meta.update(self.task.preprocess_frame(frame, frame.region("input")))
        yield frame

    def _buffer(self, width: int, height: int) -> np.ndarray:
        """The next of this frame size's buffers, in turn."""
        ring = self._buffers.get((width, height))
        if ring is None:
            spec = self.task.input_spec(width, height)
            shape = tuple(int(d) for d in spec.shape)  # type: ignore[arg-type]  # a static input: input_spec of a size
            ring = self._buffers[(width, height)] = [np.zeros(shape, spec.dtype) for _ in range(self.own_input)]
        self._turn = (self._turn + 1) % len(ring)
        return ring[self._turn]
