"""Live sources in one process (sources): FFmpeg options, building the right source, the
camera error, backoff, redaction, interruption, read timeouts and reconnects against the tests'
RTSP server, and the ZeroMQ source's decoding."""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import zmq

from framewire.config import CameraConfig, SourceConfig
from framewire.pipeline.errors import SourceError
from framewire.pipeline.frame import LiveFrameSource, SourceInterrupted
from framewire.sources import build_source
from framewire.sources.file import FileSource
from framewire.pipeline.backoff import Backoff
from framewire.sources.live import V4L2_MAJOR, LiveSource, camera_options, stream_options, v4l2_problem
from framewire.sources.zmq import ZmqSource
from tests.support.rtsp_server import free_port, spawn

pytestmark = pytest.mark.timeout(60)


def test_stream_options_per_protocol() -> None:
    assert stream_options("rtsp://h/s", timeout_s=2) == {"rtsp_transport": "tcp", "timeout": "2000000"}
    assert stream_options("rtsp://h/s", timeout_s=0.5, rtsp_transport="udp") == {
        "rtsp_transport": "udp",
        "timeout": "500000",
    }
    assert stream_options("https://h/live.m3u8", timeout_s=3) == {
        "timeout": "3000000",
        "rw_timeout": "3000000",
    }
    # RTMP's own `timeout` is a listen timeout in seconds: only rw_timeout bounds a read.
    assert stream_options("rtmp://h/app/key", timeout_s=1) == {"rw_timeout": "1000000"}
    assert stream_options("rtsp://h/s", timeout_s=1, extra={"timeout": "9", "probesize": "32"}) == {
        "rtsp_transport": "tcp",
        "timeout": "9",
        "probesize": "32",
    }


def test_camera_options() -> None:
    assert camera_options(None) == {}
    camera = CameraConfig(width=1280, height=720, fps=29.97, input_format="mjpeg")
    assert camera_options(camera, {"use_libv4l2": "1"}) == {
        "video_size": "1280x720",
        "framerate": "29.97",
        "input_format": "mjpeg",
        "use_libv4l2": "1",
    }


def test_build_source_picks_the_reader() -> None:
    def build(**raw: Any) -> Any:
        return build_source(SourceConfig.model_validate({"id": "s", **raw}))

    assert isinstance(build(uri="clip.mp4"), FileSource)
    assert isinstance(build(uri="https://h/clip.mp4"), FileSource)
    rtsp = build(uri="rtsp://h/s", rtsp_transport="udp", timeout_s=2, reconnect={"initial_s": 1, "max_s": 4})
    assert isinstance(rtsp, LiveSource) and isinstance(rtsp, LiveFrameSource)
    assert rtsp.options == {"rtsp_transport": "udp", "timeout": "2000000"}
    assert rtsp.backoff == Backoff(1.0, 4.0, jitter=0.2) and rtsp.timeout_s == 2
    hls = build(uri="https://h/index.m3u8")
    assert isinstance(hls, LiveSource) and hls.format is None
    camera = build(uri="/dev/video3", camera={"width": 640, "height": 480})
    assert isinstance(camera, LiveSource) and camera.format == "v4l2"
    assert camera.options == {"video_size": "640x480"}
    assert isinstance(build(uri="zmq+tcp://127.0.0.1:5999"), ZmqSource)
    assert isinstance(build(uri="clip.mp4", live=True), LiveSource)


def test_a_missing_camera_is_one_line_naming_the_source() -> None:
    device = "/dev/video0"
    if os.path.exists(device):
        pytest.skip(f"{device} exists here")
    source = build_source(SourceConfig(id="door", uri=device))
    with pytest.raises(SourceError) as caught:
        source.open()
    assert str(caught.value) == "source door: no camera at /dev/video0"


