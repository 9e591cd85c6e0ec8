"""A model's new version while the job runs (pipeline.hub.swap), without processes: a real Lifecycle
(with fake processes), Roster and Router, frames moved through them by hand. Every frame once, in
order, each made by one generation at every stage, the generations switching once; a new worker
that cannot start leaves the old ones working."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from framewire.pipeline.hub.header import FrameHeader, FrameKey
from framewire.pipeline.hub.lifecycle import Lifecycle
from framewire.pipeline.hub.peers import Roster, StageWorker
from framewire.pipeline.hub.routing import FrameState, Router
from framewire.pipeline.hub.swap import (
    DONE,
    FAILED,
    GENERATION_STEP,
    RETIRING,
    STARTING,
    TAKING_OVER,
    SwapRefused,
    Swaps,
)
from framewire.pipeline.plan import ModelVersion, Plan, StageUpdate
from framewire.pipeline.stagespec import StageSpec
from framewire.pipeline.wire import messages as msg

pytestmark = pytest.mark.timeout(30)


class FakeProcess:
    pid = 1000

    def __init__(self) -> None:
        self.alive = True
        self.exitcode: int | None = None

    def is_alive(self) -> bool:
        return self.alive

    def kill(self) -> None:
        self.alive, self.exitcode = False, -9

    def join(self, timeout: float | None = None) -> None:
        return None


def make(version: str) -> Any:
    raise AssertionError(f"never called ({version}): no process runs")


OLD, NEW = functools.partial(make, "v1"), functools.partial(make, "v2")


class Job:
    """A job of `stages` (2 workers each) and one output, its frames moved by hand."""

    def __init__(self, stages: tuple[str, ...] = ("infer",), workers: int = 2, **specs: Any) -> None:
        self.specs = tuple(StageSpec(name, workers, OLD, **specs) for name in stages)
        self.plan = Plan(
            stages=(*self.specs, StageSpec("out", 1, OLD, writes_output=True)),
            sources=(),
            slot_layout=lambda sid, info: {},
            restart_backoff_s=(0.1, 0.3),
            model=ModelVersion("a.onnx", "v1"),
        )
        self.roster = Roster({name: [] for name in self.plan.stage_names + self.plan.output_names})
        self.router = Router(self.plan.stage_names, self.plan.output_names)
        self.sent: list[tuple[bytes, dict[str, Any]]] = []
        self.lifecycle = Lifecycle(self.plan, "ipc://unused", self._send, self.roster, lambda t, s: FakeProcess())
        self.swaps = Swaps(self.plan, self.lifecycle, self.roster, self.router, start_timeout_s=5.0)
        for spec in self.plan.stages:
            for index in range(spec.workers):
                self.lifecycle.start_stage(spec.name, index, spec.factory).announce(2)
        self.made: dict[tuple[str, int], list[Any]] = {}
        """Which factory's worker did each stage of each frame, by (stage, seq)."""
        self.written: list[int] = []
        self.now = 0.0
        self.router.open("cam")

    def _send(self, identity: bytes, header: dict[str, Any], tensors: Any) -> bool:
        self.sent.append((identity, header))
        return True

    def _work(self, peer: StageWorker, key: FrameKey, state: FrameState) -> bool:
        self.made.setdefault((peer.stage, key.seq), []).append(peer.spec.factory)
        return True

    def admit(self, seqs: range) -> None:
        for seq in seqs:
            self.router.admit(FrameHeader(FrameKey("cam", seq), seq, seq, None, 0), {"slot": seq}, {})

    def workers(self) -> list[StageWorker]:
        return [w for w in self.lifecycle.processes.values() if isinstance(w, StageWorker)]

    def new_workers(self, stage: str = "infer") -> list[StageWorker]:
        return [w for w in self.workers() if w.stage == stage and w.spec.factory is NEW]

    def old_workers(self, stage: str = "infer") -> list[StageWorker]:
        return [w for w in self.workers() if w.stage == stage and w.spec.factory is OLD]

    def dispatch(self) -> None:
        self.router.dispatch(self.roster.of, self._work, lambda peer, source: None, self.now)

    def answer(self, peer: StageWorker, most: int = 100) -> None:
        """`peer` answers up to `most` of the frames it holds, oldest first."""
        for key in sorted(peer.inflight, key=lambda k: k.seq)[:most]:
            peer.give_back(key)
            if peer.stage == "out":
                self.written.append(key.seq)
                self.router.written(key)
            else:
                self.router.done(key, peer.stage, {"source": "cam", "seq": key.seq}, {})

    def pump(self, rounds: int = 50) -> None:
        """Dispatch, and every worker answers what it holds, until nothing moves."""
        for _ in range(rounds):
            self.dispatch()
            for peer in self.workers():
                if peer.process.is_alive():  # a dead one answers nothing
                    self.answer(peer)
            self.step()

    def step(self) -> None:
        self.now += 0.05
        for worker in self.lifecycle.exited():  # as the hub's check of the dead does
            if self.lifecycle.forget(worker) and not worker.finished:
                assert isinstance(worker, StageWorker)
                if self.swaps.on_death(worker, "killed"):
                    self.router.requeue(worker.stage, worker)
        self.swaps.step(self.now)

    def update(self, stages: tuple[str, ...] | None = None) -> StageUpdate:
        names = stages or tuple(s.name for s in self.specs)
        kept = [s for s in self.specs if s.name in names]
        specs = tuple(StageSpec(s.name, s.workers, NEW, sheds=s.sheds, ordered=s.ordered) for s in kept)
        return StageUpdate(ModelVersion("b.onnx", "v2"), specs)

    def stopped(self) -> set[bytes]:
        return {identity for identity, header in self.sent if header["type"] == msg.STOP}


