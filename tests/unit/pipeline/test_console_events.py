"""The console on the real server (uvicorn): its figures as server-sent events, and viewers that go
away mid-request (a closed tab) leaving nothing above DEBUG in the log: no ERROR, no traceback."""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from framewire.media.jpeg import encode_jpeg
from framewire.pipeline.ops.console import Console
from framewire.pipeline.ops.control import ControlServer
from framewire.pipeline.ops.live import LiveStats
from framewire.pipeline.ops.metrics import Metrics
from framewire.pipeline.ops.preview import Previews
from framewire.pipeline.wire.framepool import FramePool, PoolLayout
from tests.unit.pipeline.test_console import _Inputs

pytestmark = pytest.mark.timeout(60)

TOKEN = "t0k"
RESET = b"\x01\x00\x00\x00\x00\x00\x00\x00"
"""SO_LINGER on, 0 s: the close resets the connection, as a killed tab's may."""


@pytest.fixture
def pool() -> Iterator[FramePool]:
    layout = PoolLayout.plan(f"framewire-test-events-{os.getpid()}", 1, {"image": ((48, 64, 3), "uint8")})
    made = FramePool.create(layout)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def served(pool: FramePool) -> Iterator[tuple[ControlServer, LiveStats, Previews]]:
    live, previews = LiveStats(), Previews(encode_jpeg, fps=50.0)
    live.tick(_Inputs(cam="running"), force=True)  # type: ignore[arg-type]
    console = Console(live, previews)
    server = ControlServer("127.0.0.1", 0, TOKEN, Metrics(), lambda: {"live": True}, console=console)
    server.start()
    running = threading.Event()
    running.set()

    def frames() -> None:  # the hub's side: a finished frame every 20 ms
        while running.is_set():
            previews.frame_done("cam", pool, 0, {"image"})
            time.sleep(0.02)

    feeder = threading.Thread(target=frames, daemon=True)
    feeder.start()
    try:
        yield server, live, previews
    finally:
        running.clear()
        feeder.join(5)
        server.stop()
        previews.close()


def _events(response: http.client.HTTPResponse, count: int) -> list[tuple[str, dict[str, Any]]]:
    """The next `count` events of a text/event-stream answer: (event name, its JSON data)."""
    found: list[tuple[str, dict[str, Any]]] = []
    name, data = "", ""
    while len(found) < count:
        line = response.readline().decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            data += line[len("data: "):]
        elif line == "" and data:
            found.append((name, json.loads(data)))
            name, data = "", ""
    return found


def test_the_figures_come_as_server_sent_events_each_with_only_new_chart_points(served: Any) -> None:
    server, live, _ = served
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", "/console/events")
    refused = conn.getresponse()
    assert (refused.status, json.loads(refused.read())) == (401, {"error": "missing or wrong bearer token"})
    conn.request("GET", "/console/events?since=0", headers={"Authorization": f"Bearer {TOKEN}"})
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Content-Type", "").startswith("text/event-stream")
    [(name, first)] = _events(response, 1)
    assert name == "stats" and [s["id"] for s in first["sources"]] == ["cam"] and first["previews"] is True
    assert len(first["history"]["cam"]) == 1
    time.sleep(1.05)  # a new chart point is due
    live.tick(_Inputs(cam="ended"), force=True)  # type: ignore[arg-type]
    [(_, second)] = _events(response, 1)
    assert second["sources"][0]["state"] == "ended" and second["history"]["cam"] == []  # ended: no new point
    conn.close()


def test_viewers_that_go_away_leave_no_error_in_the_log(
    served: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server, _, previews = served
    caplog.set_level(logging.DEBUG)
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    for target in (b"/console/preview/cam?after=0", b"/console/preview/cam?after=999999", b"/console/events"):
        # Closed at once, closed while the answer waits (a frame never comes for after=999999), and
        # closed in the middle of an event stream.
        for wait_s in (0.0, 0.3):
            with socket.create_connection(server.address, timeout=5) as sock:
                sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n")
                time.sleep(wait_s)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
    with socket.create_connection(server.address, timeout=5) as sock:  # a JPEG read halfway
        sock.sendall(b"GET /console/preview/cam?after=0 HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.1 200 ")
    time.sleep(previews.lease_s / 2 + 2.5)  # every waiting answer is due by now
    conn = http.client.HTTPConnection(*server.address, timeout=10)  # and the server still answers
    conn.request("GET", "/livez")
    assert conn.getresponse().status == 200
    ours = ("framewire", "uvicorn", "asyncio")
    loud = [r for r in caplog.records if r.levelno > logging.DEBUG and r.name.startswith(ours)
            and "watched" not in r.getMessage()]  # fmt: skip
    assert loud == [] and not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in loud]


def test_long_polls_hold_no_thread_of_the_pool(served: Any) -> None:
    """More waiting previews than Starlette's pool has threads (40): a request that needs one of them
    (/metrics renders on the pool) is still answered while every long poll is waiting."""
    server, _, _ = served
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    polls = [socket.create_connection(server.address, timeout=5) for _ in range(60)]
    try:
        for sock in polls:  # a frame this new never comes: each waits its 2 s
            sock.sendall(b"GET /console/preview/cam?after=999999 HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n")
        time.sleep(0.3)  # all of them are in (nothing to wait on that a test could see)
        conn = http.client.HTTPConnection(*server.address, timeout=10)
        conn.request("GET", "/metrics")
        assert conn.getresponse().status == 200
        for sock in polls:
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):  # still waiting: the answer above did not queue behind
                sock.recv(1)
        polls[0].settimeout(10)
        polls[0].setblocking(True)
        assert polls[0].recv(64).startswith(b"HTTP/1.1 204 ")  # then each gets its 204
    finally:
        for sock in polls:
            sock.close()
