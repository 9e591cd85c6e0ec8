"""media.live: the sender thread never blocks its caller, counts what it drops, reconnects with
backoff, and writes a rolling HLS window (real FFmpeg muxers; a dead RTSP receiver is a free port)."""

from __future__ import annotations

import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from framewire.media.live import Encoding, LiveSender, Target, counts_line, push_target
from framewire.pipeline.uris import redact
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(60)

ENCODING = Encoding(Fraction(25), Fraction(1, 25), keyint=25)


def frames(count: int, width: int = 64, height: int = 48) -> list[np.ndarray]:
    return [np.full((height, width, 3), (i * 7) % 256, np.uint8) for i in range(count)]


def test_a_dead_receiver_never_blocks_the_caller_and_every_frame_is_counted(caplog: pytest.LogCaptureFixture) -> None:
    url = f"rtsp://me:s3cret@127.0.0.1:{free_port()}/x"  # nothing listens: every connect is refused
    target = push_target(url, "rtsp", 2.0, redact(url))
    sender = LiveSender("push test", lambda: target, ENCODING, queue_frames=4, backoff_s=(0.05, 0.2), timeout_s=2)
    started = time.monotonic()
    for i, image in enumerate(frames(200)):
        sender.put(image, i)
    put_s = time.monotonic() - started
    counts = sender.close(5)
    assert put_s < 1.0, f"200 puts took {put_s:.2f} s"
    assert counts.frames == 200 and counts.sent == 0 and counts.connects == 0
    assert counts.dropped == 200 and counts.failures >= 1
    assert "0/200 frames sent, 200 dropped" in counts_line(counts)
    assert "Connection refused" in caplog.text and "rtsp://***@127.0.0.1" in caplog.text
    assert "s3cret" not in caplog.text


def test_hls_writes_a_rolling_window_and_ends_the_playlist(tmp_path: Path) -> None:
    folder = tmp_path / "hls"
    options = {"hls_time": "1", "hls_list_size": "3", "hls_flags": "delete_segments",
               "hls_segment_filename": str(folder / "seg%05d.ts")}  # fmt: skip
    target = Target(str(folder / "index.m3u8"), "hls", options, "hls")
    sender = LiveSender("hls test", lambda: target, ENCODING, queue_frames=200,
                        prepare=lambda: folder.mkdir(exist_ok=True))  # fmt: skip
    for i, image in enumerate(frames(150)):  # 6 s at 25 fps: 6 segments of 1 s, 3 kept
        sender.put(image, i)
    counts = sender.close(20)
    assert (counts.frames, counts.sent, counts.dropped, counts.connects) == (150, 150, 0, 1)
    playlist = (folder / "index.m3u8").read_text()
    listed = [line for line in playlist.splitlines() if line.endswith(".ts")]
    assert listed == ["seg00003.ts", "seg00004.ts", "seg00005.ts"] and "#EXT-X-ENDLIST" in playlist
    with av.open(str(folder / listed[0])) as container:  # a segment starts with a key frame and decodes alone
        assert len(list(container.decode(video=0))) == 25


def test_a_lost_receiver_is_reconnected_and_each_connection_starts_at_zero(tmp_path: Path) -> None:
    """A target that cannot be opened at first (its folder cannot be made) and can be later: the
    frame meanwhile is dropped and counted, the next one after the backoff opens it."""
    folder = tmp_path / "out"
    attempts: list[int] = []

    def prepare() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise PermissionError(13, "Permission denied", str(folder))
        folder.mkdir(exist_ok=True)

    options = {"hls_time": "1", "hls_list_size": "0", "hls_segment_filename": str(folder / "seg%05d.ts")}
    target = Target(str(folder / "index.m3u8"), "hls", options, "hls")
    sender = LiveSender("retry test", lambda: target, ENCODING, queue_frames=100, backoff_s=(0.05, 0.05),
                        prepare=prepare)  # fmt: skip
    sender.put(frames(1)[0], 0)
    deadline = time.monotonic() + 10
    while sender.counts.failures < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.1)  # past the backoff: the next frame opens again
    for i, image in enumerate(frames(50)):
        sender.put(image, 1000 + i)
    counts = sender.close(20)
    assert counts.failures == 1 and counts.connects == 1 and counts.sent == 50 and counts.dropped_down == 1
    with av.open(str(folder / "index.m3u8")) as container:
        decoded = list(container.decode(video=0))
    assert len(decoded) == 50 and decoded[0].time is not None and decoded[0].time < 2.0  # restarted near 0


def test_a_receiver_that_never_answers_costs_at_most_the_timeouts() -> None:
    """A server that takes the TCP connection and never answers RTSP: connecting gives up after
    `timeout_s` (FFmpeg's rtsp `timeout`), and close returns within its own bound. FFmpeg waits
    with the GIL held (PyAV's write_header), so the caller's puts may wait that long too, once."""
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"rtsp://127.0.0.1:{server.getsockname()[1]}/x"
        sender = LiveSender("silent test", lambda: push_target(url, "rtsp", 1.0), ENCODING,
                            queue_frames=4, backoff_s=(5.0, 5.0), timeout_s=1.0)  # fmt: skip
        started = time.monotonic()
        for i, image in enumerate(frames(20)):
            sender.put(image, i)
        put_s = time.monotonic() - started
        counts = sender.close(2.0)
        closed_s = time.monotonic() - started
    assert put_s < 2.0 and closed_s < 8.0, (put_s, closed_s)
    assert (counts.sent, counts.connects, counts.failures, counts.dropped) == (0, 0, 1, 20), counts
