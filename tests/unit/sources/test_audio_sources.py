"""A source's audio in the decode worker: the ZeroMQ audio wire, the gate's policies, the template."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zmq
from framewire.pipeline.errors import SourceError
from framewire.pipeline.frame import PendingPixels
from framewire.pipeline.wire.audioring import AudioRing, AudioRingLayout

from framewire.config import SourceConfig
from framewire.media import yuv
from framewire.media.audio import AudioChunk
from framewire.media.video_reader import VideoReader
from framewire.sources import AudioNeed, build_source
from framewire.sources.audio import AudioFeed, AudioGate, MissingPolicy
from framewire.sources.template import TemplateSource, frames_for
from framewire.sources.zmq_audio import ZmqAudio, parse_audio
from framewire.sources.zmq_wire import EOS, Rejected
from tests.support.audio import tone_bursts, write_audio

pytestmark = pytest.mark.timeout(60)
CARPHONE = str(Path(__file__).resolve().parents[3] / "assets" / "videos" / "carphone_pristine.mp4")


@pytest.fixture
def ring() -> Iterator[AudioRing]:
    made = AudioRing.create(AudioRingLayout(f"framewire-test-src-{uuid.uuid4().hex[:8]}", 16000, 16000 * 10))
    yield made
    made.close()


def message(header: dict[str, object], payload: bytes = b"\x00\x00" * 320) -> list[bytes]:
    return [json.dumps(header).encode(), payload]


def test_the_audio_wire_format_is_checked_before_use() -> None:
    good = parse_audio(message({"rate": 16000, "channels": 1, "format": "s16le", "pts": 5}))
    assert not isinstance(good, str) and good.samples.shape == (320, 1) and good.pts == 5
    stereo = parse_audio(
        message({"rate": 48000, "channels": 2, "format": "f32le", "pts": 0}, np.zeros(8, "<f4").tobytes())
    )
    assert not isinstance(stereo, str) and stereo.samples.shape == (4, 2)
    assert parse_audio([b'{"eos": true}']) == EOS
    for header, payload, reason in [
        ({"rate": 16000, "format": "s16le"}, b"\x00\x00", "pts"),
        ({"rate": 7, "format": "s16le", "pts": 0}, b"\x00\x00", "format"),
        ({"rate": 16000, "channels": 9, "format": "s16le", "pts": 0}, b"\x00\x00", "format"),
        ({"rate": 16000, "format": "mp3", "pts": 0}, b"\x00\x00", "format"),
        ({"rate": 16000, "format": "s16le", "pts": -1}, b"\x00\x00", "pts"),
        ({"rate": 16000, "channels": 2, "format": "s16le", "pts": 0}, b"\x00\x00\x00", "size"),
        ({"rate": 16000, "format": "f32le", "pts": 0}, np.array([np.nan], "<f4").tobytes(), "size"),
    ]:
        with pytest.raises(Rejected) as caught:
            parse_audio(message(header, payload))
        assert caught.value.reason == reason
    with pytest.raises(Rejected, match="parts"):
        parse_audio([b"{}"])


def test_the_zmq_audio_input_resamples_and_rejects_a_changed_format() -> None:
    endpoint = f"ipc:///tmp/framewire-test-audio-{uuid.uuid4().hex[:8]}"
    producer = ZmqAudio("s", endpoint, 16000)
    producer.open()
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(endpoint)
    try:
        pcm = (np.full(4800, 0.25) * 32767).astype("<i2").tobytes()
        push.send_multipart(message({"rate": 48000, "channels": 1, "format": "s16le", "pts": 2_000_000}, pcm))
        push.send_multipart(message({"rate": 44100, "channels": 1, "format": "s16le", "pts": 2_100_000}, pcm))
        push.send_multipart(message({"rate": 48000, "channels": 1, "format": "s16le", "pts": 2_100_000}, pcm))
        push.send_multipart([b'{"eos": true}'])
        chunks = list(producer.chunks())
    finally:
        push.close(linger=0)
        ctx.term()
        producer.close()
    samples = np.concatenate([c.samples for c in chunks])
    assert chunks[0].time_s == pytest.approx(2.0) and samples.size == pytest.approx(3200, abs=20)
    assert producer.stats() == {"rejected": {"audio_mismatch": 1}}


class Chunks:
    """A producer that hands over chunks as a test tells it to."""

    def __init__(self, live: bool) -> None:
        self.live = live
        self.queue: list[AudioChunk | None] = []
        self.ready = threading.Event()

    def open(self) -> None:
        return None

    def chunks(self) -> Iterator[AudioChunk]:
        while True:
            while not self.queue:
                time.sleep(0.001)
            chunk = self.queue.pop(0)
            if chunk is None:
                return
            yield chunk

    def stats(self) -> dict[str, object]:
        return {}

    def close(self) -> None:
        self.queue.append(None)


def gate_with(ring: AudioRing, live: bool, policy: MissingPolicy) -> tuple[AudioGate, Chunks]:
    producer = Chunks(live)
    feed = AudioFeed("s", producer, 10.0)
    feed.open()
    feed.attach(ring, lambda: None)
    return AudioGate("s", feed, AudioNeed(0.1, 0.1), policy), producer


def test_a_live_frame_waits_for_late_audio_up_to_wait_ms(ring: AudioRing) -> None:
    gate, producer = gate_with(ring, True, MissingPolicy("wait", 300, "drop"))
    producer.queue.append(AudioChunk(np.ones(8000, np.float32), 0.0))  # 0 .. 0.5 s
    time.sleep(0.05)
    assert gate.admit(0.2)  # complete already
    threading.Timer(0.1, lambda: producer.queue.append(AudioChunk(np.ones(8000, np.float32), 0.5))).start()
    started = time.monotonic()
    assert gate.admit(0.5) and time.monotonic() - started < 0.3  # it came within the wait
    started = time.monotonic()
    assert not gate.admit(1.5)  # never comes: dropped after 300 ms
    assert 0.29 < time.monotonic() - started < 0.6
    assert gate.counts == {"silence": 0, "drop": 1, "waited": 1}
    gate.feed.close()


def test_silence_goes_on_at_once_and_a_gap_is_missing_for_good(ring: AudioRing) -> None:
    gate, producer = gate_with(ring, True, MissingPolicy("silence"))
    producer.queue += [AudioChunk(np.ones(1600, np.float32), 0.0), AudioChunk(np.ones(1600, np.float32), 1.0)]
    time.sleep(0.05)
    started = time.monotonic()
    assert gate.admit(0.5) and gate.admit(3.0)  # a gap, and audio not there yet: both silence, no wait
    assert time.monotonic() - started < 0.05 and gate.counts["silence"] == 2
    gate.feed.close()


def test_a_file_frame_always_waits_for_its_audio(ring: AudioRing) -> None:
    gate, producer = gate_with(ring, False, MissingPolicy("drop"))
    threading.Timer(0.2, lambda: producer.queue.append(AudioChunk(np.ones(16000, np.float32), 0.0))).start()
    assert gate.admit(0.5)  # waited for the file's audio, however long: a file is never late
    producer.queue.append(None)
    time.sleep(0.05)
    assert not gate.admit(0.95)  # the audio ended before the window did: the policy, drop
    assert gate.counts == {"silence": 0, "drop": 1, "waited": 1}
    gate.feed.close()


def test_a_failing_audio_file_fails_the_source(ring: AudioRing, tmp_path: Path) -> None:
    (tmp_path / "bad.wav").write_bytes(b"RIFF....WAVEfmt nonsense")
    config = SourceConfig.model_validate(
        {"id": "s", "uri": CARPHONE, "audio": {"uri": str(tmp_path / "bad.wav")}}
    )
    with pytest.raises(SourceError, match=r"^source s: audio.uri: cannot open .*bad.wav"):
        build_source(config, AudioNeed(0.1, 0.1)).open()


@pytest.mark.parametrize("mode", ["loop", "pingpong"])
def test_a_template_runs_exactly_as_long_as_its_audio(ring: AudioRing, tmp_path: Path, mode: str) -> None:
    write_audio(tmp_path / "a.wav", tone_bursts(5.0, []))
    config = SourceConfig.model_validate(
        {"id": "s", "uri": CARPHONE, "template": mode, "audio": {"uri": str(tmp_path / "a.wav")}}
    )
    source = build_source(config, AudioNeed(0.1, 0.1))
    assert isinstance(source, TemplateSource)
    info = source.open()
    assert info["audio"] == {"rate": 16000, "capacity_s": 10.0} and info["audio_path"] == str(
        tmp_path / "a.wav"
    )
    source.attach_audio(ring)
    frames = list(source.frames())
    source.close()
    assert len(frames) == frames_for(5.0, source._info.fps) == 150  # type: ignore[union-attr]
    assert [pts for _, pts, _ in frames[:3]] == [0, 1001, 2002]
    # frame 120 is the clip's frame 0 again (loop) or its frame 118 on the way back (pingpong)
    index = 0 if mode == "loop" else 118
    assert np.array_equal(bgr(frames[120][0]), bgr(frames[index][0]))


def bgr(image: PendingPixels) -> np.ndarray:
    out = np.empty(image.shape, np.uint8)
    image.write_into(out)
    return out


@pytest.mark.parametrize("mode", ["loop", "pingpong"])
def test_a_template_writes_its_frames_as_bgr_or_as_the_planes_of_a_yuv_job(
    ring: AudioRing, tmp_path: Path, mode: str
) -> None:
    """Issue 39: a face-blur job keeps YUV frames, and the template's frames failed there ("a BGR
    frame for a job that keeps YUV frames"): they write themselves into either kind of slot."""
    write_audio(tmp_path / "a.wav", tone_bursts(1.0, []))
    config = SourceConfig.model_validate({"id": "s", "uri": CARPHONE, "template": mode, "audio": {"uri": str(tmp_path / "a.wav")}})
    source = build_source(config, AudioNeed(0.1, 0.1))
    source.open()
    source.attach_audio(ring)  # type: ignore[attr-defined]
    frames = [image for image, _, _ in source.frames()]
    source.close()
    with VideoReader("t", CARPHONE) as reader:
        decoded = [frame.image for frame in reader.frames()][: len(frames)]
    assert len(frames) == len(decoded) == 30
    for image, want in zip(frames, decoded):
        assert not isinstance(image, np.ndarray)
        planes = np.empty(yuv.shape(176, 144), np.uint8)
        image.write_into(planes)
        assert np.array_equal(bgr(image), want)
        assert np.abs(yuv.to_bgr(planes).astype(int) - want).mean() < 2  # the same picture, as I420