def test_new_workers_start_held_beside_the_old_ones_which_go_on_working() -> None:
    job = Job()
    job.admit(range(6))
    swap = job.swaps.begin(job.update(), now=job.now)
    new = job.new_workers()
    assert swap.phase == STARTING and len(new) == 2 and all(p.held and p.starting for p in new)
    assert {p.spec.generation for p in new} == {GENERATION_STEP}
    assert len(job.roster.of("infer")) == 4  # beside, not instead
    job.pump(10)
    assert sorted(job.written) == list(range(6))  # the old generation made them all
    assert all(job.made[("infer", s)] == [OLD] for s in range(6)) and swap.phase == STARTING


def test_the_fused_stage_switches_once_at_one_frame_and_no_frame_is_lost_or_reordered() -> None:
    job = Job()
    job.admit(range(40))
    job.dispatch()  # the old workers hold frames 0-3
    job.swaps.begin(job.update(), now=job.now)
    for peer in job.new_workers():
        peer.announce(2)  # READY: held until the swap takes over
    job.step()
    swap = job.swaps.last
    assert swap is not None and swap.phase == RETIRING and job.swaps.model == ModelVersion("b.onnx", "v2")
    old = job.old_workers()
    assert all(p.inflight for p in old) and not job.stopped()  # they finish what they hold first
    assert all(p not in job.roster.of("infer") for p in old)
    job.pump()
    assert job.written == list(range(40))
    made = [job.made[("infer", s)] for s in range(40)]
    assert all(len(m) == 1 for m in made)  # every frame once
    assert [m[0] for m in made] == [OLD] * 4 + [NEW] * 36  # old, then new, switching once
    assert job.stopped() == {p.identity for p in old} and all(p.finished for p in old)
    for peer in old:
        peer.process.alive = False
    job.step()
    assert swap.phase == DONE and job.swaps.describe()["swap"]["state"] == DONE


def test_unfused_stages_swap_together_so_each_frame_meets_one_generation() -> None:
    job = Job(stages=("pre", "infer", "post"))
    job.admit(range(30))
    job.dispatch()
    job.answer(job.old_workers("pre")[0])  # frames spread over the three stages
    job.dispatch()
    job.swaps.begin(job.update(), now=job.now)
    for stage in ("pre", "infer", "post"):
        for peer in job.new_workers(stage):
            peer.announce(2)
    job.step()
    swap = job.swaps.last
    assert swap is not None and swap.phase == TAKING_OVER  # frames are between the stages
    assert all(p.held for p in job.old_workers("pre"))  # nothing new enters meanwhile
    job.pump()
    assert swap.phase in (RETIRING, DONE) and job.written == list(range(30))
    for seq in range(30):
        makers = [job.made[(stage, seq)] for stage in ("pre", "infer", "post")]
        assert all(len(m) == 1 for m in makers) and len({m[0] for m in makers}) == 1, (seq, makers)
    firsts = [job.made[("pre", seq)][0] for seq in range(30)]
    switch = firsts.index(NEW)
    assert 0 < switch and firsts == [OLD] * switch + [NEW] * (30 - switch)


def test_a_new_worker_that_cannot_start_fails_the_swap_and_the_old_ones_go_on() -> None:
    job = Job()
    job.admit(range(10))
    job.swaps.begin(job.update(), now=job.now)
    new = job.new_workers()
    new[1].announce(2)
    assert job.swaps.on_fatal(new[0], "model file 'b.onnx' is not a valid ONNX model")
    swap = job.swaps.last
    assert swap is not None and swap.phase == FAILED
    assert swap.error == "infer[0]: model file 'b.onnx' is not a valid ONNX model"
    assert all(p.finished and p not in job.roster.of("infer") for p in new)
    assert not new[1].process.is_alive()  # the ready one is stopped too
    assert job.swaps.model == ModelVersion("a.onnx", "v1") and job.swaps.describe()["version"] == "v1"
    job.pump()
    assert job.written == list(range(10)) and all(job.made[("infer", s)] == [OLD] for s in range(10))
    assert not job.swaps.busy
    old = job.old_workers()
    assert not job.swaps.on_fatal(old[0], "x")  # an old worker's FATAL is the hub's usual business


