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
from framewire.pipeline.stagespec import Shares, StageSpec, share_out
from framewire.stages.fused import fuse_middle

def live_sources(sources: Iterable[SourcePlan]) -> tuple[str, ...]:
    """The sources the live layout decodes in an infer worker: those under a drop policy. A `block`
    source (a file) loses no frame, so it keeps its decode worker and the hub's flow control."""
    return tuple(s.source_id for s in sources if s.options.policy != Policy.BLOCK)


def live_layout(stages: Sequence[StageSpec], live: Sequence[str], before: Shares = ()) -> list[StageSpec]:
    """The job's stages with the live sources decoded where the model runs: the middle stages fused
    (stages.fused: a live frame never leaves its worker until its outputs), the model's stage marked
    `decodes_sources` with each worker's share of `live` (the ids of the live sources known now: more
    can come at run time). Unchanged without a model's stage."""
    fused = fuse_middle(stages)
    anchor = next((s for s in fused if s.sheds and not s.writes_output), None)
    if anchor is None:
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
