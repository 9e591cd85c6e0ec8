"""The fleet's store on a real Redis: one claim wins, leases run out and are taken over (as resumes),
a replica id is held by one live process, DELETE stops then forgets, and ended sources stay ended."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from framewire.pipeline.ops.fleet_store import RedisStore, StoreError, replica_of
from tests.support.redis_server import redis_server

pytestmark = pytest.mark.timeout(60)

LEASE_S = 1.0


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path / "redis") as found:
        yield found


def wait_for(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_one_claim_wins_and_a_lease_that_runs_out_is_taken_over_as_a_resume(url: str) -> None:
    a, b = RedisStore(url, "t", "a", LEASE_S), RedisStore(url, "t", "b", LEASE_S)
    assert a.add("cam", {"id": "cam", "uri": "x.mp4"}) == 1
    assert b.add("cam", {"id": "cam", "uri": "y.mp4"}) == 0  # the first item stays
    assert a.claim("cam") == 1 and b.claim("cam") == -1
    scan = b.scan()
    assert scan.wanted == {"cam": {"id": "cam", "uri": "x.mp4"}} and replica_of(scan.holders["cam"]) == "a"
    for _ in range(2):  # renewed: still a's after more than a lease
        time.sleep(LEASE_S * 0.6)
        assert a.heartbeat(["cam"]) == []
    assert b.claim("cam") == -1
    wait_for(lambda: b.scan().holders["cam"] is None)  # a fell silent: its lease ran out
    assert b.claim("cam") == 0  # it ran before: b resumes it
    assert a.heartbeat(["cam"]) == ["cam"]  # a learns it lost it


def test_a_replica_id_belongs_to_one_live_process_until_its_membership_runs_out(url: str) -> None:
    first, second = RedisStore(url, "t", "r0", LEASE_S), RedisStore(url, "t", "r0", LEASE_S)
    assert first.heartbeat([]) == [] and second.heartbeat([]) is None
    assert sorted(first.scan().live) == ["r0"]
    wait_for(lambda: second.heartbeat([]) is not None)  # the first one stopped renewing
    assert first.heartbeat([]) is None
    second.leave()
    assert second.scan().live == {}


def test_a_source_that_ends_stays_ended_and_one_handed_over_is_claimed_again(url: str) -> None:
    a, b = RedisStore(url, "t", "a", 30), RedisStore(url, "t", "b", 30)
    for sid in ("done", "moved"):
        a.add(sid, {"id": sid, "uri": f"{sid}.mp4"})
        assert a.claim(sid) == 1
    assert a.finish("done", {"id": "done", "state": "ended", "frames": 7}, ended=True)
    assert a.finish("moved", {"id": "moved", "state": "ended"}, ended=False)  # a drained: hand it over
    assert b.claim("done") == -1 and b.claim("moved") == 0
    assert not a.finish("moved", {}, ended=True)  # not a's lease any more: nothing recorded
    assert a.add("done", {"id": "done", "uri": "done.mp4"}) == 2
    view = b.view()
    assert view["done"] == {"done": {"id": "done", "state": "ended", "frames": 7}}
    assert replica_of(view["holders"]["moved"]) == "b" and view["live"] == []


def test_delete_stops_a_running_source_ends_an_unclaimed_one_and_then_forgets_it(url: str) -> None:
    a = RedisStore(url, "t", "a", 30)
    for sid in ("run", "idle"):
        a.add(sid, {"id": sid, "uri": f"{sid}.mp4"})
    assert a.claim("run") == 1
    assert a.remove("nope", {}) == 0
    assert a.remove("run", {"id": "run", "state": "ended"}) == 2 and a.scan().stopping == {"run"}
    assert a.claim("run") == -1 and "run" not in a.scan().wanted
    assert a.finish("run", {"id": "run", "state": "ended", "frames": 3}, ended=False)  # asked to stop: ended
    assert a.remove("idle", {"id": "idle", "state": "ended", "frames": 0}) == 2
    assert sorted(a.view()["done"]) == ["idle", "run"] and a.claim("idle") == -1
    assert a.remove("run", {}) == 1 and a.remove("idle", {}) == 1
    view = a.view()
    assert (view["ids"], view["done"], view["stop"]) == ([], {}, set())
    assert a.add("run", {"id": "run", "uri": "run.mp4"}) == 1 and a.claim("run") == 1  # a fresh start again


def test_a_store_that_does_not_answer_fails_in_one_line(tmp_path: Path) -> None:
    from tests.support.ports import free_port

    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", "t", "a", LEASE_S)
    with pytest.raises(StoreError, match=r"^fleet store redis://127.0.0.1:\d+/0: ConnectionError: "):
        store.heartbeat([])
