"""Postprocess stage: the task decodes the model outputs into its JSON result (and a matte)."""

from __future__ import annotations

from collections.abc import Iterable

from framewire.pipeline.frame import Frame, Stage
from framewire.pipeline.stagespec import Facts
from framewire.stages.tasks.base import Task


MODEL = "model"
"""The `meta` key naming the version of the model that made the frame's result (`model.version`);
the outputs write it into the frame's record."""


class Postprocess(Stage):
    """Decodes the model outputs, which travel inline, into the task's result."""

    facts = Facts()

    def __init__(self, task: Task, version: str | None = None) -> None:
        """`version`: the model's label, stamped on each frame it decodes (`MODEL`)."""
        self.task = task
        self.version = version

    def process(self, frame: Frame) -> Iterable[Frame]:
        result = self.task.postprocess(frame.tensors, frame.meta, frame.width, frame.height)
        frame.result = {**(frame.result or {}), **result.data}  # beside what steps found (speech, region)
        frame.tensors = dict(result.arrays)
        if self.version is not None:
            frame.meta[MODEL] = self.version
        yield frame

