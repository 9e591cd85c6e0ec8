"""Worker processes without processes (pipeline.lifecycle): starts, deaths, restarts with backoff,
stage that keeps dying, hung workers."""

from __future__ import annotations

from typing import Any

import pytest

from framewire.pipeline.errors import JobFailed
from framewire.pipeline.stagespec import StageSpec
from framewire.pipeline.plan import Plan, SourcePlan
from framewire.pipeline.hub.lifecycle import Lifecycle, exit_text
from framewire.pipeline.hub.peers import DecodeWorker, StageWorker, Roster
from framewire.pipeline.hub.header import FrameKey

pytestmark = pytest.mark.timeout(30)


class FakeProcess:
    def __init__(self, target: Any, spec: Any) -> None:
        self.target, self.spec = target, spec
        self.alive = True
        self.exitcode: int | None = None
        self.pid = 1000

    def is_alive(self) -> bool:
        return self.alive

    def kill(self) -> None:
        self.alive, self.exitcode = False, -9

    def join(self, timeout: float | None = None) -> None:
        return None


def stage_factory() -> Any:
    raise AssertionError("never called: no process runs")


def lifecycle(**plan: Any) -> tuple[Lifecycle, list[FakeProcess], list[tuple[bytes, dict[str, Any]]]]:
    started: list[FakeProcess] = []
    sent: list[tuple[bytes, dict[str, Any]]] = []

    def start(target: Any, spec: Any) -> FakeProcess:
        started.append(FakeProcess(target, spec))
        return started[-1]

    def send(identity: bytes, header: dict[str, Any], tensors: Any) -> bool:
        sent.append((identity, header))
        return True

    defaults: dict[str, Any] = {
        "stages": (
            StageSpec("infer", 2, stage_factory, sheds=True, credits=plan.pop("infer_credits", None)),
            StageSpec("out", 1, stage_factory, writes_output=True),
        ),
        "sources": (),
        "slot_layout": lambda sid, info: {}, "restart_backoff_s": (0.1, 0.3), "max_restarts": 3,
    }
    return Lifecycle(Plan(**{**defaults, **plan}), "ipc:///nowhere", send, Roster(), start), started, sent


def test_workers_start_with_their_stage_credits_and_join_the_roster() -> None:
    life, started, _ = lifecycle(infer_credits=6)
    infer = life.start_stage("infer", 1, stage_factory)
    out = life.start_stage("out", 0, stage_factory, label="output[0]")
    decode = life.start_decode(SourcePlan("cam", stage_factory), 0)
    assert [p.spec.credits for p in started] == [6, 4, 2]
    assert (infer.name, out.name, decode.source_id) == ("infer[1]", "output[0]", "cam")
    assert life.roster.of("infer") == [infer] and isinstance(decode, DecodeWorker)
    assert life.get(b"infer.1.0") is infer and life.get(b"decode.0.0") is decode


def test_a_dead_worker_comes_back_after_a_doubling_backoff_as_a_new_generation() -> None:
    life, started, _ = lifecycle()
    peer = life.start_stage("infer", 0, stage_factory)
    peer.process.kill()
    assert list(life.exited()) == [peer] and life.forget(peer) and not life.forget(peer)
    assert life.schedule_restart(peer, exit_text(peer.process.exitcode)) == pytest.approx(0.1)
    assert life.roster.of("infer") == [] and life.restarts == {"infer": 1}
    life.restart_due(now=0.0)
    assert len(started) == 1  # not yet
    life.restart_due(now=float("inf"))
    again = life.roster.of("infer")[0]
    assert isinstance(again, StageWorker) and again.spec.generation == 1 and again.index == 0
    assert life.schedule_restart(again, "exit code 1") == pytest.approx(0.2)


def test_a_stage_that_keeps_dying_or_an_output_that_dies_ends_the_job() -> None:
    life, _, _ = lifecycle()
    peer = life.start_stage("infer", 0, stage_factory)
    for _ in range(3):
        life.schedule_restart(peer, "exit code 1")
    with pytest.raises(JobFailed, match=r"^infer workers keep dying \(4 times in a minute, last exit code 1\)$"):
        life.schedule_restart(peer, "exit code 1")
    out = life.start_stage("out", 0, stage_factory, label="output[0]")
    with pytest.raises(JobFailed, match=r"^output\[0\] worker died \(killed by SIGKILL\)$"):
        life.schedule_restart(out, exit_text(-9))


def test_a_worker_holding_a_frame_too_long_is_killed_once_as_hung() -> None:
    life, _, _ = lifecycle(stall_timeout_s=5.0)
    busy, idle = life.start_stage("infer", 0, stage_factory), life.start_stage("infer", 1, stage_factory)
    busy.inflight[FrameKey("cam", 7)] = 100.0
    assert life.kill_stalled(now=104.0) == []
    assert life.kill_stalled(now=106.0) == [busy]
    assert busy.stalled == "hung: held frame 7 of source cam for 6.0 s, over stages.stall_timeout_s"
    assert not busy.process.is_alive() and idle.process.is_alive()
    assert life.kill_stalled(now=200.0) == []  # killed once


def test_stop_all_tells_every_live_worker_and_kills_what_does_not_stop() -> None:
    life, started, sent = lifecycle()
    life.start_stage("infer", 0, stage_factory)
    life.start_decode(SourcePlan("cam", stage_factory), 0)
    life.stop_all(timeout_s=0.0)
    assert [header["type"] for _, header in sent] == ["stop", "stop"]
    assert all(not p.is_alive() for p in started)  # the fakes never stop by themselves


def test_exit_text() -> None:
    assert [exit_text(c) for c in (None, 0, 3, -9, -99)] == [
        "still running", "exit code 0", "exit code 3", "killed by SIGKILL", "killed by signal 99",
    ]




def worker_init() -> None:
    raise AssertionError("run in the worker, not here")


def test_every_worker_gets_the_plan_s_init() -> None:
    life, started, _ = lifecycle(worker_init=worker_init)
    life.start_stage("infer", 0, stage_factory)
    life.start_decode(SourcePlan("cam", stage_factory), 0)
    assert [p.spec.init for p in started] == [worker_init, worker_init]
