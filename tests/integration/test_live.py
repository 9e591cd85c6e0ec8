"""Live sources through the supervisor, with real processes: an RTSP server that goes away and comes
back while a file source keeps going, a ZeroMQ source fed good and bad messages, and the drop
policies and the staleness budget with a stage slower than the source."""

from __future__ import annotations

import functools
import json
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import zmq

from framewire.app.compose.sources import source_plan
from framewire.config import SourceConfig
from framewire.pipeline.stagespec import StageSpec
from framewire.pipeline.plan import Plan, Report, SourceOptions, SourcePlan
from framewire.pipeline.run.supervisor import Supervisor
from tests.support import fakes, live_fakes
from tests.support.clips import make_clip
from tests.support.live_fakes import records
from tests.support.rtsp_server import free_port, spawn

pytestmark = pytest.mark.timeout(90)

GAP_S = float(os.environ.get("FRAMEWIRE_TEST_RTSP_GAP_S", "10"))
"""How long the RTSP server stays dead: the issue's acceptance test says 10 s
(FRAMEWIRE_TEST_RTSP_GAP_S=5 halves the wait when iterating)."""


def live_plan(out: Path, sources: list[SourcePlan], *, middle: Any = None, **overrides: Any) -> Plan:
    middle = middle or (
        StageSpec("preprocess", 1, functools.partial(fakes.passthrough, "pre"), skips_stale=True),
        StageSpec("infer", 1, functools.partial(fakes.passthrough, "inf"), sheds=True, skips_stale=True),
        StageSpec("postprocess", 1, functools.partial(fakes.passthrough, "post")),
    )
    sink = StageSpec("out", 1, functools.partial(live_fakes.timed_sink, str(out)), writes_output=True)
    return Plan(
        stages=(*middle, sink),
        sources=tuple(sources),
        slot_layout=fakes.layout,
        **overrides,
    )


def wait_for(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout_s} s")
        time.sleep(0.05)


def run_with(plan: Plan, side: Callable[[Supervisor], None]) -> Report:
    """Run the job in this thread while `side(supervisor)` runs in another (it ends by stopping it)."""
    supervisor = Supervisor(plan)
    failure: list[BaseException] = []

    def target() -> None:
        try:
            side(supervisor)
        except BaseException as exc:  # reported after the job, which is stopped either way
            failure.append(exc)
            supervisor.request_stop()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    report = supervisor.run()
    thread.join(10)
    if failure:
        raise failure[0]
    return report


def test_rtsp_source_reconnects_while_a_file_source_keeps_going(tmp_path: Path) -> None:
    out = tmp_path / "out"
    port = free_port()
    servers = [spawn(port)]
    clip = make_clip(tmp_path / "file.mp4", width=64, height=48, frames=25 * 40)
    cam = SourceConfig(
        id="cam",
        uri=f"rtsp://user:secret@127.0.0.1:{port}/live",
        timeout_s=2,
        reconnect={"initial_s": 0.2, "max_s": 1.0},
        max_waiting=16,  # as many as its slots: no frame of it is dropped in the hub, its seqs run on
    )
    other = SourceConfig(id="file", uri=str(clip), realtime=True)
    events: dict[str, float] = {}

    def outage(supervisor: Supervisor) -> None:
        try:
            wait_for(lambda: len(records(out, "cam")) >= 25, 30)
            servers[0].kill()
            servers[0].wait()
            events["killed"] = time.time()
            time.sleep(GAP_S)
            servers.append(spawn(port))
            events["restarted"] = time.time()
            before = len(records(out, "cam"))
            wait_for(lambda: len(records(out, "cam")) >= before + 25, 30)
        finally:
            supervisor.request_stop()

    try:
        report = run_with(live_plan(out, [source_plan(cam), source_plan(other)]), outage)
    finally:
        for server in servers:
            server.kill()
            server.wait()
    assert report.exit_code == 0, report.error
    assert report.reconnects["cam"] >= 1
    # The source noticed at once (the TCP connection closed) and came back once the server listened.
    assert GAP_S * 0.8 <= report.offline_s["cam"] <= GAP_S + 5
    cam = records(out, "cam")
    assert [r["seq"] for r in cam] == list(range(len(cam)))  # seq went on counting across the gap
    pts = [r["pts"] for r in cam]
    assert all(b > a for a, b in zip(pts, pts[1:]))
    assert max(b - a for a, b in zip(pts, pts[1:])) >= GAP_S * 0.8 * 90000  # the gap, on the timeline
    assert any(r["at"] < events["killed"] for r in cam) and any(r["at"] > events["restarted"] for r in cam)
    # The other source never stopped: its frames kept arriving while the camera was gone.
    file_times = [r["at"] for r in records(out, "file")]
    during = [t for t in file_times if events["killed"] + 0.5 < t < events["restarted"]]
    assert len(during) >= (GAP_S - 0.5) * 25 * 0.6
    assert (out / "cam.closed").exists() and (out / "file.closed").exists()


