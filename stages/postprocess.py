"""Postprocess stage: the task decodes the model outputs into its JSON result (and a matte).

A source whose `score_threshold` was changed at run time (`PATCH /sources/{id}`) is decoded by a
copy of the task with that threshold, from its next frame; the other sources keep the task's own.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

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
        self.tasks: dict[str, Task] = {}
        """Sources with a score threshold of their own: the task copied with it."""

    def configure(self, source_id: str, settings: dict[str, Any]) -> None:
        threshold = settings.get("score_threshold")
        if threshold is None:
            self.tasks.pop(source_id, None)
            return
        task = copy.copy(self.task)  # what it read of the model is shared; only its parameters differ
        task.params = self.task.params.model_copy(update={"score_threshold": float(threshold)})
        self.tasks[source_id] = task

    def process(self, frame: Frame) -> Iterable[Frame]:
        task = self.tasks.get(frame.source_id, self.task)
        result = task.postprocess(frame.tensors, frame.meta, frame.width, frame.height)
        frame.result = {**(frame.result or {}), **result.data}  # beside what steps found (speech, region)
        frame.tensors = dict(result.arrays)
        if self.version is not None:
            frame.meta[MODEL] = self.version
        yield frame

