"""The hub on its own (pipeline.hub.core): a real ROUTER, the test's DEALERs as its workers, no
process started (a fake `start`), and a recording observer instead of the metrics."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from framewire.pipeline.hub.core import Hub
from framewire.pipeline.plan import Plan, Policy, Report, SourceOptions, SourcePlan
from framewire.pipeline.wire import messages as msg
from framewire.pipeline.stagespec import StageSpec

pytestmark = pytest.mark.timeout(30)


class Process:
    """What the hub's lifecycle sees of a worker it started: alive until the test says."""

    pid = 4242
    exitcode: int | None = None

    def is_alive(self) -> bool:
        return True

    def join(self, timeout: float | None = None) -> None:
        return None

    def kill(self) -> None:
        return None


class Recorder:
    """A HubObserver that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        if not name.startswith("on_"):
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, *args))

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [call[1:] for call in self.calls if call[0] == name]


def unused() -> Any:
    raise AssertionError("no process runs in these tests")


@pytest.fixture()
def hub(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Hub, Recorder, dict[str, zmq.Socket]]]:
    options = getattr(request, "param", SourceOptions())  # the source's, where a test says (indirect)
    model = StageSpec("infer", 1, unused, sheds=True, skips_stale=True)
    plan = Plan(stages=(model, StageSpec("out", 1, unused, writes_output=True)),
                sources=(SourcePlan("cam", functools.partial(unused), options),),
                slot_layout=lambda source, info: {"image": ((4, 4, 3), "uint8")})  # fmt: skip
    observer = Recorder()
    hub = Hub(plan, f"ipc://{tmp_path}/hub.sock", observer, Report(), start=lambda target, spec: Process(),
              stopping=lambda: False)  # fmt: skip
    hub.lifecycle.start_stage("infer", 0, unused)
    hub.lifecycle.start_stage("out", 0, unused, label="output[0]")
    hub.inputs.add(plan.sources[0])
    ctx = zmq.Context()
    workers = {}
    for name in ("infer.0.0", "out.0.0", "decode.0.0"):
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, name.encode())
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(hub.endpoint)
        workers[name.split(".")[0]] = sock
    try:
        yield hub, observer, workers
    finally:
        for sock in workers.values():
            sock.close(linger=0)
        ctx.term()
        hub.close()


def send(sock: zmq.Socket, header: Mapping[str, Any]) -> None:
    sock.send_multipart(msg.encode(header))


def until(hub: Hub, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, "the hub did not get there"
        hub.turn()


def received(sock: zmq.Socket, kind: str, hub: Hub) -> dict[str, Any]:
    """The next message of `kind` to this worker (turning the hub meanwhile)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        hub.turn()
        while sock.poll(0):
            header, _ = msg.decode(sock.recv_multipart())
            if header["type"] == kind:
                return header
    raise AssertionError(f"no {kind}")


def test_a_frame_goes_through_and_the_observer_hears_each_step(hub: Any) -> None:
    hub, observer, w = hub
    send(w["infer"], {"type": msg.READY, "stage": "infer", "index": 0, "credits": 2, "provider": "cpu"})
    send(w["out"], {"type": msg.READY, "stage": "out", "index": 0, "credits": 4})
    send(w["decode"], {"type": msg.STREAM, "source": "cam", "info": {"width": 4, "height": 4}})
    assert received(w["decode"], msg.GRANT, hub)["slots"] == list(range(16))
    start = time.time() - 0.5
    send(w["decode"], {"type": msg.FRAME, "source": "cam", "seq": 0, "slot": 3, "pts": 0,
                       "ts": {"decode": [start, start + 0.01]}, "meta": {"k": 1}})  # fmt: skip
    work = received(w["infer"], msg.WORK, hub)
    assert (work["source"], work["seq"], work["slot"], work["meta"]) == ("cam", 0, 3, {"k": 1})
    # A stage that rewrites the slot in its header does not move the frame: the slot is the hub's.
    send(w["infer"], {**work, "type": msg.RESULT, "stage": "infer", "slot": 9,
                      "ts": {**work["ts"], "infer": [start + 0.1, start + 0.35]}})  # fmt: skip
    out = received(w["out"], msg.WORK, hub)
    send(w["out"], {**out, "type": msg.RESULT, "stage": "out"})
    # The source still holds 15 of its 16 slots: the freed one waits to go back with others.
    until(hub, lambda: hub.inputs.sources["cam"].held == [3])
    assert observer.of("on_provider") == [("infer", 0, "cpu")]
    [(source, stage, seconds)] = observer.of("on_stage_done")
    assert (source, stage) == ("cam", "infer") and seconds == pytest.approx(0.25)
    [(source, latency)] = observer.of("on_done")
    assert source == "cam" and 0.5 <= latency < 10
    assert hub.inputs.sources["cam"].done_frames == 1


def open_stream(hub: Hub, w: dict[str, zmq.Socket], infer_credits: int = 2) -> None:
    """Both workers READY, the source's STREAM, and its first GRANT: all 16 slots."""
    send(w["infer"], {"type": msg.READY, "stage": "infer", "index": 0, "credits": infer_credits})
    send(w["out"], {"type": msg.READY, "stage": "out", "index": 0, "credits": 4})
    send(w["decode"], {"type": msg.STREAM, "source": "cam", "info": {"width": 4, "height": 4}})
    assert received(w["decode"], msg.GRANT, hub)["slots"] == list(range(16))