def test_rtsp_error_is_redacted_and_other_sources_finish(tmp_path: Path) -> None:
    # The log lines are checked in tests/unit/stages/test_live.py (a forked worker's stderr is not
    # the test's to capture).
    out = tmp_path / "out"
    port = free_port()  # nobody listens there
    bad = SourceConfig(
        id="cam",
        uri=f"rtsp://admin:hunter2@127.0.0.1:{port}/live",
        reconnect={"initial_s": 0.1, "max_s": 0.1, "max_attempts": 3},
    )
    good = SourcePlan("file", functools.partial(fakes.source, "file", 20))
    report = Supervisor(live_plan(out, [source_plan(bad), good])).run()
    assert report.exit_code == 1
    error = report.source_errors["cam"]
    assert error.startswith("source cam: cannot open rtsp://***@127.0.0.1:") and "gave up after 3" in error
    assert len(records(out, "file")) == 20
    assert "hunter2" not in error + (report.error or "")


FRAME_W, FRAME_H = 64, 48


def _good(index: int, fmt: str) -> list[bytes]:
    image = np.full((FRAME_H, FRAME_W, 3), index * 5 % 251, dtype=np.uint8)
    header: dict[str, Any] = {"width": FRAME_W, "height": FRAME_H, "format": fmt, "pts": 1000 + index * 40_000}
    if fmt == "bgr24":
        return [json.dumps(header).encode(), image.tobytes()]
    ok, jpeg = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    return [json.dumps(header).encode(), jpeg.tobytes()]


def _bad_messages(rng: random.Random) -> list[tuple[str | None, list[bytes]]]:
    """(expected reason or None for any, message) for every kind of bad input, plus random noise."""
    head = lambda **kw: json.dumps({"width": FRAME_W, "height": FRAME_H, "format": "bgr24", **kw}).encode()  # noqa: E731
    pixels = bytes(FRAME_W * FRAME_H * 3)
    _, small_jpeg = cv2.imencode(".jpg", np.zeros((32, 32, 3), np.uint8))
    bad: list[tuple[str | None, list[bytes]]] = [
        ("header", [b"\x93\x00garbage"]),
        ("header", [b"not json", pixels]),
        ("header", [b"[1, 2, 3]", pixels]),
        ("header", [b"{" + b" " * 5000 + b"}", pixels]),
        ("parts", [head(), pixels, pixels]),
        ("parts", [head()]),
        ("size", [head(width=10**6, height=10**6), pixels]),
        ("size", [head(width=True), pixels]),
        ("size", [head(width=-4), pixels]),
        ("size", [head(), pixels[:-1]]),
        ("size", [head(format="jpeg"), small_jpeg.tobytes()]),
        ("size", [head(width=32, height=32), bytes(32 * 32 * 3)]),  # valid alone, not in a 64x48 stream
        ("format", [head(format="rgb48"), pixels]),
        ("pts", [head(pts=-5), pixels]),
        ("pts", [head(pts="soon"), pixels]),
        ("payload", [head(format="jpeg"), b"\xff\xd8" + rng.randbytes(500)]),
        ("payload", [head(format="jpeg"), b"GIF89a"]),
    ]
    for _ in range(40):
        parts = [rng.randbytes(rng.randint(0, 300)) for _ in range(rng.randint(1, 3))]
        bad.append((None, parts))
    return bad