def test_a_late_fatal_of_a_failed_swaps_worker_does_not_end_the_job() -> None:
    job = Job()
    job.swaps.begin(job.update(), now=job.now)
    first, second = job.new_workers()
    assert job.swaps.on_fatal(first, "cannot load")
    assert job.swaps.on_fatal(second, "cannot load")  # sent before it was stopped: not the hub's rule
    job.swaps.begin(job.update(), now=job.now)  # and the next swap does not take it for its own
    assert job.swaps.on_fatal(second, "cannot load") and job.swaps.last.phase == STARTING
    assert job.swaps.last.error is None


def test_a_new_worker_that_dies_or_never_says_ready_fails_the_swap() -> None:
    job = Job()
    job.swaps.begin(job.update(), now=job.now)
    assert job.swaps.on_death(job.new_workers()[0], "killed by SIGSEGV")
    assert job.swaps.last is not None and job.swaps.last.error == "infer[0] died while starting (killed by SIGSEGV)"
    job.swaps.begin(job.update(), now=job.now)
    job.now += 10.0
    job.step()
    assert job.swaps.last.phase == FAILED and "did not start within 5 s" in str(job.swaps.last.error)
    assert len(job.roster.of("infer")) == 2 and all(p.available for p in job.roster.of("infer"))


def test_a_retiring_worker_that_dies_hands_its_frames_to_the_new_ones() -> None:
    job = Job()
    job.admit(range(8))
    job.dispatch()
    job.swaps.begin(job.update(), now=job.now)
    for peer in job.new_workers():
        peer.announce(2)
    job.step()
    dead = job.old_workers()[0]
    held = sorted(k.seq for k in dead.inflight)
    dead.process.kill()
    job.pump()
    assert job.written == list(range(8))
    assert all(job.made[("infer", s)][-1] is NEW for s in held)  # done again by the new generation
    working = [w for w in job.workers() if w.process.is_alive() and not w.finished]
    assert all(w.spec.factory is NEW for w in working if w.stage == "infer")


def test_one_swap_at_a_time_of_stages_the_job_has_doing_what_they_did() -> None:
    job = Job()
    job.swaps.begin(job.update(), now=job.now)
    with pytest.raises(SwapRefused, match="a swap to v2 is under way"):
        job.swaps.begin(job.update())
    other = Job()
    with pytest.raises(SwapRefused, match="no stage 'track'"):
        other.swaps.begin(StageUpdate(ModelVersion("b", "v2"), (StageSpec("track", 1, NEW),)))
    with pytest.raises(SwapRefused, match="cannot be swapped"):
        other.swaps.begin(StageUpdate(ModelVersion("b", "v2"), (StageSpec("out", 1, NEW, writes_output=True),)))
    with pytest.raises(SwapRefused, match="does other things"):
        other.swaps.begin(StageUpdate(ModelVersion("b", "v2"), (StageSpec("infer", 2, NEW, ordered=True),)))
    assert other.swaps.last is None and len(other.roster.of("infer")) == 2


def test_restarts_of_the_old_generation_still_due_are_cancelled_when_the_new_one_takes_over() -> None:
    job = Job()
    job.swaps.begin(job.update(), now=job.now)
    dying = job.old_workers()[0]
    dying.process.kill()
    job.lifecycle.forget(dying)
    job.lifecycle.schedule_restart(dying, "killed")
    for peer in job.new_workers():
        peer.announce(2)
    job.step()
    assert job.swaps.last is not None and job.swaps.last.phase == RETIRING
    job.lifecycle.restart_due(job.now + 60.0)
    assert [w.spec.factory for w in job.workers() if w.stage == "infer" and not w.finished] == [NEW, NEW]


def test_a_roster_keeps_the_old_worker_of_an_index_beside_its_new_generation() -> None:
    job = Job()
    old = job.roster.of("infer")[0]
    new = job.lifecycle.start_stage("infer", 0, NEW, generation=GENERATION_STEP, beside=True)
    assert old in job.roster.of("infer") and new in job.roster.of("infer")
    restarted = job.lifecycle.start_stage("infer", 0, NEW, generation=GENERATION_STEP + 1)
    assert [p for p in job.roster.of("infer") if p.index == 0] == [restarted]
