"""The web console's parts on their own: the rates over the last seconds (ops.live), the previews
encoded only while watched (ops.preview, on a real shared-memory pool with the real JPEG encoder),
and its paths on the real HTTP server (ops.console through ops.control)."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import pytest

from framewire.media.jpeg import encode_jpeg
from framewire.pipeline.ops.console import Console
from framewire.pipeline.ops.control import ControlServer
from framewire.pipeline.ops.live import WINDOW_S, LiveStats
from framewire.pipeline.ops.metrics import Metrics
from framewire.pipeline.ops.preview import Previews
from framewire.pipeline.wire.framepool import FramePool, PoolLayout

pytestmark = pytest.mark.timeout(60)


@dataclass
class _Record:
    source_id: str


class _Inputs:
    """What LiveStats reads of the hub's Inputs: the sources and how `GET /sources` describes them."""

    def __init__(self, **states: str) -> None:
        self.states = states

    def every(self) -> list[_Record]:
        return [_Record(sid) for sid in self.states]

    def describe(self, record: _Record) -> dict[str, Any]:
        return {"id": record.source_id, "state": self.states[record.source_id], "frames": 0}


def _snapshot(live: LiveStats, inputs: _Inputs, now: float) -> dict[str, dict[str, Any]]:
    live.tick(inputs, now=now, force=True)  # type: ignore[arg-type]
    return {s["id"]: s for s in live.snapshot.sources}


def test_rates_are_over_the_last_seconds_not_since_the_start() -> None:
    live, inputs = LiveStats(), _Inputs(cam="running", slow="running")
    for i in range(100):  # cam: 25 fps for 4 s, latency 10..109 ms
        live.done("cam", (10 + i) / 1000.0, now=i * 0.04)
    for i in range(8):  # slow: 2 fps
        live.done("slow", None, now=i * 0.5)
    shown = _snapshot(live, inputs, now=4.0)
    assert shown["cam"]["fps"] == pytest.approx(25.0, abs=0.01)
    assert (shown["cam"]["latency_p50_ms"], shown["cam"]["latency_p99_ms"]) == (59.0, 108.0)
    assert shown["slow"]["fps"] == pytest.approx(2.0, abs=0.01) and shown["slow"]["latency_p50_ms"] is None
    for i in range(10):  # cam stalls, then 10 frames in the last second
        live.done("cam", 0.02, now=10.0 + i * 0.1)
    shown = _snapshot(live, inputs, now=11.0)
    assert shown["cam"]["fps"] == pytest.approx(10 / WINDOW_S) and shown["cam"]["latency_p99_ms"] == 20.0
    assert shown["slow"]["fps"] == 0.0  # nothing for 7 s: not "8 frames in 11 s"
    history = live.snapshot.to_json()["history"]["cam"]
    assert [p[1] for p in history] == [25.0, 2.0]  # a chart point per publication at least a second apart
    inputs.states["cam"] = "ended"
    assert _snapshot(live, inputs, now=11.2)["cam"]["fps"] == 0.0
    live.forget("cam")
    del inputs.states["cam"]
    assert set(_snapshot(live, inputs, now=12.5)) == {"slow"} and "cam" not in live.snapshot.history


@pytest.fixture
def pool() -> Iterator[FramePool]:
    layout = PoolLayout.plan(f"framewire-test-console-{os.getpid()}", 2,
                             {"image": ((48, 64, 3), "uint8"), "output": ((48, 64, 3), "uint8")})  # fmt: skip
    made = FramePool.create(layout)
    try:
        yield made
    finally:
        made.close()


