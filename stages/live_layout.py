"""The live layout: each infer worker decodes its share of the live sources itself.

A live frame that goes decode worker -> hub -> infer worker -> hub pays three hops (FRAME, WORK, GRANT)
and two process wake-ups on top of the model: about 1.5 of framewire's 2.3 ms of its own a frame, 8 live
streams on 2 cores (issue 38, measured with `bench budget --peer core`). A plain program that runs one
process a core, a reader thread a stream and the model on one thread pays none of them. This layout is
that program's shape as a transform of the job's list of stages, after fusion: the model's fused stage
is marked `decodes_sources` and given, worker by worker, its share of the live sources (`shares`).
File (`block`) sources keep the default layout: they are decoded by their own workers, every frame.

The share-out is a pure function of the sources and the share-out before it, so a source that comes or
goes reruns it (`rebalance`) and only the sources that must move do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from framewire.pipeline.plan import Policy, SourcePlan
from framewire.pipeline.stagespec import StageSpec
from framewire.stages.fused import fuse_middle

Shares = tuple[tuple[str, ...], ...]
"""The sources each worker decodes, by worker index, each share in the order its sources came."""


def live_sources(sources: Iterable[SourcePlan]) -> tuple[str, ...]:
    """The sources the live layout decodes in an infer worker: those under a drop policy. A `block`
    source (a file) loses no frame, so it keeps its decode worker and the hub's flow control."""
    return tuple(s.source_id for s in sources if s.options.policy != Policy.BLOCK)


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


def live_layout(
    stages: Sequence[StageSpec], sources: Iterable[SourcePlan], before: Shares = ()
) -> list[StageSpec]:
    """The job's stages with the live sources decoded where the model runs: the middle stages fused
    (stages.fused: a live frame never leaves its worker until its outputs), the model's stage marked
    `decodes_sources` with each worker's share. Unchanged without a live source or a model's stage."""
    live = live_sources(sources)
    fused = fuse_middle(stages)
    anchor = next((s for s in fused if s.sheds and not s.writes_output), None)
    if not live or anchor is None:
        return list(stages)
    one = dataclasses.replace(anchor, decodes_sources=True, shares=share_out(live, anchor.workers, before))
    return [one if s is anchor else s for s in fused]


def rebalance(stages: Sequence[StageSpec], sources: Iterable[SourcePlan]) -> list[StageSpec]:
    """The live layout rerun after a source came or went: the decoding stage's share-out redone from
    the one it had (`share_out`), every other stage as it was."""
    live = live_sources(sources)
    out = []
    for spec in stages:
        if spec.decodes_sources:
            spec = dataclasses.replace(spec, shares=share_out(live, spec.workers, spec.shares))
        out.append(spec)
    return out
