"""Infer stage: runs the engine on the model input in the frame pool; outputs travel inline."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from framewire.engines.base import Engine
from framewire.pipeline.errors import ConfigError, EngineError
from framewire.pipeline.frame import Frame, Stage, StageContext
from framewire.pipeline.stagespec import Facts
from framewire.pipeline.wire.framepool import FramePool
from framewire.stages.backend_wait import BackendWait
from framewire.stages.tasks.base import Task

log = logging.getLogger(__name__)


class Infer(Stage):
    """One engine per worker process, created in `start` (sessions never cross a spawn)."""

    facts = Facts(sheds=True, skips_stale=True)
    """The model's stage, where the time goes: a live source's frames waiting for it are bounded,
    and a frame already past its deadline skips it."""

    def __init__(
        self,
        task: Task,
        open_engine: Callable[[int], Engine],
        *,
        max_batch: int = 1,
        max_delay_ms: float = 0.0,
    ) -> None:
        """`open_engine(worker_index)` opens the engine in the worker (the index picks its GPU).

        `max_batch` and `max_delay_ms` are read by the worker loop: with `max_batch > 1` it gathers
        up to that many frames (of any source), waiting at most `max_delay_ms`, for `process_batch`.
        """
        self.task = task
        self._open_engine = open_engine
        self.engine: Engine | None = None
        self.max_batch = max_batch
        self.max_delay_ms = max_delay_ms
        self._batchable = False
        self._engine_batch: int | None = None
        self._wait: BackendWait | None = None

    def start(self, ctx: StageContext) -> None:
        self._wait = BackendWait(ctx)
        self.engine = self._wait.call(lambda: self._open_engine(ctx.index))
        self._wait.started(self.engine)
        # The model as loaded (after any dimension rewrite) must fit the task; this also tells the
        # task which outputs it needs, so the others never leave this process.
        try:
            self.task.check_model(self.engine.inputs, self.engine.outputs)
        except ConfigError as exc:  # name the server's model: the file beside the config is not what runs
            if not self.engine.served:
                raise
            raise ConfigError(f"{self.engine.provider}: {exc}") from None
        log.info("infer[%d]: %s on %s", ctx.index, self.engine.backend, self.engine.provider)
        self._batchable, self._engine_batch = _batch_support(self.engine, self.task.input_name)
        if self.max_batch > 1 and not self._batchable:
            log.warning(
                "infer[%d]: the model takes a fixed batch of 1 (its graph cannot be rewritten for "
                "more); max_batch %d runs frame by frame",
                ctx.index,
                self.max_batch,
            )

    def process(self, frame: Frame) -> Iterable[Frame]:
        frame.tensors = self._run(self.task.feeds(frame))
        yield frame

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One inference; while a server backend does not answer, the same one again (BackendWait)."""
        engine, wait = self.engine, self._wait
        assert engine is not None and wait is not None, "start() was not called"
        outputs = wait.call(lambda: engine.infer(feeds, self.task.output_names))
        wait.report_times(engine)
        return outputs

    def process_batch(self, frames: Sequence[Frame]) -> list[Frame]:
        """Run several frames with as few inferences as possible; returns them in the order given.

        Frames whose model inputs have the same shape (sources of one size) share one inference;
        each shape is a group of its own. The model input of a frame is a batch of one, so a group
        is stacked along axis 0 and the outputs are split back the same way.
        """
        assert self.engine is not None, "start() was not called"
        groups: dict[tuple[tuple[int, ...], str], list[int]] = {}
        inputs = [frame.region("input") for frame in frames]
        for i, array in enumerate(inputs):
            groups.setdefault((array.shape, array.dtype.str), []).append(i)
        limit = self.max_batch if self._engine_batch is None else min(self.max_batch, self._engine_batch)
        for indices in groups.values():
            if not self._batchable or len(indices) == 1 or inputs[indices[0]].shape[0] != 1:
                for i in indices:
                    for _ in self.process(frames[i]):
                        pass
                continue
            for start in range(0, len(indices), max(1, limit)):
                chunk = indices[start : start + max(1, limit)]
                self._infer_stacked([frames[i] for i in chunk], [inputs[i] for i in chunk])
        return list(frames)

    def _infer_stacked(self, frames: Sequence[Frame], inputs: Sequence[np.ndarray]) -> None:
        assert self.engine is not None
        if len(frames) == 1:
            for _ in self.process(frames[0]):
                pass
            return
        # Stacked straight into the engine's pinned staging buffer where it has one (TensorRT): one
        # copy of the batch, not two.
        shape = (sum(a.shape[0] for a in inputs), *inputs[0].shape[1:])
        into = self.engine.input_buffer(self.task.input_name, shape, inputs[0].dtype)
        stacked = np.concatenate(inputs, axis=0, out=into)
        feeds = [self.task.feeds(frame) for frame in frames]
        batch = {name: np.concatenate([f[name] for f in feeds], axis=0) for name in feeds[0] if name != self.task.input_name}
        outputs = self._run({self.task.input_name: stacked, **batch})
        count = len(frames)
        for name, value in outputs.items():
            if value.ndim == 0 or value.shape[0] != count:
                raise EngineError(
                    f"model output {name!r} has shape {list(value.shape)} for a batch of {count}: "
                    f"the model does not keep the frames of a batch apart"
                )
        for i, frame in enumerate(frames):
            frame.tensors = {name: value[i : i + 1] for name, value in outputs.items()}

    def pool_added(self, pool: FramePool) -> None:
        """The worker attached a source's frame pool: a GPU engine registers it as pinned memory
        now, before its first frame, so no frame pays for the registration."""
        if self.engine is not None:
            self.engine.pin_pool(pool)

    def pool_removed(self, pool: FramePool) -> None:
        """The worker is about to unmap a source's pool: the engine lets go of it first (a
        registered pool cannot be unmapped)."""
        if self.engine is not None:
            self.engine.unpin_pool(pool)

    def describe(self) -> dict[str, Any]:
        """What this worker runs on, for the metrics (`framewire_provider_info`)."""
        if self.engine is None:
            return {}
        return {"backend": self.engine.backend, "provider": self.engine.provider}

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def _batch_support(engine: Engine, input_name: str) -> tuple[bool, int | None]:
    """Whether the engine takes more than one frame at once, and its largest batch if it has one.

    Dim 0 of the input symbolic (or None) means any batch, up to the engine's own `max_batch` when
    it has one (a TensorRT optimisation profile); a fixed dim 0 means frame by frame.
    """
    spec = next((t for t in engine.inputs if t.name == input_name), None)
    if spec is None or not spec.shape:
        return False, None
    dim0 = spec.shape[0]
    limit = getattr(engine, "max_batch", None)
    limit = int(limit) if isinstance(limit, int) and limit > 0 else None
    if isinstance(dim0, int):
        return False, None
    return limit is None or limit > 1, limit