def test_freed_slots_go_back_together_once_the_source_holds_fewer_than_half(hub: Any) -> None:
    hub, _, w = hub
    open_stream(hub, w)
    for seq in range(9):  # one frame at a time, each through to the end before the next
        now = time.time()
        send(w["decode"], {"type": msg.FRAME, "source": "cam", "seq": seq, "slot": seq, "pts": seq,
                           "ts": {"decode": [now, now]}})  # fmt: skip
        work = received(w["infer"], msg.WORK, hub)
        send(w["infer"], {**work, "type": msg.RESULT, "stage": "infer"})
        out = received(w["out"], msg.WORK, hub)
        send(w["out"], {**out, "type": msg.RESULT, "stage": "out"})
        until(hub, lambda seq=seq: hub.inputs.sources["cam"].done_frames == seq + 1)
    # Slots 0-7 came back while the source still held 8 or more; the 9th frame left it 7: all
    # nine go back in one GRANT (the first since the 16), and the source holds 16 again.
    assert received(w["decode"], msg.GRANT, hub)["slots"] == list(range(9))
    record = hub.inputs.sources["cam"]
    assert (record.spare, record.held) == (16, [])


@pytest.mark.parametrize("hub", [SourceOptions(policy=Policy.DROP_OLDEST, max_waiting=1)], indirect=True)
def test_a_live_sources_frames_beyond_max_waiting_are_dropped_and_their_slots_go_back(hub: Any) -> None:
    hub, _, w = hub
    open_stream(hub, w, infer_credits=1)
    now = time.time()
    for seq in range(4):  # the worker takes one; of the three behind it, the newest waits
        send(w["decode"], {"type": msg.FRAME, "source": "cam", "seq": seq, "slot": seq, "pts": seq,
                           "ts": {"decode": [now, now]}})  # fmt: skip
    first = received(w["infer"], msg.WORK, hub)
    record = hub.inputs.sources["cam"]
    until(hub, lambda: record.overflow == 2)
    assert first["seq"] == 0 and sorted(record.held) == [1, 2]  # their slots, freed at once
    send(w["infer"], {**first, "type": msg.RESULT, "stage": "infer"})
    assert received(w["infer"], msg.WORK, hub)["seq"] == 3
    assert [received(w["out"], msg.WORK, hub)["seq"]] == [0]


def test_a_frame_the_hub_cannot_read_is_dropped_and_counted(hub: Any) -> None:
    hub, observer, w = hub
    send(w["decode"], {"type": msg.FRAME, "source": "cam", "seq": 0})  # no slot
    w["decode"].send_multipart([msgpack.packb({"v": msg.WIRE_VERSION, "type": msg.FRAME, "seq": "0"})])
    until(hub, lambda: len(observer.of("on_bad_message")) == 2)
    assert observer.of("on_bad_message") == [("other",), ("other",)]
    assert not hub.router.frames


def test_an_outputs_counters_reach_the_observer_and_the_report_and_bad_ones_are_dropped(hub: Any) -> None:
    hub, observer, w = hub
    send(w["out"], {"type": msg.READY, "stage": "out", "index": 0, "credits": 4})
    send(w["out"], {"type": msg.STATS, "counters": {"out": {"sent": 3, "dropped": 1}}})
    send(w["out"], {"type": msg.STATS, "counters": {"out": {"sent": 5, "dropped": 1}}})
    send(w["out"], {"type": msg.STATS, "counters": {"elsewhere": {"sent": 1}}})  # not an output of this job
    send(w["out"], {"type": msg.STATS, "counters": {"out": {"sent": -1}}})
    until(hub, lambda: len(observer.of("on_bad_message")) == 2)
    assert observer.of("on_output_counts") == [("out", {"sent": 3, "dropped": 1}), ("out", {"sent": 5, "dropped": 1})]
    report = Report()
    hub.fold_into(report)
    assert report.outputs == {"out": {"sent": 5, "dropped": 1}}
    # A middle stage's STATS are not an output's totals: not taken.
    send(w["infer"], {"type": msg.READY, "stage": "infer", "index": 0, "credits": 2})
    send(w["infer"], {"type": msg.STATS, "counters": {"out": {"sent": 99}}})
    w["infer"].send(b"not msgpack")  # after it on the same link: once this is counted, the STATS was read
    until(hub, lambda: len(observer.of("on_bad_message")) == 3)
    assert hub.events.counts == {"out": {"sent": 5, "dropped": 1}}


def test_a_live_source_going_offline_and_back_is_announced_to_the_outputs(hub: Any) -> None:
    hub, observer, w = hub
    send(w["out"], {"type": msg.READY, "stage": "out", "index": 0, "credits": 4})
    send(w["decode"], {"type": msg.STATS, "source": "cam", "online": False})  # connecting: not announced
    send(w["decode"], {"type": msg.STREAM, "source": "cam", "info": {"width": 4, "height": 4}})
    assert received(w["out"], msg.STREAM, hub)["source"] == "cam"
    send(w["decode"], {"type": msg.STATS, "source": "cam", "online": True})  # its first state: not a change
    send(w["decode"], {"type": msg.STATS, "source": "cam", "online": False})
    event = received(w["out"], msg.EVENT, hub)["event"]
    assert (event["event"], event["source"], event["state"]) == ("source", "cam", "offline")
    send(w["decode"], {"type": msg.STATS, "source": "cam", "online": True, "reconnects": 1})
    event = received(w["out"], msg.EVENT, hub)["event"]
    assert (event["event"], event["state"]) == ("source", "online") and event["wall"] > 0
