"""Fused stages: members run in order on each frame in one process, each stamping its own span; a
failing member is named; batching runs the members around the batcher frame by frame; and the plan
wires `stages.fuse` / `stages.fuse_outputs` into fewer processes."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from framewire.app.compose.plan import build_plan
from framewire.config import load_config
from framewire.pipeline.frame import Frame, Stage, StageContext
from framewire.pipeline.stagespec import StageSpec
from framewire.stages.fused import Fused, MemberFailed, Outputs, fuse_middle, fuse_outputs

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]


class Step(Stage):
    """Appends its name to `frame.meta["trail"]`; records its life in `events`."""

    def __init__(self, name: str, events: list[str], fail_on: int | None = None) -> None:
        self.name, self.events, self.fail_on = name, events, fail_on
        self.ctx: StageContext | None = None

    def start(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.events.append(f"start {self.name}")

    def process(self, frame: Frame) -> Iterable[Frame]:
        if frame.seq == self.fail_on:
            raise ValueError(f"bad frame {frame.seq}")
        frame.meta.setdefault("trail", []).append(self.name)
        yield frame

    def flush(self, source_id: str) -> Iterable[Frame]:
        self.events.append(f"flush {self.name} {source_id}")
        return ()

    def stop(self) -> None:
        self.events.append(f"stop {self.name}")
        if self.name == "b":
            raise RuntimeError("b could not stop")


class Batcher(Step):
    def __init__(self, name: str, events: list[str], max_batch: int) -> None:
        super().__init__(name, events)
        self.max_batch, self.max_delay_ms = max_batch, 3.0
        self.batches: list[int] = []

    def process_batch(self, frames: Sequence[Frame]) -> list[Frame]:
        self.batches.append(len(frames))
        for frame in frames:
            frame.meta.setdefault("trail", []).append(f"{self.name}*{len(frames)}")
        return list(frames)

    def describe(self) -> dict[str, str]:
        return {"provider": "fake"}


def frame(seq: int = 0) -> Frame:
    return Frame("cam", seq, pts=seq, time_s=0.0, width=4, height=4)


def started(stage: Fused | Outputs) -> Fused | Outputs:
    stage.start(StageContext("infer", 3, {"cam": {"width": 4}}))
    return stage


def test_members_run_in_order_and_stamp_their_own_spans() -> None:
    events: list[str] = []
    steps = [Step(n, events) for n in ("preprocess", "infer", "postprocess")]
    fused = started(Fused([(s.name, s) for s in steps]))
    (out,) = list(fused.process(frame()))
    assert out.meta["trail"] == ["preprocess", "infer", "postprocess"]
    assert set(out.timings) == {"preprocess", "infer", "postprocess"}
    spans = [out.timings[n] for n in ("preprocess", "infer", "postprocess")]
    assert all(a[0] <= a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    # Each member sees the worker's index (an infer member picks its GPU by it) and the streams.
    assert all(s.ctx is not None and s.ctx.index == 3 and s.ctx.stage == s.name for s in steps)
    assert steps[0].ctx is not None and steps[0].ctx.streams == {"cam": {"width": 4}}


def test_a_failing_member_is_named() -> None:
    events: list[str] = []
    fused = started(Fused([("preprocess", Step("preprocess", events)), ("infer", Step("infer", events, fail_on=2))]))
    assert list(fused.process(frame(1)))
    with pytest.raises(MemberFailed, match=r"^infer: ValueError: bad frame 2$"):
        list(fused.process(frame(2)))


def test_flush_and_stop_reach_every_member_stop_in_reverse_even_when_one_fails() -> None:
    events: list[str] = []
    fused = started(Fused([(n, Step(n, events)) for n in ("a", "b", "c")]))
    events.clear()
    assert list(fused.flush("cam")) == []
    with pytest.raises(RuntimeError, match="b could not stop"):
        fused.stop()
    assert events == ["flush a cam", "flush b cam", "flush c cam", "stop c", "stop b", "stop a"]


def test_batching_runs_the_members_around_the_batcher_frame_by_frame() -> None:
    events: list[str] = []
    batcher = Batcher("infer", events, max_batch=4)
    fused = started(Fused([("preprocess", Step("preprocess", events)), ("infer", batcher), ("post", Step("post", events))]))
    assert (fused.max_batch, fused.max_delay_ms) == (4, 3.0)
    assert fused.describe() == {"provider": "fake"}
    outs = fused.process_batch([frame(i) for i in range(3)])
    assert [f.seq for f in outs] == [0, 1, 2]
    assert batcher.batches == [3]
    assert all(f.meta["trail"] == ["preprocess", "infer*3", "post"] for f in outs)
    assert all(set(f.timings) == {"preprocess", "infer", "post"} for f in outs)


def test_without_a_batcher_the_worker_never_batches_and_a_batch_runs_frame_by_frame() -> None:
    events: list[str] = []
    fused = Fused([("a", Step("a", events)), ("b", Step("b", events))])
    assert fused.max_batch == 1 and fused.max_delay_ms == 0.0
    out = fused.process_batch([frame(), frame()])
    assert [f.meta["trail"] for f in out] == [["a", "b"], ["a", "b"]]


def test_a_member_that_keeps_per_source_state_makes_the_fused_stage_ordered() -> None:
    model = StageSpec("infer", 3, int, sheds=True, skips_stale=True, credits=8)
    tracker = StageSpec("track", 1, int, ordered=True, feeds_tracks=True)
    (alone,) = fuse_middle([StageSpec("pre", 1, int, skips_stale=True), model])
    assert not alone.ordered and alone.skips_stale
    (fused,) = fuse_middle([model, tracker])
    assert fused.ordered and fused.feeds_tracks and fused.sheds
    assert (fused.name, fused.workers, fused.credits, fused.members) == ("infer", 3, 8, ("infer", "track"))


def test_fusion_is_a_transform_of_the_list() -> None:
    """Only the middle stages fuse, into the model's (the one that sheds), outputs untouched; nothing
    to fuse into, or one output, leaves the list as it was."""
    pre, post = StageSpec("pre", 1, int, skips_stale=True), StageSpec("post", 2, int)
    model = StageSpec("infer", 2, int, sheds=True, skips_stale=True)
    out0 = StageSpec("output0.jsonl", 1, int, writes_output=True)
    out1 = StageSpec("output1.zmq", 1, int, writes_output=True)
    fused = fuse_middle([pre, model, post, out0, out1])
    assert [s.name for s in fused] == ["infer", "output0.jsonl", "output1.zmq"]
    assert fused[0].members == ("pre", "infer", "post") and fused[1:] == [out0, out1]
    assert fuse_middle([pre, post, out0]) == [pre, post, out0]  # no model's stage to fuse into
    both = fuse_outputs(fused)
    assert [s.name for s in both] == ["infer", "outputs"]
    assert both[1].writes_output and both[1].workers == 1
    assert both[1].members == ("output0.jsonl", "output1.zmq")
    assert fuse_outputs([model, out0]) == [model, out0]


def test_a_fused_spec_builds_its_members_in_order_in_the_worker() -> None:
    events: list[str] = []
    specs = [StageSpec(n, 1, functools.partial(Step, n, events), sheds=n == "b") for n in ("a", "b", "c")]
    (spec,) = fuse_middle(specs)
    stage = spec.factory()
    assert isinstance(stage, Fused) and stage.names == ("a", "b", "c")
    out = next(iter(stage.process(frame())))
    assert out.meta["trail"] == ["a", "b", "c"]


def test_outputs_each_get_every_frame_and_a_failing_one_is_named() -> None:
    events: list[str] = []
    first, second = Step("output0.video_file", events), Step("output1.jsonl", events, fail_on=1)
    outputs = started(Outputs([(first.name, first), (second.name, second)]))
    one = frame(0)
    assert list(outputs.process(one)) == []
    assert one.meta["trail"] == ["output0.video_file", "output1.jsonl"]
    with pytest.raises(MemberFailed, match=r"^output1.jsonl: ValueError: bad frame 1$"):
        list(outputs.process(frame(1)))


class Seen(Step):
    """Records which spans the frame carried when it got it (an output's record lists them)."""

    def process(self, frame: Frame) -> Iterable[Frame]:
        frame.meta.setdefault("seen", []).append(sorted(frame.timings))
        yield frame


def test_fused_outputs_stamp_each_output_s_span_once_every_output_wrote_the_frame() -> None:
    events: list[str] = []
    outputs = started(Outputs([("output0.jsonl", Seen("output0.jsonl", events)), ("output1.zmq", Seen("output1.zmq", events))]))
    one = frame(0)
    one.timings["infer"] = [1.0, 2.0]
    assert list(outputs.process(one)) == []
    assert one.meta["seen"] == [["infer"], ["infer"]]  # neither saw the other's span
    assert sorted(one.timings) == ["infer", "output0.jsonl", "output1.zmq"]
    first, second = one.timings["output0.jsonl"], one.timings["output1.zmq"]
    assert first[0] <= first[1] <= second[0] <= second[1]


def test_the_plan_fuses_stages_and_outputs_on_request() -> None:
    config = ROOT / "configs" / "default.yaml"
    split = build_plan(load_config(config, ["stages.fuse=false", "stages.fuse_outputs=false"]))
    assert split.stage_names == ("preprocess", "infer", "postprocess", "composite")
    assert split.output_names == ("output0.video_file", "output1.jsonl", "output2.zmq")
    assert not any(s.members for s in split.stages)

    fused = build_plan(load_config(config, ["stages.fuse=true", "stages.fuse_outputs=true"]))
    assert [(s.name, s.workers) for s in fused.middle] == [("infer", 2)]
    assert fused.output_names == ("outputs",)
    assert {s.name: s.members for s in fused.stages} == {
        "infer": ("preprocess", "infer", "postprocess", "composite"),
        "outputs": ("output0.video_file", "output1.jsonl", "output2.zmq"),
    }
    stage = fused.middle[0].factory()
    assert isinstance(stage, Fused) and stage.names == ("preprocess", "infer", "postprocess", "composite")



def test_a_fused_preprocess_writes_the_model_input_into_its_own_buffers_with_the_same_pixels() -> None:
    import numpy as np

    from framewire.stages.preprocess import Preprocess
    from framewire.stages.tasks import resolve_task

    task = resolve_task("face_detection", {})
    rng = np.random.default_rng(7)
    images = [rng.integers(0, 256, (272, 640, 3), dtype=np.uint8) for _ in range(3)]
    own = Preprocess(task, own_input=2)
    seen: list[np.ndarray] = []
    for seq, image in enumerate(images):
        pooled = Frame("cam", seq, pts=seq, time_s=0.0, width=640, height=272,
                       inline={"image": image, "input": np.zeros((1, 3, 288, 640), np.float32)})  # fmt: skip
        for _ in Preprocess(task).process(pooled):
            pass
        mine = Frame("cam", seq, pts=seq, time_s=0.0, width=640, height=272, inline={"image": image})
        for _ in own.process(mine):
            pass
        assert mine.scratch is not None and "scratch" not in str(mine.to_header())
        assert np.array_equal(mine.region("input"), pooled.region("input")) and mine.meta == pooled.meta
        seen.append(mine.region("input"))
    # Two buffers in turn: a batch of two frames gets one each, and the third reuses the first's.
    assert seen[0] is not seen[1] and seen[2] is seen[0]
