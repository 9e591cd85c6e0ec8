"""Infer stage: runs the engine on the model input in the frame pool; outputs travel inline."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from engines.base import Engine
from pipeline.frame import Frame, StageContext
from stages.tasks.base import Task


class Infer:
    """One engine per worker process, created in `start` (sessions never cross a spawn)."""

    def __init__(self, task: Task, open_engine: Callable[[], Engine]) -> None:
        self.task = task
        self._open_engine = open_engine
        self.engine: Engine | None = None

    def start(self, ctx: StageContext) -> None:
        self.engine = self._open_engine()
        # The model as loaded (after any dimension rewrite) must fit the task; this also tells the
        # task which outputs it needs, so the others never leave this process.
        self.task.check_model(self.engine.inputs, self.engine.outputs)
        ctx.log.info("infer[%d]: %s on %s", ctx.index, self.engine.backend, self.engine.provider)

    def process(self, frame: Frame) -> Iterable[Frame]:
        assert self.engine is not None, "start() was not called"
        feeds = {self.task.input_name: frame.region("input")}
        frame.tensors = self.engine.infer(feeds, self.task.output_names)
        yield frame

    def flush(self, source_id: str) -> Iterable[Frame]:
        return ()

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