def test_dev_null_is_no_camera_and_is_not_retried() -> None:
    source = build_source(SourceConfig(id="door", uri="/dev/null", reconnect={"initial_s": 0.1}))
    started = time.monotonic()
    with pytest.raises(SourceError) as caught:
        source.open()
    assert time.monotonic() - started < 1.0  # at once: no backoff, no retry
    assert str(caught.value) == (
        "source door: /dev/null is not a camera (a V4L2 video device such as /dev/video0): it is character "
        "device 1:3, not video4linux (81)"
    )


def test_a_camera_is_a_video4linux_character_device(tmp_path: Path) -> None:
    assert v4l2_problem(str(tmp_path)).endswith("it is a directory")  # type: ignore[union-attr]
    (tmp_path / "clip.mp4").write_bytes(b"")
    assert v4l2_problem(str(tmp_path / "clip.mp4")).endswith("it is a file")  # type: ignore[union-attr]
    assert v4l2_problem(str(tmp_path / "video9")) == f"no camera at {tmp_path / 'video9'}"
    node = tmp_path / "video0"
    try:  # the node of a camera (major 81) that is not plugged in: stat() sees it as a camera's
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(V4L2_MAJOR, 0))
    except PermissionError:
        pytest.skip("no permission to make a device node here")
    assert v4l2_problem(str(node)) is None


