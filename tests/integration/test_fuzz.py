"""Garbage on the hub's socket: every bad message is dropped and counted, no frame is lost."""

from __future__ import annotations

import functools
import json
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from framewire.pipeline.plan import Plan, Report, SourcePlan
from framewire.pipeline.stagespec import StageSpec
from framewire.pipeline.run.supervisor import Supervisor
from tests.support import fakes

pytestmark = pytest.mark.timeout(120)


def garbage(rng: random.Random) -> list[bytes]:
    kind = rng.randrange(6)
    if kind == 0:
        return [rng.randbytes(rng.randrange(0, 200))]
    if kind == 1:
        return [msgpack.packb({"v": 1, "type": "result", "source": "a", "seq": rng.randrange(10**9)})]
    if kind == 2:  # a huge shape with no data behind it
        return [msgpack.packb({"v": 1, "type": "result", "source": "a", "seq": 1,
                               "tensors": [["x", "float32", [2**20, 2**20]]]}), b""]  # fmt: skip
    if kind == 3:  # sizes that do not add up
        return [msgpack.packb({"v": 1, "type": "frame", "tensors": [["x", "uint8", [10]]]}), b"\x00" * 3]
    if kind == 4:
        return [msgpack.packb({"v": 2, "type": "ready"})]
    return [json.dumps({"type": "stop"}).encode()]


def plan_of(tmp_path: Path, **extra: Any) -> Plan:
    """200 frames of one source through 2 infer workers to a JSONL sink."""
    return Plan(
        stages=(
            StageSpec(
                "infer", 2, functools.partial(fakes.passthrough, "inf", 0.002), sheds=True, skips_stale=True
            ),
            StageSpec("out", 1, functools.partial(fakes.sink, str(tmp_path)), writes_output=True),
        ),
        sources=(SourcePlan("a", functools.partial(fakes.source, "a", 200, delay_s=0.003)),),
        slot_layout=fakes.layout,
        **extra,
    )


def started(plan: Plan) -> tuple[Supervisor, Callable[[], Report]]:
    """The supervisor running in a thread, once it listens; and a call that waits for its report."""
    supervisor = Supervisor(plan)
    result: dict[str, Report] = {}
    thread = threading.Thread(target=lambda: result.setdefault("report", supervisor.run()), daemon=True)
    thread.start()
    while not hasattr(supervisor, "endpoint"):
        time.sleep(0.01)

    def report() -> Report:
        thread.join(60)
        return result["report"]

    return supervisor, report


def assert_every_frame_out(tmp_path: Path, report: Report, supervisor: Supervisor, bad: int) -> None:
    assert report.exit_code == 0, report.error
    assert report.frames == {"a": 200}
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    assert [json.loads(x)["seq"] for x in lines] == list(range(200))
    counted = supervisor.metrics.values("framewire_bad_messages_total")
    assert sum(counted.values()) == bad, counted


def test_fuzzed_messages_never_stop_the_job(tmp_path: Path) -> None:
    supervisor, report = started(plan_of(tmp_path))
    ctx = zmq.Context()
    rng = random.Random(7)
    sent = 0
    for identity in (b"rogue", b"infer.0.0"):  # a stranger, and one posing as a real worker
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, identity)
        sock.setsockopt(zmq.LINGER, 5000)  # every message is delivered before close returns
        sock.connect(supervisor.endpoint)
        if identity == b"rogue":
            for _ in range(300):
                sock.send_multipart(garbage(rng))
                sent += 1
        sock.close()
    ctx.term()
    assert_every_frame_out(tmp_path, report(), supervisor, sent)
