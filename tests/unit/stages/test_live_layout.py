"""The live layout as a transform of the job's stages: the live sources shared out evenly over the model's
workers, file sources left to their decode workers, and a rebalance that moves only what it must."""

from __future__ import annotations

import pytest
from framewire.pipeline.plan import Policy, SourceOptions, SourcePlan
from framewire.pipeline.stagespec import StageSpec, check_specs
from framewire.stages.live_layout import live_layout, live_sources, rebalance, share_out
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.timeout(60)


def source(name: str, policy: Policy = Policy.DROP_OLDEST) -> SourcePlan:
    return SourcePlan(name, int, SourceOptions(policy=policy))


def stages(workers: int = 2) -> list[StageSpec]:
    return [
        StageSpec("preprocess", 1, int, skips_stale=True),
        StageSpec("infer", workers, int, sheds=True, skips_stale=True, credits=4),
        StageSpec("postprocess", 1, int),
        StageSpec("output0.jsonl", 1, int, writes_output=True),
    ]


def test_the_model_stage_decodes_the_live_sources_and_files_keep_their_decode_workers() -> None:
    plans = [source("cam0"), source("clip", Policy.BLOCK), source("cam1"), source("cam2", Policy.DROP_NEWEST)]
    out = live_layout(stages(), live_sources(plans))
    assert [s.name for s in out] == ["infer", "output0.jsonl"]
    model = out[0]
    assert model.decodes_sources and model.members == ("preprocess", "infer", "postprocess")
    assert (model.workers, model.credits, model.sheds) == (2, 4, True)
    assert model.shares == (("cam0", "cam2"), ("cam1",))
    assert not out[1].decodes_sources and out[1].shares == ()
    check_specs(out)
    assert "decodes_sources" in model.describe() and "cam0,cam2 | cam1" in model.describe()


def test_without_a_live_source_yet_the_model_stage_still_decodes_and_without_a_model_nothing_changes() -> None:
    (model, _) = live_layout(stages(), live_sources([source("clip", Policy.BLOCK)]))
    assert model.decodes_sources and model.shares == ((), ())  # sources added at run time go there
    no_model = [StageSpec("pre", 1, int), StageSpec("output0.jsonl", 1, int, writes_output=True)]
    assert live_layout(no_model, ["cam0"]) == no_model
    assert live_sources([source("a"), source("b", Policy.BLOCK)]) == ("a",)


def test_more_workers_than_sources_leaves_some_workers_without_a_share() -> None:
    (model, _) = live_layout(stages(workers=3), ["cam0"])
    assert model.shares == (("cam0",), (), ())
    check_specs([model])


def test_a_rebalance_keeps_the_sources_that_stay_where_they_were() -> None:
    plans = [source(f"cam{i}") for i in range(4)]
    before = live_layout(stages(), live_sources(plans))
    assert before[0].shares == (("cam0", "cam2"), ("cam1", "cam3"))
    after = rebalance(before, [p for p in plans if p.source_id != "cam1"] + [source("cam4")])
    assert after[0].shares == (("cam0", "cam2"), ("cam3", "cam4"))
    assert after[1] is before[1]
    gone = rebalance(after, [source("cam0"), source("cam2")])  # both left on worker 0: one moves
    assert gone[0].shares == (("cam0",), ("cam2",))


def test_a_spec_that_shares_sources_badly_is_refused() -> None:
    with pytest.raises(ValueError, match="2 shares of sources for 3 workers"):
        check_specs([StageSpec("infer", 3, int, decodes_sources=True, shares=(("a",), ()))])
    with pytest.raises(ValueError, match="source a is in more than one"):
        check_specs([StageSpec("infer", 2, int, decodes_sources=True, shares=(("a",), ("a",)))])
    with pytest.raises(ValueError, match="does not decode them"):
        check_specs([StageSpec("infer", 1, int, shares=(("a",),))])
    with pytest.raises(ValueError, match="at least one worker"):
        share_out(["a"], 0)
    with pytest.raises(ValueError, match="named twice"):
        share_out(["a", "a"], 2)


names = st.lists(st.sampled_from([f"s{i}" for i in range(12)]), unique=True, max_size=12)


@settings(max_examples=500, deadline=None)  # a busy machine's slow example is not a failure
@given(first=names, then=names, workers=st.integers(1, 5), workers_then=st.integers(1, 5))
def test_share_out_is_even_complete_and_moves_only_what_it_must(
    first: list[str], then: list[str], workers: int, workers_then: int
) -> None:
    before = share_out(first, workers)
    after = share_out(then, workers_then, before)
    assert len(after) == workers_then
    assert sorted(s for share in after for s in share) == sorted(then)
    sizes = [len(share) for share in after]
    assert max(sizes) - min(sizes) <= 1
    stayed = {s: i for i, share in enumerate(before) for s in share if i < workers_then and s in then}
    moved = [s for s, i in stayed.items() if s not in after[i]]
    # A source that stays moves only to even out the counts: a worker gives up at most what it kept
    # over the smaller even share.
    floor = len(then) // workers_then
    kept = [sum(1 for i in stayed.values() if i == w) for w in range(workers_then)]
    assert len(moved) <= sum(max(0, k - floor) for k in kept)
