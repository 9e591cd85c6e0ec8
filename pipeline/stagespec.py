"""The job's stages as data: what the runtime knows of a stage is its `StageSpec`, never its name.

A stage class declares what it does as class-level `Facts` (Holoscan's `setup(spec)`, without
building anything); the composition root copies them into one `StageSpec` per stage, in frame
order, and hands the runtime that list (`Plan.stages`). The router, the worker loop, the telemetry
and the previews act on the flags. Layouts are functions from one list to another (fusing light
stages into the model's process: stages.fused), so the chain is written once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

DECODE = "decode"
"""The stage the runtime runs itself for every source: its decode worker reads it into the frame pool."""


Shares = tuple[tuple[str, ...], ...]
"""The live sources each worker of a stage decodes (the live layout), by worker index, each share in
the order its sources came."""


@dataclass(frozen=True)
class Facts:
    """What a stage does, in the terms the runtime acts on. Declared on the stage's class (`Stage.facts`,
    or its `declare(...)` where its parameters decide), copied into its spec."""

    ordered: bool = False
    """It keeps state per source (a tracker, an audio model's context): every frame of a source goes
    to the same worker, in `seq` order (pipeline.hub.routing)."""
    sheds: bool = False
    """The frames of live sources waiting for it, and for every stage before it, are bounded by their
    sources' `max_waiting`; past the bound the hub drops some (pipeline.hub.shedding). The model's
    stage: the one where the time goes."""
    skips_stale: bool = False
    """Its worker skips a frame past its source's deadline (`max_staleness_ms`), and the hub drops it:
    the stages up to the model, where a late frame is not worth the time."""
    writes_output: bool = False
    """It is an output: one process, every frame goes to each output after the middle stages, in order,
    and a death ends the job (nothing restarts an output halfway through a file)."""
    feeds_tracks: bool = False
    """Its results carry tracks, which the metrics count per source (`HubObserver.on_track_result`)."""

    def merged(self, other: Facts) -> Facts:
        """What one process running both stages does: each flag of either."""
        pairs = zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True)
        return Facts(*(a or b for a, b in pairs))


@dataclass(frozen=True)
class StageSpec:
    """One stage of the job: its name (its workers' and metrics' name), how many workers, the factory
    each worker calls to build it (module-level, picklable), and what it does."""

    name: str
    workers: int
    factory: Callable[[], Any]
    ordered: bool = False
    sheds: bool = False
    skips_stale: bool = False
    writes_output: bool = False
    feeds_tracks: bool = False
    members: tuple[str, ...] = ()
    """The stages a fused stage runs in its process, in order (stages.fused); empty: just itself.
    Each member stamps its own span, and the metrics count each."""
    credits: int | None = None
    """Frames each worker may hold, where it differs from the plan's `credits_per_worker` (a
    batching model stage); None: the plan's."""
    decodes_sources: bool = False
    """Its workers decode their share of the live sources themselves (the live layout,
    stages.live_layout; `stages.layout: live`): no decode worker, and no FRAME or WORK, for those
    sources (pipeline.hub.shares, pipeline.worker.live_loop)."""
    shares: Shares = ()
    """With `decodes_sources`: the live sources each worker decodes, by worker index."""

    @classmethod
    def of(cls, name: str, workers: int, factory: Callable[[], Any], facts: Facts, **more: Any) -> StageSpec:
        """The spec of a stage whose class declared `facts`."""
        return cls(name, workers, factory, **dataclasses.asdict(facts), **more)

    @property
    def facts(self) -> Facts:
        return Facts(self.ordered, self.sheds, self.skips_stale, self.writes_output, self.feeds_tracks)

    @property
    def runs(self) -> tuple[str, ...]:
        """The stages its process runs: its members, or itself."""
        return self.members or (self.name,)

    def describe(self) -> str:
        """One line: `infer  x2  sheds, skips_stale  [preprocess, infer, postprocess]`."""
        flags = [f.name for f in dataclasses.fields(Facts) if getattr(self, f.name)]
        flags += ["decodes_sources"] if self.decodes_sources else []
        line = f"{self.name:<24} x{self.workers:<3} {', '.join(flags) or '-'}"
        line += f"  [{', '.join(self.members)}]" if self.members else ""
        return line + (
            f"  sources {' | '.join(','.join(s) or '-' for s in self.shares)}" if self.shares else ""
        )


def share_out(sources: Sequence[str], workers: int, before: Shares = ()) -> Shares:
    """`sources` over `workers` workers, as evenly as can be (counts differ by at most one).

    A source in `before` on a worker that still exists stays there; sources that are gone leave;
    new ones go to the worker with the fewest (the lowest index on a tie); then, while one worker has
    two more than another, the fullest gives its newest source to the emptiest. So a rebalance moves
    only the sources it must: a worker restarted keeps its share, and a source added moves none.
    """
    if workers < 1:
        raise ValueError(f"share_out needs at least one worker, not {workers}")
    if len(set(sources)) != len(sources):
        raise ValueError(f"share_out: a source named twice in {list(sources)}")
    wanted = set(sources)
    shares = [[s for s in share if s in wanted] for share in before[:workers]]
    shares += [[] for _ in range(workers - len(shares))]
    placed = {s for share in shares for s in share}
    for source in sources:
        if source not in placed:
            min(shares, key=len).append(source)  # min keeps the first of equals: the lowest index
    while True:
        fullest, emptiest = max(shares, key=len), min(shares, key=len)
        if len(fullest) - len(emptiest) < 2:
            return tuple(tuple(share) for share in shares)
        emptiest.append(fullest.pop())


def middle(stages: Iterable[StageSpec]) -> tuple[StageSpec, ...]:
    """The stages between decode and the outputs, in frame order."""
    return tuple(s for s in stages if not s.writes_output)


def outputs(stages: Iterable[StageSpec]) -> tuple[StageSpec, ...]:
    """The outputs, in the config's order."""
    return tuple(s for s in stages if s.writes_output)


def check_specs(stages: Iterable[StageSpec]) -> None:
    """Raise ValueError on a list the runtime cannot run: names repeated, no worker, middle stages after
    an output, an output with more than one worker, sources shared out to workers it lacks or twice."""
    seen: set[str] = set()
    output_seen = False
    for spec in stages:
        if not spec.name or spec.name in seen:
            raise ValueError(f"stage {spec.name!r}: empty or repeated name")
        seen.add(spec.name)
        if spec.workers < 1:
            raise ValueError(f"stage {spec.name}: needs at least one worker, not {spec.workers}")
        if spec.writes_output and spec.workers != 1:
            raise ValueError(f"output {spec.name}: runs in one process, not {spec.workers}")
        if output_seen and not spec.writes_output:
            raise ValueError(f"stage {spec.name}: comes after an output")
        output_seen = output_seen or spec.writes_output
        _check_shares(spec)


def _check_shares(spec: StageSpec) -> None:
    if spec.shares and not spec.decodes_sources:
        raise ValueError(f"stage {spec.name}: shares sources out but does not decode them")
    if spec.decodes_sources and len(spec.shares) != spec.workers:
        raise ValueError(
            f"stage {spec.name}: {len(spec.shares)} shares of sources for {spec.workers} workers"
        )
    shared = [source for share in spec.shares for source in share]
    twice = sorted({source for source in shared if shared.count(source) > 1})
    if twice:
        raise ValueError(f"stage {spec.name}: source {twice[0]} is in more than one worker's share")
