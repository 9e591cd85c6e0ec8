"""The hub's share-out of the live layout (pipeline.hub.shares), without processes: which worker reads each
live source, what each is told and when, and a source that moves when the shares grow uneven."""

from __future__ import annotations

from typing import Any

import pytest

from framewire.pipeline.hub.shares import LiveLayout
from framewire.pipeline.hub.peers import Roster, StageWorker
from framewire.pipeline.plan import Policy, SourceOptions, SourcePlan
from framewire.pipeline.stagespec import StageSpec
from framewire.pipeline.wire import messages as msg
from framewire.pipeline.worker.hub_link import WorkerSpec

pytestmark = pytest.mark.timeout(30)


class Sent:
    def __init__(self) -> None:
        self.messages: list[tuple[bytes, dict[str, Any]]] = []

    def __call__(self, identity: bytes, header: dict[str, Any], tensors: Any = None) -> bool:
        self.messages.append((identity, header))
        return True

    def shares(self) -> list[tuple[str, str, str]]:
        """(worker, add|drop, source) of every SHARE sent, in order."""
        out = []
        for identity, header in self.messages:
            if header["type"] == msg.SHARE:
                what = "add" if "add" in header else "drop"
                out.append((identity.decode().split(".")[1], what, header[what]))
        return out


def worker(index: int, sent: Sent, roster: Roster, ready: bool = True) -> StageWorker:
    spec = WorkerSpec(stage="infer", index=index, generation=0, endpoint="ipc://x", credits=2, factory=int)
    peer = StageWorker(spec, None, sent)
    peer.ready = ready
    roster.add(peer)
    return peer


def cam(name: str, item: dict[str, Any] | None = None) -> SourcePlan:
    return SourcePlan(name, int, SourceOptions(policy=Policy.DROP_OLDEST), item=item)


def layout(workers: int = 2) -> tuple[LiveLayout, Roster, Sent]:
    roster, sent = Roster({"infer": []}), Sent()
    return LiveLayout(StageSpec("infer", workers, int, sheds=True, decodes_sources=True, shares=((),) * workers), roster), roster, sent


def test_sources_go_to_the_emptiest_worker_and_start_when_it_is_ready() -> None:
    live, roster, sent = layout()
    up = worker(0, sent, roster)
    late = worker(1, sent, roster, ready=False)
    for name in ("cam0", "cam1", "cam2"):
        live.add(cam(name))
    assert live.shares == (("cam0", "cam2"), ("cam1",))
    assert sent.shares() == [("0", "add", "cam0"), ("0", "add", "cam2")]  # worker 1 is not up yet
    late.ready = True
    live.on_ready(late, running=lambda sid: True)
    assert sent.shares()[-1] == ("1", "add", "cam1")
    assert live.peer_of("cam1") is late and live.peer_of("cam2") is up


def test_a_source_added_at_run_time_carries_its_config_item_and_moves_nobody() -> None:
    live, roster, sent = layout()
    worker(0, sent, roster), worker(1, sent, roster)
    live.add(cam("cam0")), live.add(cam("cam1"))
    live.add(cam("cam2", {"id": "cam2", "uri": "rtsp://host/2"}))
    _, header = sent.messages[-1]
    assert header == {"type": msg.SHARE, "add": "cam2", "item": {"id": "cam2", "uri": "rtsp://host/2"}}
    assert live.moves == 0


def test_a_restarted_worker_gets_back_the_running_sources_of_its_share() -> None:
    live, roster, sent = layout()
    worker(0, sent, roster), worker(1, sent, roster)
    for name in ("cam0", "cam1", "cam2"):
        live.add(cam(name))
    again = worker(0, sent, roster)  # same index: it replaces the dead one in the roster
    sent.messages.clear()
    live.on_ready(again, running=lambda sid: sid != "cam2")  # cam2 has ended meanwhile
    assert sent.shares() == [("0", "add", "cam0")]


def test_a_source_that_goes_leaving_the_shares_uneven_moves_one_after_it_is_released() -> None:
    live, roster, sent = layout()
    worker(0, sent, roster), worker(1, sent, roster)
    for name in ("cam0", "cam1", "cam2", "cam3"):
        live.add(cam(name))
    assert live.shares == (("cam0", "cam2"), ("cam1", "cam3"))
    live.remove("cam1")
    assert live.shares == (("cam0", "cam2"), ("cam3",))  # even enough: nobody moves
    sent.messages.clear()
    live.remove("cam3")
    assert live.shares == (("cam0",), ("cam2",)) and live.moves == 1
    assert sent.shares() == [("0", "drop", "cam2")]
    assert live.peer_of("cam2") is None  # nothing goes to it while it moves
    live.released("cam2", running=lambda sid: True)
    assert sent.shares()[-1] == ("1", "add", "cam2") and live.peer_of("cam2") is roster.of("infer")[1]


def test_a_worker_that_dies_while_letting_go_of_a_source_does_not_strand_it() -> None:
    live, roster, sent = layout()
    worker(0, sent, roster), worker(1, sent, roster)
    for name in ("cam0", "cam1", "cam2"):
        live.add(cam(name))
    live.remove("cam1")  # cam2 moves from worker 0 to worker 1
    assert live.letting_go(0) == ["cam2"]
    live.released("cam2", running=lambda sid: True)  # what the hub does when worker 0 dies first
    assert live.letting_go(0) == [] and sent.shares()[-1] == ("1", "add", "cam2")


def test_only_live_sources_are_taken() -> None:
    assert LiveLayout.takes(cam("cam"))
    assert not LiveLayout.takes(SourcePlan("file", int, SourceOptions(policy=Policy.BLOCK)))