class _Counting:
    """The real encoder, counted."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, image: np.ndarray) -> bytes:
        self.calls += 1
        return encode_jpeg(image)


def test_nothing_is_encoded_without_a_viewer(pool: FramePool) -> None:
    encoder, metrics = _Counting(), Metrics()
    previews = Previews(encoder, fps=1000.0, metrics=metrics)
    for slot in range(200):
        previews.frame_done("cam", pool, slot % 2, {"image", "output"})
    assert (encoder.calls, previews.encoded, previews.watching()) == (0, 0, [])
    assert "framewire_preview_frames_total{" not in metrics.render()


def _deliver(previews: Previews, pool: FramePool, written: set[str], after: int) -> tuple[int, bytes]:
    """A viewer asks for the frame after number `after` while the hub finishes frames, as it does."""
    got: list[tuple[int, bytes] | None] = []
    viewer = threading.Thread(target=lambda: got.append(previews.wait_frame("cam", after=after, timeout=10)))
    viewer.start()
    while viewer.is_alive():
        previews.frame_done("cam", pool, 0, written)
        viewer.join(0.01)
    assert got and got[0] is not None
    return got[0]


def test_a_viewer_gets_the_composited_frame_and_the_encoding_stops_when_it_leaves(pool: FramePool) -> None:
    encoder, metrics = _Counting(), Metrics()
    previews = Previews(encoder, fps=1000.0, metrics=metrics, lease_s=1.0)
    pool.view(0, "image")[:] = 10
    pool.view(0, "output")[:] = 200  # what the composite drew
    number, jpeg = _deliver(previews, pool, {"image", "output"}, after=0)
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert number >= 1 and image.shape == (48, 64, 3) and abs(float(image.mean()) - 200.0) < 3
    assert f'framewire_preview_frames_total{{source="cam"}} {float(encoder.calls)}' in metrics.render()
    # Not composited (written lacks output): the decoded image is shown.
    number, jpeg = _deliver(previews, pool, {"image"}, after=encoder.calls)
    assert abs(float(cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR).mean()) - 10.0) < 3
    time.sleep(1.1)  # past the lease: the viewer has gone (the sleep is what is tested)
    assert previews.watching() == []
    calls = encoder.calls
    for _ in range(20):
        previews.frame_done("cam", pool, 0, {"image", "output"})
    assert encoder.calls == calls
    previews.close()


def test_previews_are_limited_to_their_rate_and_a_late_viewer_gets_no_stale_frame(pool: FramePool) -> None:
    encoder = _Counting()
    previews = Previews(encoder, fps=2.0, lease_s=0.2)
    previews.watch("cam")
    for _ in range(50):  # back to back: one frame per 0.5 s at most
        previews.frame_done("cam", pool, 1, {"image"})
    assert previews.wait_frame("cam", after=0, timeout=5) is not None
    assert encoder.calls == 1
    time.sleep(0.3)  # the lease lapses; a new viewer must not get the old frame
    assert previews.wait_frame("cam", after=0, timeout=0.2) is None
    previews.close()


@pytest.fixture
def server() -> Iterator[str]:
    live = LiveStats()
    live.tick(_Inputs(cam="running"), force=True)  # type: ignore[arg-type]
    control = ControlServer("127.0.0.1", 0, "t0k", Metrics(), lambda: {"live": True}, console=Console(live, None))
    control.start()
    try:
        yield control.url
    finally:
        control.stop()


def _get(url: str, token: str | None = None, method: str = "GET") -> tuple[int, str, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers, method=method), timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type", ""), err.read()


def test_the_page_is_open_and_its_data_needs_the_token(server: str) -> None:
    status, kind, page = _get(server + "/")
    assert (status, kind) == (200, "text/html; charset=utf-8") and b"/console/console.js" in page
    assert _get(server + "/console/console.js")[:2] == (200, "text/javascript; charset=utf-8")
    assert _get(server + "/favicon.ico")[:2] == (200, "image/svg+xml")
    assert _get(server + "/", method="HEAD")[0] == 200
    assert _get(server + "/console/stats") [::2] == (401, b'{"error": "missing or wrong bearer token"}')
    status, _, body = _get(server + "/console/stats", "t0k")
    data = json.loads(body)
    assert status == 200 and [s["id"] for s in data["sources"]] == ["cam"] and data["previews"] is False
    assert len(data["history"]["cam"]) == 1  # the chart's first point
    later = json.loads(_get(server + f"/console/stats?since={data['history']['cam'][0][0]}", "t0k")[2])
    assert later["history"] == {"cam": []} and later["sources"] == data["sources"]  # only newer points
    assert _get(server + "/console/stats?since=soon", "t0k")[::2] == (
        400, b'{"error": "since: not a time (seconds since the epoch)"}')  # fmt: skip
    assert json.loads(_get(server + "/console/preview/cam", "t0k")[2]) == {
        "error": "previews are off (http.console.enabled: false)"}  # fmt: skip
    assert _get(server + "/", method="POST")[0] == 405
    assert _get(server + "/console/nothing")[0] == 404


def test_the_console_off_answers_404() -> None:
    control = ControlServer("127.0.0.1", 0, None, Metrics(), lambda: {"live": True})
    control.start()
    try:
        status, _, body = _get(control.url + "/")
        assert (status, json.loads(body)) == (404, {"error": "the web console is off (http.console.enabled): /"})
    finally:
        control.stop()


def test_frames_that_queued_at_the_start_show_no_spike() -> None:
    live, inputs = LiveStats(), _Inputs(cam="running")
    for i in range(16):  # the pool's slots, filled while the workers warmed up, done within 0.15 s
        live.done("cam", 0.5, now=100.0 + i * 0.01)
    assert _snapshot(live, inputs, now=100.2)["cam"]["fps"] == 16.0  # over 1 s at least, not 80
