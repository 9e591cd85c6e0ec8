"""Postprocess stage: the task decodes the model outputs into its JSON result (and a matte)."""

from __future__ import annotations

from collections.abc import Iterable

from framewire.pipeline.frame import Frame, Stage
from framewire.pipeline.stagespec import Facts
from framewire.stages.tasks.base import Task


class Postprocess(Stage):
    """Decodes the model outputs, which travel inline, into the task's result."""

    facts = Facts()

    def __init__(self, task: Task) -> None:
        self.task = task

    def process(self, frame: Frame) -> Iterable[Frame]:
        result = self.task.postprocess(frame.tensors, frame.meta, frame.width, frame.height)
        frame.result = {**(frame.result or {}), **result.data}  # beside what steps found (speech, region)
        frame.tensors = dict(result.arrays)
        yield frame

