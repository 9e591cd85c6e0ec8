"""A worker whose backend (a Triton server) does not answer: the daemon is not ready while no worker
of a stage has its backend, such a worker is not taken as hung, and the metrics show it."""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import pytest

from framewire.pipeline.hub.header import FrameKey
from framewire.pipeline.ops.service import Health
from framewire.pipeline.ops.telemetry import Telemetry
from framewire.pipeline.plan import Plan
from framewire.pipeline.stagespec import StageSpec
from tests.unit.pipeline.test_lifecycle import lifecycle, stage_factory

pytestmark = pytest.mark.timeout(30)


def test_not_ready_while_every_worker_of_a_stage_waits_for_its_backend() -> None:
    life, _, _ = lifecycle()
    a, b = life.start_stage("infer", 0, stage_factory), life.start_stage("infer", 1, stage_factory)
    out = life.start_stage("out", 0, stage_factory)
    for peer in (a, b, out):
        peer.ready = True
    model = StageSpec("infer", 2, functools.partial(int), sheds=True, skips_stale=True)
    plan = Plan(stages=(model, StageSpec("out", 1, functools.partial(int), writes_output=True)),
                sources=(), slot_layout=lambda source, info: {})  # fmt: skip
    health = Health(plan, life.roster, SimpleNamespace(granting=True), lambda: False)  # type: ignore[arg-type]
    assert health()["ready"] is True
    a.backend_down = "Triton at h:1 does not answer"
    assert health()["ready"] is True  # the other worker still has it
    b.backend_down = "Triton at h:1 does not answer"
    assert health() == {"live": True, "ready": False, "reason": "infer: Triton at h:1 does not answer"}
    b.backend_down = None
    assert health()["ready"] is True


def test_a_worker_waiting_for_its_backend_is_not_killed_as_hung() -> None:
    life, _, _ = lifecycle(stall_timeout_s=5.0)
    waiting = life.start_stage("infer", 0, stage_factory)
    waiting.inflight[FrameKey("cam", 1)] = 100.0
    waiting.backend_down = "Triton at h:1 does not answer"
    assert life.kill_stalled(now=1000.0) == []
    waiting.backend_down = None
    assert life.kill_stalled(now=1000.0) == [waiting]


def test_backend_metrics() -> None:
    telemetry = Telemetry()
    telemetry.on_backend("infer", 0, False)
    telemetry.on_backend("infer", 1, True)
    telemetry.on_backend_times("infer", "yunet", {"requests": 12, "queue_s": 0.5, "compute_s": 1.5})
    text = telemetry.metrics.render()
    expected: list[Any] = [
        'framewire_backend_up{index="0",stage="infer"} 0.0',
        'framewire_backend_up{index="1",stage="infer"} 1.0',
        'framewire_backend_outages_total{stage="infer"} 1.0',
        'framewire_backend_requests_total{model="yunet",stage="infer"} 12.0',
        'framewire_backend_queue_seconds_total{model="yunet",stage="infer"} 0.5',
        'framewire_backend_compute_seconds_total{model="yunet",stage="infer"} 1.5',
    ]
    for line in expected:
        assert line in text, line