def test_zmq_source_takes_good_frames_and_drops_bad_ones(tmp_path: Path) -> None:
    out = tmp_path / "out"
    endpoint = f"ipc://{tmp_path}/frames.sock"
    source = SourceConfig(id="z", uri=f"zmq+{endpoint}", policy="block")
    rng = random.Random(5)
    bad = _bad_messages(rng)
    good = [_good(i, "bgr24" if i < 20 else "jpeg") for i in range(30)]

    def produce(supervisor: Supervisor) -> None:
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.connect(endpoint)
        try:
            queue = list(bad)
            push.send_multipart(good[0])  # the first frame fixes the stream's size
            for message in good[1:]:
                for _ in range(2):
                    if queue:
                        push.send_multipart(queue.pop(0)[1])
                push.send_multipart(message)
            for _, message in queue:
                push.send_multipart(message)
            push.send_multipart([b'{"eos": true}'])
            # A producer keeps its socket open until its frames are read: closed with messages still
            # queued towards a throttled reader, ZeroMQ stops delivering them.
            wait_for((out / "z.closed").exists, 60)
        finally:
            push.close(linger=0)
            ctx.term()

    report = run_with(live_plan(out, [source_plan(source)]), produce)
    assert report.exit_code == 0, report.error
    recs = records(out, "z")
    assert [r["seq"] for r in recs] == list(range(30))
    expected = [i * 5 % 251 for i in range(30)]
    assert [r["pixel"] for r in recs[:20]] == expected[:20]
    assert all(abs(r["pixel"] - e) <= 3 for r, e in zip(recs[20:], expected[20:]))  # JPEG is lossy
    assert [r["pts"] for r in recs] == [1000 + i * 40_000 for i in range(30)]
    rejected = report.rejected["z"]
    assert sum(rejected.values()) == len(bad)
    for reason in {r for r, _ in bad if r is not None}:
        assert rejected.get(reason, 0) >= sum(1 for r, _ in bad if r == reason), (reason, rejected)
    assert (out / "z.closed").exists()


N_FRAMES = 100


def _policy_plan(out: Path, options: dict[str, Any], *, infer_s: float, slots: int) -> Plan:
    source = SourcePlan("live", functools.partial(fakes.source, "live", N_FRAMES, delay_s=0.01), SourceOptions(**options))
    middle = (
        StageSpec("preprocess", 1, functools.partial(fakes.passthrough, "pre"), skips_stale=True),
        StageSpec("infer", 1, functools.partial(live_fakes.slow, "inf", infer_s),
                  sheds=True, skips_stale=True),
        StageSpec("postprocess", 1, functools.partial(fakes.passthrough, "post")),
    )
    return live_plan(out, [source], middle=middle, slots_per_source=slots)


def _latencies(recs: list[dict[str, Any]]) -> list[float]:
    return sorted(r["at"] - r["ts"]["decode"][0] for r in recs)


@pytest.mark.parametrize("policy", ["drop_oldest", "drop_newest"])
def test_drop_policy_keeps_latency_bounded_and_counts_drops(tmp_path: Path, policy: str) -> None:
    # The source makes 100 frames a second, inference takes 40 ms: most frames must go.
    report = Supervisor(_policy_plan(tmp_path, {"policy": policy}, infer_s=0.04, slots=4)).run()
    assert report.exit_code == 0, report.error
    recs = records(tmp_path, "live")
    assert report.dropped["live"] > N_FRAMES // 3
    assert len(recs) + report.dropped["live"] == N_FRAMES  # every frame read is output or counted
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    pixels = [r["pixel"] for r in recs]
    assert all(b > a for a, b in zip(pixels, pixels[1:]))  # later frames only, in order
    latency = _latencies(recs)
    assert latency[int(0.99 * (len(latency) - 1))] < 0.6  # four slots of 40 ms, and some slack


