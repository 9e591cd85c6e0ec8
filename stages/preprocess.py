"""Preprocess stage: the task turns the decoded frame into the model input, in the frame pool."""

from __future__ import annotations

from collections.abc import Iterable

from framewire.pipeline.frame import Frame, Stage
from framewire.stages.tasks.base import Task


class Preprocess(Stage):
    """Writes the model input into the slot's `input` region; passes the task's meta on."""

    def __init__(self, task: Task) -> None:
        self.task = task

    def process(self, frame: Frame) -> Iterable[Frame]:
        # Steps before it (a region) leave their meta for the task, which adds its own.
        frame.meta.update(self.task.preprocess_frame(frame, frame.region("input")))
        yield frame

