"""Stages that share one process: fewer hops through the hub for jobs whose stages are light.

Every hop of a frame through the hub costs a message each way, a header encoded and decoded twice,
and a wake-up of two processes: about 0.1 ms of CPU, against 0.2-1 ms for preprocessing a small
frame. When the stages are that light (small frames, a CPU without cores to spare), running them
one after the other in the infer process is faster than handing each frame on four times
(docs/benchmarks.md, "Fused stages"). `Fused` does that for the middle stages, `Outputs` for the
outputs: each member still stamps its own span in `frame.timings`, so latencies and busy times per
stage read as they do when the stages run apart.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from framewire.pipeline.errors import FramewireError, one_line
from framewire.pipeline.frame import Frame, Stage, StageContext
from framewire.pipeline.stagespec import Facts, StageSpec
from framewire.pipeline.wire.framepool import FramePool


class MemberFailed(FramewireError):
    """A member of a fused stage failed on a frame: the message names the member."""


class _Members(Stage):
    """Start, flush and stop a sequence of named stages as one."""

    def __init__(self, members: Sequence[tuple[str, Stage]]) -> None:
        if not members:
            raise ValueError("a fused stage needs at least one member")
        self.members = tuple(members)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.members)

    def start(self, ctx: StageContext) -> None:
        for name, stage in self.members:
            # The members share the worker's index (an infer member picks its GPU by it) and the
            # stream info, which the worker loop fills in as STREAM messages arrive.
            stage.start(dataclasses.replace(ctx, stage=name))

    def _each(self, call: Callable[[Stage], Iterable[Frame]]) -> None:
        """`call` on every member in order, whatever it yields consumed; a failure names the member."""
        for name, stage in self.members:
            try:
                for _ in call(stage):
                    pass
            except Exception as exc:
                raise MemberFailed(f"{name}: {one_line(exc)}") from exc

    def flush(self, source_id: str) -> Iterable[Frame]:
        self._each(lambda stage: stage.flush(source_id))
        return ()

    def stop(self) -> None:
        first: BaseException | None = None
        for _, stage in reversed(self.members):
            try:
                stage.stop()
            except Exception as exc:  # every member gets its stop, the first error is raised
                first = first or exc
        if first is not None:
            raise first

    def event(self, event: dict[str, Any]) -> None:
        for _, stage in self.members:
            stage.event(event)

    def counters(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for _, stage in self.members:
            out.update(stage.counters())
        return out

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for _, stage in self.members:
            out.update(stage.describe())
        return out

    def configure(self, source_id: str, settings: dict[str, Any]) -> None:
        for _, stage in self.members:
            stage.configure(source_id, settings)

    def pool_added(self, pool: FramePool) -> None:
        for _, stage in self.members:
            stage.pool_added(pool)

    def pool_removed(self, pool: FramePool) -> None:
        for _, stage in self.members:
            stage.pool_removed(pool)


def _run(name: str, stage: Stage, frame: Frame) -> Frame:
    """One member on one frame, its span stamped; a middle stage hands on the frame it was given."""
    started = time.time()
    try:
        outs = list(stage.process(frame))
    except Exception as exc:
        raise MemberFailed(f"{name}: {one_line(exc)}") from exc
    if len(outs) > 1:
        raise MemberFailed(f"{name}: returned {len(outs)} frames for one")
    out = outs[0] if outs else frame
    out.timings[name] = [started, time.time()]
    return out


class Fused(_Members):
    """Middle stages (preprocess, infer, postprocess, composite) one after the other on each frame.

    With an infer member that batches (`max_batch > 1`), `process_batch` runs the members before it
    frame by frame, the inference on the whole batch, and the members after it frame by frame.
    """

    def __init__(self, members: Sequence[tuple[str, Stage]]) -> None:
        super().__init__(members)
        self._batcher = next((i for i, (_, stage) in enumerate(self.members) if stage.max_batch > 1), None)
        if self._batcher is not None:
            batcher = self.members[self._batcher][1]
            self.max_batch, self.max_delay_ms = batcher.max_batch, batcher.max_delay_ms

    def process(self, frame: Frame) -> Iterable[Frame]:
        for name, stage in self.members:
            frame = _run(name, stage, frame)
        yield frame

    def process_batch(self, frames: Sequence[Frame]) -> list[Frame]:
        if self._batcher is None:
            return super().process_batch(frames)
        before, (name, batcher), after = (
            self.members[: self._batcher],
            self.members[self._batcher],
            self.members[self._batcher + 1 :],
        )
        batch = list(frames)
        for member, stage in before:
            batch = [_run(member, stage, frame) for frame in batch]
        started = time.time()
        try:
            batch = list(batcher.process_batch(batch))
        except Exception as exc:
            raise MemberFailed(f"{name}: {one_line(exc)}") from exc
        finished = time.time()
        for frame in batch:
            frame.timings[name] = [started, finished]
        for member, stage in after:
            batch = [_run(member, stage, frame) for frame in batch]
        return batch


class Outputs(_Members):
    """Every output in one process: each frame goes to each output in turn, in order."""

    def process(self, frame: Frame) -> Iterable[Frame]:
        spans: dict[str, list[float]] = {}
        for name, stage in self.members:
            started = time.time()
            try:
                for _ in stage.process(frame):
                    pass
            except Exception as exc:
                raise MemberFailed(f"{name}: {one_line(exc)}") from exc
            spans[name] = [started, time.time()]
        # Each output's own span goes back to the hub (tracing:), stamped once all have written the
        # frame: an output's record lists the stages before the outputs, not its neighbours.
        frame.timings.update(spans)
        return ()


# --- the layouts: fusion as a transform of the job's list of stages ---------------------------------

Members = tuple[tuple[str, Callable[[], Stage]], ...]
"""(name, factory) of each stage a fused stage runs: its factories are called in its worker."""


def fused_stage(members: Members) -> Fused:
    """The fused middle stages, built in their worker (a `StageSpec.factory`)."""
    return Fused([(name, factory()) for name, factory in members])


def fused_outputs(members: Members) -> Outputs:
    """Every output in one process, built in its worker (a `StageSpec.factory`)."""
    return Outputs([(name, factory()) for name, factory in members])


def _facts(specs: Sequence[StageSpec]) -> Facts:
    """A fused stage does what any of its members does (a tracker makes it ordered)."""
    return functools.reduce(Facts.merged, (s.facts for s in specs), Facts())


def fuse_middle(stages: Sequence[StageSpec]) -> list[StageSpec]:
    """Every middle stage in one process: the model's (the first that `sheds`), with its name, workers
    and credits. Unchanged when there is no such stage or nothing to fuse it with."""
    middle = [s for s in stages if not s.writes_output]
    anchor = next((s for s in middle if s.sheds), None)
    if anchor is None or len(middle) < 2:
        return list(stages)
    members: Members = tuple((s.name, s.factory) for s in middle)
    one = StageSpec.of(
        anchor.name, anchor.workers, functools.partial(fused_stage, members), _facts(middle),
        members=tuple(name for name, _ in members), credits=anchor.credits,
    )
    return [one, *(s for s in stages if s.writes_output)]


def fuse_outputs(stages: Sequence[StageSpec], name: str = "outputs") -> list[StageSpec]:
    """Every output in one process called `name`; unchanged with fewer than two outputs."""
    outs = [s for s in stages if s.writes_output]
    if len(outs) < 2:
        return list(stages)
    members: Members = tuple((s.name, s.factory) for s in outs)
    one = StageSpec.of(
        name, 1, functools.partial(fused_outputs, members), _facts(outs), members=tuple(n for n, _ in members)
    )
    return [*(s for s in stages if not s.writes_output), one]
