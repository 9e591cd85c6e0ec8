"""A source's settings changed at run time in a fleet (two replicas in-process, real processes, fake
stages, a real Redis): a PATCH on the replica that does not run the source is kept in the store and
applied on the one that does, from a frame on; both answer GET from the store; a bad change is one
line naming the key; a source added with settings starts with them."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import Frame
from framewire.pipeline.plan import FleetSettings, HttpSettings, Plan, SettingsHooks
from framewire.pipeline.stagespec import StageSpec
from tests.integration.test_control import TOKEN, Running, request, wait_for
from tests.support import fakes
from tests.support.redis_server import redis_server

pytestmark = pytest.mark.timeout(120)

LEASE_S = 1.0


class Marking(fakes.Passthrough):
    """Puts each source's setting `mark` (as configured at run time) into its frames' meta."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.marks: dict[str, Any] = {}

    def configure(self, source_id: str, settings: dict[str, Any]) -> None:
        self.marks[source_id] = settings.get("mark")

    def process(self, frame: Frame) -> Iterable[Frame]:
        for out in super().process(frame):
            out.meta = {**out.meta, "mark": self.marks.get(frame.source_id)}
            yield out


def marking(name: str) -> Marking:
    return Marking(name)


def check(source_id: str, change: Any, current: Mapping[str, Any], size: Any) -> dict[str, Any]:
    """The fake job's settings: `mark`, an integer."""
    for key, value in change.items():
        if key != "mark":
            raise ConfigError(f"{key}: unknown key")
        if value is not None and not isinstance(value, int):
            raise ConfigError(f"mark: not an integer (got {value!r})")
    return {k: v for k, v in {**current, **change}.items() if v is not None}


def replica(tmp: Path, store: str, name: str) -> Plan:
    seed = (("cam", {"id": "cam", "frames": 100000, "delay_s": 0.02}),)  # runs until stopped
    return Plan(
        stages=(
            StageSpec("infer", 1, functools.partial(marking, "inf")),
            StageSpec("out", 1, functools.partial(fakes.sink, str(tmp / name)), writes_output=True),
        ),
        sources=(),
        slot_layout=fakes.layout,
        http=HttpSettings(port=0, token=TOKEN, keep_running=True),
        make_source=fakes.make_source_plan,
        fleet=FleetSettings(store=store, replica=name, lease_s=LEASE_S, namespace="s", seed=seed),
        settings=SettingsHooks(frozenset({"mark"}), check, {}, str(tmp / name / "state.json")),
    )


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")] if path.exists() else []


def test_a_change_on_any_replica_applies_where_the_source_runs(tmp_path: Path) -> None:
    with ExitStack() as stack:
        store = stack.enter_context(redis_server(tmp_path / "redis"))
        one = stack.enter_context(Running(replica(tmp_path, store, "r1")))
        two = stack.enter_context(Running(replica(tmp_path, store, "r2")))
        runner: dict[str, str] = {}

        def running() -> bool:
            status, body = request(one.url + "/sources")
            found = [s for s in body.get("sources", [])] if status == 200 else []
            runner.update({s["id"]: s["replica"] for s in found if s.get("state") == "running"})
            return "cam" in runner

        wait_for(running)
        owner, other = (one, two) if runner["cam"] == "r1" else (two, one)
        out = tmp_path / runner["cam"] / "cam.jsonl"
        wait_for(lambda: len(records(out)) > 5)  # frames before the change
        assert request(other.url + "/sources/cam", "PATCH", {"mark": "x"}) == (
            400, {"error": "mark: not an integer (got 'x')"})
        status, body = request(other.url + "/sources/cam", "PATCH", {"mark": 7})
        assert (status, body["settings"]) == (200, {"mark": 7}), body
        assert request(owner.url + "/sources/cam")[1]["settings"] == {"mark": 7}  # the store's, on any replica
        wait_for(lambda: any(r["meta"].get("mark") == 7 for r in records(out)), timeout=LEASE_S * 5 + 10)
        marks = [r["meta"].get("mark") for r in records(out)]
        first = marks.index(7)
        assert set(marks[:first]) == {None} and set(marks[first:]) == {7}  # from one frame on, every frame
        seqs = [r["seq"] for r in records(out)]
        assert seqs == list(range(len(seqs)))  # none lost

        # The runner's own PATCH applies at once; a source added with settings starts with them.
        assert request(owner.url + "/sources/cam", "PATCH", {"mark": 8})[0] == 200
        wait_for(lambda: records(out)[-1]["meta"].get("mark") == 8)
        status, _ = request(other.url + "/sources", "POST", {"id": "short", "frames": 20, "mark": 3})
        assert status == 201
        wait_for(lambda: any((tmp_path / r / "short.closed").exists() for r in ("r1", "r2")), timeout=30)
        ran = next(r for r in ("r1", "r2") if (tmp_path / r / "short.closed").exists())
        assert [r["meta"]["mark"] for r in records(tmp_path / ran / "short.jsonl")] == [3] * 20
        assert request(other.url + "/sources/nothing", "PATCH", {"mark": 1})[0] == 404
