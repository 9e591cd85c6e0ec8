"""The job's stages as data (pipeline.stagespec): every stage declares what it does as class-level
facts, the composition root copies them into its spec without building it, and the runtime acts on
the spec's flags, never on a stage's name."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest

from framewire import registry
from framewire.app.compose.plan import stage_specs
from framewire.config import load_config
from framewire.pipeline.frame import Stage
from framewire.pipeline.plan import Plan
from framewire.pipeline.stagespec import Facts, StageSpec, check_specs
from framewire.stages.cascade import CascadeStage
from framewire.stages.composite import CompositeStage
from framewire.stages.infer import Infer
from framewire.stages.postprocess import Postprocess
from framewire.stages.preprocess import Preprocess
from framewire.stages.tracking import TrackStage

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
BUILT_IN = (Preprocess, Infer, Postprocess, TrackStage, CascadeStage, CompositeStage)


def _declared(cls: type) -> bool:
    """Whether the class, or a framewire base of it other than the protocol, says what it does."""
    return any("facts" in vars(k) for k in cls.__mro__ if k is not Stage)


def test_every_registered_stage_declares_what_it_does() -> None:
    stages = [*BUILT_IN, *registry.STEPS.load_all().values()]
    outputs = list(registry.OUTPUTS.load_all().values())
    assert len(outputs) >= 8 and len(stages) >= 9
    missing = [cls.__name__ for cls in stages + outputs if not _declared(cls)]
    assert not missing, f"no `facts` declared: {missing}"
    assert all(isinstance(cls.facts, Facts) for cls in stages + outputs)
    assert [cls.__name__ for cls in outputs if not cls.facts.writes_output] == []
    assert [cls.__name__ for cls in stages if cls.facts.writes_output] == []


@pytest.mark.parametrize("name", ["default", "showcase", "tracking", "speaking", "sinks", "lipsync"])
def test_each_shipped_job_lists_complete_specs_that_copy_their_classes_facts(name: str) -> None:
    split = ["stages.fuse=false", "stages.fuse_outputs=false"]
    config = load_config(ROOT / "configs" / f"{name}.yaml", split)
    specs = stage_specs(config)
    check_specs(specs)  # names once, workers >= 1, the outputs last and alone in their process
    for spec in specs:
        assert callable(spec.factory) and not spec.members
        assert spec.workers >= 1 and spec.name
    by_name = {s.name: s for s in specs}
    assert by_name["infer"].facts == Infer.facts and by_name["preprocess"].facts == Preprocess.facts
    assert by_name["infer"].credits == max(config.transport.credits_per_worker, 2 * config.engine.max_batch)
    assert [s.name for s in specs if s.writes_output] == [s.name for s in specs][-len(config.outputs):]
    if "track" in by_name:
        assert by_name["track"].facts == TrackStage.facts


def test_a_fused_job_says_what_its_one_process_does() -> None:
    config = load_config(ROOT / "configs" / "showcase.yaml", ["stages.fuse=true", "stages.fuse_outputs=true"])
    infer, outputs = stage_specs(config)
    assert infer.members == ("preprocess", "infer", "postprocess", "track", "composite")
    assert infer.facts == Facts(ordered=True, sheds=True, skips_stale=True, feeds_tracks=True)
    assert outputs.writes_output and outputs.members == ("output0.video_file", "output1.jsonl")


def test_a_spec_describes_itself_in_one_line() -> None:
    spec = StageSpec("infer", 2, int, sheds=True, skips_stale=True, members=("preprocess", "infer"))
    assert spec.describe().split() == ["infer", "x2", "sheds,", "skips_stale", "[preprocess,", "infer]"]
    assert StageSpec("post", 1, int).describe().split() == ["post", "x1", "-"]
    assert StageSpec.of("t", 1, int, Facts(ordered=True)).facts == Facts(ordered=True)
    assert Facts(ordered=True).merged(Facts(sheds=True)) == Facts(ordered=True, sheds=True)


@pytest.mark.parametrize(
    ("stages", "problem"),
    [
        ((StageSpec("a", 1, int), StageSpec("a", 1, int)), "repeated"),
        ((StageSpec("a", 0, int),), "at least one worker"),
        ((StageSpec("out", 2, int, writes_output=True),), "one process"),
        ((StageSpec("out", 1, int, writes_output=True), StageSpec("a", 1, int)), "after an output"),
    ],
)
def test_a_list_the_runtime_cannot_run_is_refused(stages: tuple[StageSpec, ...], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Plan(stages=stages, sources=(), slot_layout=functools.partial(dict))


def test_the_plan_reads_credits_and_members_from_the_specs() -> None:
    plan = Plan(
        stages=(
            StageSpec("model", 2, int, sheds=True, credits=8, members=("prep", "model")),
            StageSpec("sink", 1, int, writes_output=True),
        ),
        sources=(),
        slot_layout=functools.partial(dict),
        credits_per_worker=3,
    )
    assert (plan.stage_names, plan.output_names) == (("model",), ("sink",))
    assert (plan.credits_for("model"), plan.credits_for("sink")) == (8, 4)
    assert plan.spec("model").runs == ("prep", "model") and plan.spec("sink").runs == ("sink",)