def test_connection_errors_and_logs_hide_the_password(caplog: pytest.LogCaptureFixture) -> None:
    uri = f"rtsp://admin:hunter2@127.0.0.1:{free_port()}/live"
    source = LiveSource(
        "cam",
        uri,
        options=stream_options(uri, timeout_s=1),
        timeout_s=1,
        backoff=Backoff(0.05, 0.05, max_attempts=3),
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(SourceError) as caught:
        source.open()
    message = str(caught.value)
    assert message.startswith(f"source cam: cannot open rtsp://***@127.0.0.1:{uri.rsplit(':', 1)[1]}")
    assert message.endswith("(gave up after 3 attempt(s))") and "\n" not in message
    assert caught.value.__cause__ is None and "hunter2" not in repr(caught.value.__context__)
    assert sum("retrying" in r.getMessage() for r in caplog.records) == 2
    assert not any("hunter2" in r.getMessage() for r in caplog.records)


def test_a_source_waiting_to_connect_stops_when_told() -> None:
    uri = f"rtsp://127.0.0.1:{free_port()}/live"
    source = LiveSource("cam", uri, options=stream_options(uri, timeout_s=1), backoff=Backoff(10, 10))
    asked_at: list[float] = []
    source.set_interrupt(lambda: bool(asked_at) and time.monotonic() > asked_at[0])
    threading.Timer(0.3, lambda: asked_at.append(time.monotonic())).start()
    started = time.monotonic()
    with pytest.raises(SourceInterrupted):
        source.open()  # connection refused, then a 10 s wait cut short
    assert time.monotonic() - started < 1.5


@pytest.fixture
def server() -> Any:
    port = free_port()
    process = spawn(port)
    state = {"port": port, "process": process}
    yield state
    for p in (state["process"], state.get("next")):
        if p is not None:
            p.kill()
            p.wait()


def _read(source: LiveSource, count: int) -> list[tuple[int, float]]:
    out = []
    for _, pts, time_s in source.frames():
        out.append((pts, time_s))
        if len(out) >= count:
            break
    return out


def test_udp_transport_reads_frames(server: dict[str, Any]) -> None:
    uri = f"rtsp://127.0.0.1:{server['port']}/live"
    source = LiveSource(
        "cam", uri, options=stream_options(uri, timeout_s=2, rtsp_transport="udp"), timeout_s=2
    )
    info = source.open()
    assert (info["width"], info["height"], info["live"], info["is_file"]) == (160, 120, True, False)
    frames = _read(source, 10)
    source.close()
    assert all(b[0] > a[0] for a, b in zip(frames, frames[1:]))
    assert source.stats() == {"reconnects": 0, "offline_s": 0.0, "online": False, "corrupt": 0}


def test_a_stalled_stream_times_out_and_reconnects(server: dict[str, Any]) -> None:
    uri = f"rtsp://127.0.0.1:{server['port']}/live"
    source = LiveSource(
        "cam", uri, options=stream_options(uri, timeout_s=1), timeout_s=1, backoff=Backoff(0.2, 0.5)
    )
    source.open()
    before = _read(source, 5)
    pid = server["process"].pid
    os.kill(pid, signal.SIGSTOP)  # the connection stays open, nothing comes: only the timeout can tell
    threading.Timer(2.5, os.kill, (pid, signal.SIGCONT)).start()
    stalled = time.monotonic()
    after = _read(source, 5)
    source.close()
    stats = source.stats()
    assert stats["reconnects"] == 1 and stats["offline_s"] > 0.5
    assert time.monotonic() - stalled >= 2.0
    assert after[0][0] > before[-1][0]  # the timeline goes on


def test_a_stream_that_comes_back_at_another_size_ends_the_source(server: dict[str, Any]) -> None:
    uri = f"rtsp://127.0.0.1:{server['port']}/live"
    source = LiveSource(
        "cam", uri, options=stream_options(uri, timeout_s=1), timeout_s=1, backoff=Backoff(0.1, 0.2)
    )
    source.open()
    frames = source.frames()
    next(frames)
    server["process"].kill()
    server["process"].wait()
    server["next"] = spawn(server["port"], width=176, height=144)
    with pytest.raises(SourceError, match=r"came back at 176x144, it started at 160x120"):
        for _ in frames:
            pass
    source.close()


def test_retime_continues_the_timeline_past_the_gap() -> None:
    source = LiveSource("cam", "rtsp://h/s", options={})
    source._first = type("Info", (), {"time_base": Fraction(1, 90000), "frame_duration": 3600})()  # type: ignore[assignment]
    assert [source._retime(p, Fraction(1, 90000)) for p in (0, 3600, 7200)] == [0, 3600, 7200]
    source._offset, source._gap_s = None, 2.0  # a reconnect after 2 s: the new stream starts at 0
    assert [source._retime(p, Fraction(1, 1000)) for p in (0, 40)] == [7200 + 180000, 7200 + 180000 + 3600]


def test_zmq_source_decodes_and_checks_frames(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/in.sock"
    source = ZmqSource("z", f"zmq+{endpoint}")
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(endpoint)
    try:
        image = np.random.default_rng(1).integers(0, 255, (6, 8, 3), dtype=np.uint8)
        head = {"width": 8, "height": 6, "format": "bgr24"}
        push.send_multipart([json.dumps({**head, "pts": 500}).encode(), image.tobytes()])
        info = source.open()
        assert (info["width"], info["height"], info["time_base"]) == (8, 6, "1/1000000")
        _, jpeg = cv2.imencode(".png", image)  # a PNG sent as "jpeg": refused
        push.send_multipart([json.dumps({**head, "format": "jpeg"}).encode(), jpeg.tobytes()])
        push.send_multipart([json.dumps({**head, "width": 4}).encode(), image[:, :4].tobytes()])
        _, jpeg = cv2.imencode(".jpg", np.full((6, 8, 3), 90, np.uint8))
        push.send_multipart([json.dumps({**head, "format": "jpeg"}).encode(), jpeg.tobytes()])  # no pts
        push.send_multipart([b'{"eos": true}'])
        got = list(source.frames())
        assert len(got) == 2
        assert np.array_equal(got[0][0], image) and got[0][1] == 500
        assert abs(int(got[1][0].mean()) - 90) <= 2 and got[1][1] > 500
        assert source.stats() == {"rejected": {"payload": 1, "size": 1}}
    finally:
        push.close(linger=0)
        ctx.term()
        source.close()


def test_zmq_source_waiting_for_a_producer_stops_when_told(tmp_path: Path) -> None:
    source = ZmqSource("z", f"zmq+ipc://{tmp_path}/in.sock")
    source.set_interrupt(lambda: True)
    with pytest.raises(SourceInterrupted):
        source.open()
    source.close()