def test_max_waiting_keeps_a_live_sources_queue_short_with_slots_to_spare(tmp_path: Path) -> None:
    # Sixteen slots would let 16 frames of 40 ms queue (640 ms); one may wait, the rest is dropped.
    options = {"policy": "drop_oldest", "max_waiting": 1}
    report = Supervisor(_policy_plan(tmp_path, options, infer_s=0.04, slots=16)).run()
    assert report.exit_code == 0, report.error
    recs = records(tmp_path, "live")
    assert report.dropped["live"] > N_FRAMES // 3 and report.stale["live"] == 0
    assert report.overflow["live"] > 0  # dropped in the hub, not only by the decoder short of slots
    assert len(recs) + report.dropped["live"] == N_FRAMES  # every frame read is output or counted
    seqs = [r["seq"] for r in recs]
    assert seqs == sorted(set(seqs)) and len(seqs) < max(seqs) + 1  # dropped in the hub: gaps in seq
    pixels = [r["pixel"] for r in recs]
    assert all(b > a for a, b in zip(pixels, pixels[1:]))  # later frames only, in order
    latency = _latencies(recs)
    # At most one waits, two are at inference and two just past preprocess: 5 x 40 ms, and slack.
    assert latency[len(latency) // 2] < 0.3 and latency[int(0.99 * (len(latency) - 1))] < 0.5


def test_block_policy_drops_nothing(tmp_path: Path) -> None:
    options = {"policy": "block", "max_staleness_ms": 1}  # a staleness budget means nothing to block
    report = Supervisor(_policy_plan(tmp_path, options, infer_s=0.02, slots=4)).run()
    assert report.exit_code == 0, report.error
    assert report.dropped["live"] == 0 and report.stale["live"] == 0
    recs = records(tmp_path, "live")
    assert [r["seq"] for r in recs] == list(range(N_FRAMES))
    assert [r["pixel"] for r in recs] == list(range(N_FRAMES))


def test_stale_frames_are_dropped_before_inference(tmp_path: Path) -> None:
    # Twelve slots of 40 ms is half a second of queue; the budget is 100 ms.
    options = {"policy": "drop_oldest", "max_staleness_ms": 100}
    report = Supervisor(_policy_plan(tmp_path, options, infer_s=0.04, slots=12)).run()
    assert report.exit_code == 0, report.error
    recs = records(tmp_path, "live")
    assert report.stale["live"] > 0
    assert len(recs) + report.dropped["live"] == N_FRAMES  # dropped counts policy and stale drops
    seqs = [r["seq"] for r in recs]
    assert seqs == sorted(set(seqs))  # in order; the stale ones are missing, not passed on
    assert len(seqs) + report.stale["live"] >= max(seqs) + 1  # every seq sent is output or stale
    for r in recs:
        assert r["error"] is None
        assert r["ts"]["infer"][0] - r["ts"]["decode"][0] <= 0.1 + 0.02
    assert (tmp_path / "live.closed").exists()


@pytest.mark.parametrize(("budget_ms", "all_over"), [(1.0, True), (60_000.0, False)])
def test_frames_over_the_latency_budget_are_counted(tmp_path: Path, budget_ms: float, all_over: bool) -> None:
    # Inference alone takes 40 ms: a 1 ms budget is missed by every frame, a minute by none.
    options = {"policy": "drop_oldest", "max_staleness_ms": 0.5 * budget_ms, "latency_budget_ms": budget_ms}
    report = Supervisor(_policy_plan(tmp_path, options, infer_s=0.04, slots=4)).run()
    assert report.exit_code == 0, report.error
    recs = records(tmp_path, "live")
    assert report.over_budget["live"] == (len(recs) if all_over else 0)
    if all_over:  # a budget of 1 ms with 0.5 ms of staleness: whatever reached inference is over
        assert len(recs) + report.dropped["live"] == N_FRAMES


def test_a_stop_reaches_a_live_source_still_trying_to_connect(tmp_path: Path) -> None:
    out = tmp_path / "out"
    waiting = SourceConfig(
        id="cam", uri=f"rtsp://127.0.0.1:{free_port()}/live", reconnect={"initial_s": 0.2, "max_s": 0.5}
    )
    done = SourcePlan("file", functools.partial(fakes.source, "file", 10))

    def stop_soon(supervisor: Supervisor) -> None:
        wait_for(lambda: (out / "file.closed").exists(), 30)
        time.sleep(0.5)
        supervisor.request_stop()

    started = time.monotonic()
    report = run_with(live_plan(out, [source_plan(waiting), done]), stop_soon)
    assert report.exit_code == 0, report.error
    assert report.stopped and "cam" not in report.source_errors
    assert report.frames == {"cam": 0, "file": 10}
    assert time.monotonic() - started < 20
