"""Liveness and readiness: separate questions, so a liveness probe never restarts a daemon that is
only waiting for workers or stopping."""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import pytest

from framewire.pipeline.plan import Plan
from framewire.pipeline.ops.service import Health
from framewire.pipeline.hub.peers import Roster
from framewire.pipeline.stagespec import StageSpec

pytestmark = pytest.mark.timeout(30)


class _Roster(Roster):
    def __init__(self, stages: list[str]) -> None:
        super().__init__({name: [] for name in stages})
        self.up: set[str] = set()

    def has_ready(self, stage: str) -> bool:
        return stage in self.up


def plan() -> Plan:
    model = StageSpec("infer", 1, functools.partial(int), sheds=True, skips_stale=True)
    return Plan(stages=(model, StageSpec("out", 1, functools.partial(int), writes_output=True)),
                sources=(), slot_layout=lambda source, info: {})  # fmt: skip


def health(p: Plan, roster: _Roster, stopping: bool = False, granting: bool = False) -> Health:
    return Health(p, roster, SimpleNamespace(granting=granting), lambda: stopping)  # type: ignore[arg-type]


def test_live_but_not_ready_while_waiting_for_workers() -> None:
    roster = _Roster(["infer", "out"])
    roster.up = {"out"}
    assert health(plan(), roster)() == {"live": True, "ready": False, "reason": "waiting for a worker of infer"}
    roster.up = {"out", "infer"}
    assert health(plan(), roster)() == {"live": True, "ready": False, "reason": "starting"}
    assert health(plan(), roster, granting=True)() == {"live": True, "ready": True}


def test_a_restarting_worker_keeps_it_ready() -> None:
    roster = _Roster(["infer", "out"])
    roster.up = {"out"}
    assert health(plan(), roster, granting=True)()["ready"] is True


def test_stopping_is_not_ready_and_a_stuck_loop_is_not_live() -> None:
    roster = _Roster(["infer", "out"])
    roster.up = {"infer", "out"}
    assert health(plan(), roster, stopping=True, granting=True)() == {"live": True, "ready": False, "reason": "stopping"}
    stuck: Any = health(plan(), roster, granting=True)
    stuck.last_tick -= 60
    assert stuck() == {"live": False, "ready": False, "reason": "the hub loop is not turning"}