def test_a_looped_template_without_pts_says_so_once(
    ring: AudioRing, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A raw H.264 template has no pts: read again on every loop, it is logged on the first only."""
    from tests.support import clips

    template = clips.make_clip(tmp_path / "t.h264", frames=10, fps=25)
    write_audio(tmp_path / "a.wav", tone_bursts(2.0, []))
    config = SourceConfig.model_validate(
        {"id": "s", "uri": str(template), "template": "loop", "audio": {"uri": str(tmp_path / "a.wav")}}
    )
    source = build_source(config, AudioNeed(0.1, 0.1))
    source.open()
    source.attach_audio(ring)  # type: ignore[attr-defined]
    with caplog.at_level("WARNING", logger="framewire.media.video_reader"):
        frames = list(source.frames())
    source.close()
    assert len(frames) == 50  # five loops of the template
    warned = [r.getMessage() for r in caplog.records if "no usable pts" in r.getMessage()]
    assert warned == ["source s: 10 of 10 frames had no usable pts; derived them from the frame rate"]


def test_a_live_audio_stream_of_its_own_reconnects_and_goes_on_past_the_gap(tmp_path: Path) -> None:
    """StreamAudio on the test RTSP server's sound track: chunks in order; after the server dies and
    comes back, the chunks go on from where they stopped plus the time offline, never back."""
    from framewire.pipeline.backoff import Backoff
    from framewire.sources.audio_producers import StreamAudio
    from tests.support import clips, rtsp_server

    clip = clips.make_clip(tmp_path / "v.mp4", frames=25, fps=25)
    write_audio(tmp_path / "a.wav", tone_bursts(5.0, [(0.5, 1.0)]))
    port = rtsp_server.free_port()
    server = rtsp_server.spawn(port, clip=str(clip), audio=str(tmp_path / "a.wav"))
    stream = StreamAudio(
        "s",
        f"rtsp://127.0.0.1:{port}/live",
        16000,
        options={"rtsp_transport": "tcp", "timeout": "2000000"},
        timeout_s=2.0,
        backoff=Backoff(0.2, 0.2, max_attempts=50),
    )
    times: list[float] = []
    servers = [server]

    def restart() -> None:
        servers.append(rtsp_server.spawn(port, clip=str(clip), audio=str(tmp_path / "a.wav")))

    try:
        for chunk in stream.chunks():
            times.append(chunk.time_s)
            if len(times) == 40:  # about a second in: the server dies, and is back 1.5 s later
                server.kill()
                server.wait()
                threading.Timer(1.5, restart).start()
            if len(times) > 40 and times[-1] > times[39] + 2.0:
                break
    finally:
        stream.close()
        for running in servers:
            running.kill()
            running.wait()
    assert all(b > a for a, b in zip(times, times[1:]))  # never back, never repeated
    jump = max(b - a for a, b in zip(times, times[1:]))
    # The time offline (1.5 s, less what the client had buffered) stays a gap: not folded away.
    assert 1.0 < jump < 6.0 and stream.reconnects >= 1


def test_a_file_is_not_read_past_the_ring_before_the_ring_is_there(ring: AudioRing) -> None:
    """The ring comes from the hub after the source opened: a file's audio must wait for it, not be
    read ahead into the early queue, which keeps only the ring's capacity (10 s here)."""
    producer = Chunks(live=False)
    producer.queue += [AudioChunk(np.full(16000, float(i), np.float32), float(i)) for i in range(15)] + [None]
    feed = AudioFeed("s", producer, 10.0)
    feed.open()
    time.sleep(0.2)  # the whole file would have been read by now
    feed.attach(ring, lambda: 5.0)  # and the frames in flight allow 5 s of read-ahead
    time.sleep(0.2)
    assert (
        ring.origin_s == 0.0
        and ring.window(0.0, 16000).complete
        and ring.written_until_s() == pytest.approx(5.25)
    )
    feed.close()
