"""The secondary stage: models run on crops of the primary model's detections (a cascade).

For each secondary model in order: the frame's detections it wants (its classes, at least `min_size`
pixels, the `max_objects` best scores) are cut out of the decoded frame, their crops go through the
model in as few inferences as the task can pack them (`max_batch` crops at most; all of a frame's by
default), and each object gets `attributes.<name>`. A model that gives embeddings adds the
`embeddings.<name>` array (one row per object that has one), referenced by row from the attributes.

With `reinfer_every` (which needs tracking), an object whose track was looked at fewer than that many
frames ago reuses that result: the stage then keeps state per source and declares `ordered`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from framewire.engines.base import Engine
from framewire.pipeline.errors import EngineError
from framewire.pipeline.frame import Frame, Stage, StageContext
from framewire.pipeline.stagespec import Facts
from framewire.stages import detections
from framewire.stages.backend_wait import BackendWait
from framewire.stages.tasks.objects import ObjectResult, ObjectTask

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Secondary:
    """One secondary model as configured (`secondary.<index>`)."""

    name: str
    task: ObjectTask
    classes: tuple[str | int, ...] | None = None
    min_size: int = 0
    max_objects: int = 32
    max_batch: int = 0
    expand: float = 0.0
    reinfer_every: int | None = None

    def wants(self, detection: Mapping[str, Any]) -> bool:
        if self.classes is not None and not (
            detection.get("label") in self.classes or detection.get("class_id") in self.classes
        ):
            return False
        _, _, w, h = (float(v) for v in detection["box"])
        return min(w, h) >= self.min_size


@dataclass
class _Seen:
    seq: int
    result: ObjectResult


class CascadeStage(Stage):
    """Every secondary model, one engine each, in this worker."""

    facts = Facts()

    @classmethod
    def declare(cls, reinfer_every: Iterable[int | None]) -> Facts:
        """Ordered when a secondary reuses a track's answer (`reinfer_every`): that memory is per source."""
        return Facts(ordered=any(reinfer_every))

    def __init__(self, secondaries: Sequence[Secondary], open_engine: Callable[[int, int], Engine]) -> None:
        """`open_engine(secondary index, worker index)` opens a secondary's engine in the worker."""
        self.secondaries = tuple(secondaries)
        self._open_engine = open_engine
        self.engines: list[Engine] = []
        self._limits: list[int] = []
        self._seen: dict[str, dict[tuple[str, int], _Seen]] = {}
        self.inferences = 0
        self._wait: BackendWait | None = None
        """Inferences run so far (the benchmark compares batched crops with one call each)."""

    def start(self, ctx: StageContext) -> None:
        self._wait = wait = BackendWait(ctx)
        for i, secondary in enumerate(self.secondaries):
            engine = wait.call(functools.partial(self._open_engine, i, ctx.index))
            wait.started(engine)
            secondary.task.check_model(engine.inputs, engine.outputs)
            batchable = _takes_batches(engine, secondary.task.input_name)
            limit = secondary.max_batch or secondary.max_objects
            if not batchable and limit > 1:
                log.warning(
                    "secondary %s: the model takes a fixed batch of 1: one inference per object",
                    secondary.name,
                )
                limit = 1
            self.engines.append(engine)
            self._limits.append(limit)

    def process(self, frame: Frame) -> Iterable[Frame]:
        found = detections.of(frame.result)
        if found:
            image = frame.region("image")
            for i, secondary in enumerate(self.secondaries):
                self._run(i, secondary, frame, image, found)
        yield frame

    def _run(
        self, index: int, secondary: Secondary, frame: Frame, image: np.ndarray, found: list[dict[str, Any]]
    ) -> None:
        chosen = sorted(
            (i for i, d in enumerate(found) if secondary.wants(d)),
            key=lambda i: -float(found[i].get("score", 0.0)),
        )[: secondary.max_objects]
        results: dict[int, ObjectResult] = {}
        todo: list[int] = []
        seen = self._seen.setdefault(frame.source_id, {}) if secondary.reinfer_every else {}
        for i in chosen:
            track = found[i].get("track_id")
            before = seen.get((secondary.name, track)) if track is not None else None
            if (
                before is not None
                and secondary.reinfer_every
                and frame.seq - before.seq < secondary.reinfer_every
            ):
                results[i] = before.result
            else:
                todo.append(i)
        results.update(self._infer(index, secondary, image, [found[i] for i in todo], todo))
        for i in todo:
            track = found[i].get("track_id")
            if secondary.reinfer_every and track is not None and i in results:
                seen[(secondary.name, track)] = _Seen(frame.seq, results[i])
        _attach(frame, secondary.name, found, results)

    def _infer(
        self,
        index: int,
        secondary: Secondary,
        image: np.ndarray,
        objects: list[dict[str, Any]],
        ids: list[int],
    ) -> dict[int, ObjectResult]:
        crops, owners = [], []
        for detection, owner in zip(objects, ids, strict=True):
            crop = secondary.task.crop(image, detection, secondary.expand)
            if crop is not None:
                crops.append(crop)
                owners.append(owner)
        out: dict[int, ObjectResult] = {}
        if not crops:
            return out
        task, engine = secondary.task, self.engines[index]
        for batch in task.batches(crops, self._limits[index]):
            assert self._wait is not None, "start() was not called"
            feeds = {task.input_name: batch.feeds}
            outputs = self._wait.call(lambda: engine.infer(feeds, task.output_names))  # noqa: B023 - called at once
            self._wait.report_times(engine)
            self.inferences += 1
            decoded = task.decode(outputs, len(batch.indices))
            if len(decoded) != len(batch.indices):
                raise EngineError(
                    f"secondary {secondary.name}: {len(decoded)} results for {len(batch.indices)} crops"
                )
            for crop_index, result in zip(batch.indices, decoded, strict=True):
                out[owners[crop_index]] = result
        return out

    def flush(self, source_id: str) -> Iterable[Frame]:
        self._seen.pop(source_id, None)
        return ()

    def stop(self) -> None:
        for engine in self.engines:
            engine.close()
        self.engines = []

    def describe(self) -> dict[str, Any]:
        return {"secondary": [s.name for s in self.secondaries]}


def _attach(
    frame: Frame, name: str, found: list[dict[str, Any]], results: Mapping[int, ObjectResult]
) -> None:
    """Each object's result under `attributes.<name>`; embeddings stacked into one array."""
    rows: list[np.ndarray] = []
    for i in sorted(results):
        result = results[i]
        attributes = result.attributes
        if result.embedding is not None:
            attributes = {**(attributes or {}), "embedding": len(rows)}
            rows.append(np.asarray(result.embedding, dtype=np.float32).reshape(-1))
        if attributes is not None:
            found[i].setdefault("attributes", {})[name] = attributes
    if rows:
        frame.tensors = {**frame.tensors, detections.EMBEDDINGS + name: np.stack(rows)}
    if frame.result is not None:
        frame.result[detections.KEY] = found


def _takes_batches(engine: Engine, input_name: str) -> bool:
    """Whether the engine's input takes more than one crop at once (dim 0 not fixed at 1)."""
    spec = next((t for t in engine.inputs if t.name == input_name), None)
    if spec is None or not spec.shape:
        return False
    dim0 = spec.shape[0]
    return not isinstance(dim0, int) or dim0 > 1
