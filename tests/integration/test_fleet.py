"""A replica of a fleet in-process (real processes, fake stages, a real Redis): DELETE through the
fleet, and a replica cut off from its store, which answers 503 and stops its sources once its
leases may have run out (the others are taking them over)."""

from __future__ import annotations

import functools
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from framewire.pipeline.plan import FleetSettings, HttpSettings, Plan
from framewire.pipeline.stagespec import StageSpec
from tests.integration.test_control import TOKEN, Running, request, wait_for
from tests.support import fakes
from tests.support.redis_server import redis_server

pytestmark = pytest.mark.timeout(120)

LEASE_S = 1.0


def replica_plan(tmp: Path, store: str) -> Plan:
    seed = (("cam", {"id": "cam", "frames": 100000, "delay_s": 0.02}),)  # runs until stopped
    return Plan(
        stages=(
            StageSpec("infer", 1, functools.partial(fakes.passthrough, "inf"), sheds=True, skips_stale=True),
            StageSpec("out", 1, functools.partial(fakes.sink, str(tmp)), writes_output=True),
        ),
        sources=(),
        slot_layout=fakes.layout,
        http=HttpSettings(port=0, token=TOKEN, keep_running=True),
        make_source=fakes.make_source_plan,
        fleet=FleetSettings(store=store, replica="solo", lease_s=LEASE_S, namespace="t", seed=seed),
    )


def listed(url: str) -> dict[str, dict]:
    status, body = request(url + "/sources")
    return {s["id"]: s for s in body["sources"]} if status == 200 else {}


def test_delete_through_the_fleet_then_a_store_that_goes_away(tmp_path: Path) -> None:
    with ExitStack() as stack:
        store = stack.enter_context(redis_server(tmp_path / "redis"))
        with Running(replica_plan(tmp_path, store)) as job:
            wait_for(lambda: listed(job.url).get("cam", {}).get("state") == "running")
            body = request(job.url + "/sources")[1]
            assert (body["replica"], body["replicas"], body["sources"][0]["replica"]) == ("solo", ["solo"], "solo")
            assert request(job.url + "/sources", "POST", {"frames": "many"})[0] == 400  # checked before it is added
            assert request(job.url + "/sources", "POST", {"id": "short", "frames": 30}) == (
                201, {"id": "short", "state": "waiting", "replica": None})  # fmt: skip
            wait_for(lambda: listed(job.url).get("short", {}).get("state") == "ended")
            assert (listed(job.url)["short"]["frames"], listed(job.url)["short"]["replica"]) == (30, "solo")
            assert request(job.url + "/sources", "POST", {"id": "short", "frames": 3})[0] == 409  # ended, listed
            assert request(job.url + "/sources/short", "DELETE") == (200, {"removed": "short"})
            assert request(job.url + "/sources/short", "DELETE")[0] == 404

            stack.close()  # Redis goes away
            status, body = request(job.url + "/sources")
            assert status == 503 and body["error"].startswith(f"fleet store {store}: ConnectionError: "), body
            gone = time.monotonic()
            wait_for(lambda: (tmp_path / "cam.closed").exists(), timeout=LEASE_S + 10)  # stopped, files closed
            assert time.monotonic() - gone < LEASE_S + 5
            assert request(job.url + "/livez", token=None)[0] == 200  # still live: it waits for the store
            assert request(job.url + "/drain", "POST")[0] == 202
            job.thread.join(30)
        assert job.report is not None and job.report.exit_code == 0 and job.report.frames["cam"] > 0
