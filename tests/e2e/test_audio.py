"""Audio jobs through the CLI, as a user runs them: the lip-sync generator on a template and an audio
file, the same with frames and audio arriving separately over ZeroMQ, and A/V sync over a minute.

The generator is the test model of bench.lipsync_models (light: no convolution branch) with the
shipped configs/lipsync.yaml; it brightens the face by the energy of the audio around each frame, so
the brightened output frames must be exactly the frames inside a tone burst (+/- 1 frame at each
edge), from the first burst to the last, with no drift.
"""

from __future__ import annotations

import json
import threading
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import zmq

from bench.lipsync_models import generator
from framewire.media.video_reader import VideoReader
from framewire.sources.template import frames_for
from tests.e2e.helpers import ROOT, VIDEOS, error_lines, read_jsonl, run_cli
from tests.support.audio import (
    RATE,
    bright_frames,
    brightening,
    burst_frames,
    bursts_over,
    edges,
    pingpong,
    tone_bursts,
    write_audio,
)
from tests.support.clips import audio_codec, audio_duration_s, count_frames, video_pts

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

LIPSYNC = str(ROOT / "configs" / "lipsync.yaml")
SECONDS = 61.0
BURSTS = bursts_over(SECONDS)


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Made once for the module: the light generator, 61 s of tone bursts, the template's frames."""
    folder = tmp_path_factory.mktemp("lipsync")
    (folder / "generator.onnx").write_bytes(generator(layers=0))
    write_audio(folder / "bursts.wav", tone_bursts(SECONDS, BURSTS))
    return folder


@pytest.fixture(scope="module")
def template() -> tuple[list[np.ndarray], Fraction]:
    with VideoReader("t", str(VIDEOS / "carphone_pristine.mp4")) as reader:
        return [f.image for f in reader.frames()], reader.info.fps


def outputs(folder: Path, name: str) -> str:
    return f"outputs=[{{kind: video_file, path: '{folder}/{name}.mp4'}}, {{kind: jsonl, path: '{folder}/{name}.jsonl'}}]"


def assert_in_sync(lift: np.ndarray, bursts: list[tuple[float, float]], fps: Fraction) -> list[tuple[int, int]]:
    """Every burst's first and last frame found within one frame; returns the offsets."""
    found, wanted = edges(bright_frames(lift)), edges(burst_frames(bursts, fps, lift.size))
    assert len(found) == len(wanted) == len(bursts), (found, wanted)
    offsets = [(f0 - w0, f1 - w1) for (f0, f1), (w0, w1) in zip(found, wanted)]
    assert all(abs(a) <= 1 and abs(b) <= 1 for a, b in offsets), offsets
    return offsets


def test_generator_job_on_a_template_and_an_audio_file(media: Path, template: tuple[list[np.ndarray], Fraction], tmp_path: Path) -> None:
    """One config: the output lasts as long as the audio, carries it, every frame generated, in sync
    at the start and at the end of a minute."""
    frames, fps = template
    done = run_cli(
        "run", "-c", LIPSYNC, "--no-progress",
        "--set", f"sources.0.audio.uri={media / 'bursts.wav'}",
        "--set", f"model.path={media / 'generator.onnx'}",
        "--set", outputs(tmp_path, "avatar"),
        timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    expected = int(np.ceil(SECONDS * fps))
    records = read_jsonl(tmp_path / "avatar.jsonl")
    assert len(records) == count_frames(tmp_path / "avatar.mp4") == expected
    assert all("generated" in r["results"] and "error" not in r for r in records)
    assert [r["pts"] for r in records] == [k * 1001 for k in range(expected)]  # 1/30000: the template's time base
    # The WAV is encoded as AAC for MP4: its 1024 priming samples (64 ms at 16 kHz) come on top.
    assert audio_duration_s(tmp_path / "avatar.mp4") == pytest.approx(SECONDS + 1024 / RATE, abs=0.01)
    assert_audio_unshifted(tmp_path / "avatar.mp4", BURSTS)
    offsets = assert_in_sync(brightening(tmp_path / "avatar.mp4", pingpong(frames, expected)), BURSTS, fps)
    print(f"file sync over {SECONDS:g} s, (first, last) frame offsets per burst: {offsets}")


@pytest.mark.parametrize("frame_format", ["auto", "bgr"])
def test_a_looped_template_with_flac_audio_in_a_face_blur_job(tmp_path: Path, frame_format: str) -> None:
    """Issue 39: the default face-blur job keeps YUV frames (`auto`), where a template's first frame
    failed ("a BGR frame for a job that keeps YUV frames"); with `bgr` it keeps BGR ones. Either way
    every frame the audio lasts is written, and the FLAC becomes AAC in the MP4."""
    write_audio(tmp_path / "speech.flac", tone_bursts(8.0, [(1.0, 2.0)]))
    done = run_cli(
        "run", "--no-progress",
        "--set", f"sources.0.uri={VIDEOS / 'carphone_pristine.mp4'}",
        "--set", "sources.0.template=loop",
        "--set", f"sources.0.audio={{uri: '{tmp_path / 'speech.flac'}'}}",
        "--set", f"stages.frame_format={frame_format}",
        "--set", outputs(tmp_path, "blurred"),
        timeout=240,
    )  # fmt: skip
    assert done.returncode == 0 and not error_lines(done.stderr), done.stderr[-2000:]
    expected = frames_for(8.0, Fraction(30000, 1001))
    assert expected == 240  # two loops of the 120-frame template
    assert count_frames(tmp_path / "blurred.mp4") == len(read_jsonl(tmp_path / "blurred.jsonl")) == expected
    assert audio_codec(tmp_path / "blurred.mp4") == "aac"
    assert audio_duration_s(tmp_path / "blurred.mp4") == pytest.approx(8.0, abs=1024 / RATE)  # AAC priming at most


def assert_audio_unshifted(path: Path, bursts: list[tuple[float, float]], start_s: float = 0.0) -> None:
    """The output's audio has the bursts at their times (within 3 ms) relative to the first frame."""
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        decoded = list(container.decode(stream))
        rate = stream.codec_context.sample_rate
    first = float(decoded[0].pts * decoded[0].time_base)
    samples = np.concatenate([f.to_ndarray().reshape(f.layout.nb_channels, -1)[0] for f in decoded])
    loud = np.abs(samples) > 0.1
    onsets = first + np.nonzero(loud[1:] & ~loud[:-1])[0] / rate - start_s
    for a, _ in bursts:
        assert np.min(np.abs(onsets - a)) < 0.003, (a, onsets[:5])


class Producer(threading.Thread):
    """Pushes frames and audio over two ZeroMQ sockets, separately: the audio runs ahead of the frames
    by a varying 0.2-1.2 s, in 20 ms chunks, as a capture card or a TTS engine would deliver them."""

    def __init__(self, video: str, audio: str, frames: list[np.ndarray], fps: Fraction, samples: np.ndarray, base_us: int) -> None:
        super().__init__(daemon=True)
        self.video, self.audio, self.frames, self.fps = video, audio, frames, fps
        self.samples, self.base_us = samples, base_us
        self.count = int(np.ceil(samples.size / RATE * fps))
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        ctx = zmq.Context()
        video, audio = ctx.socket(zmq.PUSH), ctx.socket(zmq.PUSH)
        try:
            for sock, where in ((video, self.video), (audio, self.audio)):
                sock.setsockopt(zmq.SNDHWM, 8)
                sock.connect(where)
            chunk, sent_audio = RATE // 50, 0
            rng = np.random.default_rng(7)
            for k in range(self.count):
                lead = 0.2 + rng.random()  # seconds of audio ahead of this frame
                while sent_audio < self.samples.size and sent_audio / RATE < k / self.fps + lead:
                    pcm = (self.samples[sent_audio : sent_audio + chunk] * 32767).astype("<i2")
                    pts = self.base_us + round(sent_audio * 1_000_000 / RATE)
                    header = {"rate": RATE, "channels": 1, "format": "s16le", "pts": pts}
                    audio.send_multipart([json.dumps(header).encode(), pcm.tobytes()])
                    sent_audio += chunk
                image = self.frames[k % len(self.frames)]
                pts = self.base_us + round(k * 1_000_000 / self.fps)
                header = {"width": image.shape[1], "height": image.shape[0], "format": "bgr24", "pts": pts}
                video.send_multipart([json.dumps(header).encode(), image.tobytes()])
                self.sent += 1
            audio.send_multipart([b'{"eos": true}'])
            video.send_multipart([b'{"eos": true}'])
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            # ZeroMQ drops what is still queued when a socket closes: linger until the daemon has taken
            # it all (ctx.term returns as soon as it has), bounded for a daemon that died.
            video.close(linger=120_000)
            audio.close(linger=120_000)
            ctx.term()


def http_ready(port: int, job: threading.Thread, timeout: float = 120) -> None:
    """Until the daemon's /readyz says 200: every stage has its worker and the sources their slots,
    however long the start took under load."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:  # not listening yet, or 503 while starting
            pass
        assert time.monotonic() < deadline and job.is_alive(), "the daemon did not become ready"
        time.sleep(0.1)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_live_frames_and_audio_arriving_separately_stay_in_sync(
    media: Path, template: tuple[list[np.ndarray], Fraction], tmp_path: Path
) -> None:
    frames, fps = template
    video, audio, http = free_port(), free_port(), free_port()
    source = (
        f"sources=[{{id: live, uri: 'zmq+tcp://127.0.0.1:{video}', policy: block, "
        f"audio: {{uri: 'zmq+tcp://127.0.0.1:{audio}', missing: {{policy: wait, wait_ms: 3000}}}}}}]"
    )
    base_us = 7_000_000
    producer = Producer(f"tcp://127.0.0.1:{video}", f"tcp://127.0.0.1:{audio}", frames, fps, tone_bursts(SECONDS, BURSTS), base_us)
    result: dict[str, object] = {}
    job = threading.Thread(
        target=lambda: result.update(done=run_cli(
            "run", "-c", LIPSYNC, "--no-progress", "--set", source,
            "--set", f"model.path={media / 'generator.onnx'}", "--set", outputs(tmp_path, "live"),
            "--set", "http.enabled=true", "--set", f"http.port={http}", timeout=280,
        ))
    )  # fmt: skip
    job.start()
    http_ready(http, job)  # both sockets bound, the pipeline up: the producer's pace is the stream's
    producer.start()
    job.join(290)
    producer.join(10)
    done = result["done"]
    assert producer.error is None and producer.sent == producer.count
    assert done.returncode == 0, done.stderr[-2000:]  # type: ignore[attr-defined]
    records = read_jsonl(tmp_path / "live.jsonl")
    assert len(records) == producer.count and all("generated" in r["results"] for r in records)
    assert records[0]["pts"] == base_us
    assert_audio_unshifted(tmp_path / "live.mp4", BURSTS, start_s=base_us / 1e6)
    offsets = assert_in_sync(brightening(tmp_path / "live.mp4", [frames[k % len(frames)] for k in range(len(records))]), BURSTS, fps)
    print(f"live sync over {SECONDS:g} s, (first, last) frame offsets per burst: {offsets}")


def test_voice_activity_agrees_with_the_silero_vad_package(tmp_path: Path) -> None:
    """The shipped configs/speaking.yaml: per-frame speech flags against `get_speech_timestamps`."""
    try:
        import torch
        from silero_vad import get_speech_timestamps, load_silero_vad
    except ImportError as exc:  # make test installs them (Makefile: the VAD reference)
        pytest.fail(f"the VAD reference is not installed ({exc}): run `make test`, which installs torch and silero-vad")
    done = run_cli("run", "-c", str(ROOT / "configs" / "speaking.yaml"), "--no-progress", "--set", outputs(tmp_path, "speaker"))
    assert done.returncode == 0, done.stderr[-2000:]
    records = read_jsonl(tmp_path / "speaker.jsonl")
    from framewire.media.audio import AudioDecoder

    decoder = AudioDecoder("ref", str(ROOT / "assets" / "audio" / "speech.flac"), RATE)
    decoder.open()
    samples = np.concatenate([c.samples for c in decoder.chunks()])
    decoder.close()
    speech = get_speech_timestamps(torch.from_numpy(samples), load_silero_vad(onnx=True), sampling_rate=RATE)
    reference = [any(s["start"] <= round(r["time"] * RATE) < s["end"] for s in speech) for r in records]
    ours = [r["results"]["speech"] for r in records]
    agreement = float(np.mean(np.array(ours) == np.array(reference)))
    print(f"VAD frame agreement with silero-vad: {agreement:.4f} over {len(records)} frames")
    assert agreement >= 0.95
    assert sum(reference) > len(records) / 3 and not all(reference)  # the clip has speech and silence
    spoken = [r["results"]["speaking"] for r, s in zip(records, reference) if s]
    silent = [r["results"]["speaking"] for r, s in zip(records, reference) if not s]
    assert np.median(spoken) > 0.8 and np.median(silent) < 0.2


def bad(*overrides: str, config: str = LIPSYNC) -> str:
    done = run_cli("validate", "-c", config, *(x for o in overrides for x in ("--set", o)), timeout=60)
    lines = error_lines(done.stderr)
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    return lines[0]


def test_bad_audio_inputs_are_one_line_errors_at_start(media: Path, tmp_path: Path) -> None:
    from tests.support.clips import make_clip

    silent = make_clip(tmp_path / "silent.mp4", frames=10)
    assert bad(f"sources.0.audio.uri={silent}").endswith(f"sources.0.audio.uri: no audio track in {silent}")
    assert "sources.0.audio.uri: audio file not found" in bad(f"sources.0.audio.uri={tmp_path / 'none.wav'}")
    self_on_silent = bad(f"sources.0.uri={silent}", "sources.0.template=null", "sources.0.audio.uri=self")
    assert self_on_silent.endswith(f"sources.0.audio.uri: no audio track in the video {silent} (audio.uri: self)")
    assert "model.inputs: the model input 'audio' [" in bad("model.inputs={image: {fill: [masked_crop, reference]}}")
    assert "is not mapped" in bad("model.inputs={image: {fill: [masked_crop, reference]}}")
    assert "model.inputs.image: the model input is [" in bad("model.inputs.image.fill=crop")
    mismatch = bad("steps.1.window_ms=100")
    assert "model.inputs.audio:" in mismatch or "steps.1.model:" in mismatch
    assert "template: needs audio.uri" in bad("sources.0.audio.uri=self")
    second = "sources.1={id: b, uri: assets/videos/carphone_pristine.mp4, template: loop, audio: {uri: assets/audio/speech.flac, sample_rate: 8000}}"
    assert "sources.1.audio.sample_rate: 8000, but another source's is 16000" in bad(second, "outputs.0.path=out/{source_id}.mp4", "outputs.1.path=out/{source_id}.jsonl")
    vad = str(ROOT / "configs" / "speaking.yaml")
    assert "Silero VAD takes 16000 or 8000 Hz audio" in bad("sources.0.audio.sample_rate=44100", config=vad)
    assert "steps.0 (vad) reads audio, but sources.0 (speaker) has none" in bad("sources.0.audio=null", "sources.0.template=null", config=vad)


def test_an_audio_file_that_ends_before_the_video_follows_the_policy(tmp_path: Path) -> None:
    """A 4 s clip with 2 s of audio: the frames after it get silence (counted), or are dropped."""
    from tests.support.clips import make_clip

    clip = make_clip(tmp_path / "clip.mp4", frames=100, fps=25, from_clip=VIDEOS / "carphone_pristine.mp4", width=176, height=144)
    write_audio(tmp_path / "short.wav", tone_bursts(2.0, [(0.5, 1.0)]))
    common = [
        "run", "-c", str(ROOT / "configs" / "speaking.yaml"), "--no-progress",
        "--set", f"sources.0.uri={clip}", "--set", "sources.0.template=null",
        "--set", f"sources.0.audio.uri={tmp_path / 'short.wav'}",
    ]  # fmt: skip
    silence = run_cli(*common, "--set", outputs(tmp_path, "silence"), timeout=120)
    assert silence.returncode == 0, silence.stderr[-2000:]
    assert len(read_jsonl(tmp_path / "silence.jsonl")) == 100
    assert "audio window is incomplete: silence" in silence.stderr
    dropped = run_cli(*common, "--set", "sources.0.audio.missing.policy=drop", "--set", outputs(tmp_path, "drop"), timeout=120)
    assert dropped.returncode == 0, dropped.stderr[-2000:]
    kept = read_jsonl(tmp_path / "drop.jsonl")
    # The steps read up to 0.45 s past a frame (VAD's lookahead): frames from 1.55 s on lack some audio.
    assert 30 <= len(kept) <= 45 and kept[-1]["time"] < 2.0
    assert "audio window is incomplete: dropped" in dropped.stderr



def test_max_frames_ends_a_source_with_audio_cleanly(tmp_path: Path) -> None:
    """A source cut by max_frames while its audio file still has more: the audio thread stops before
    its container closes (closing it under the thread crashed the decode worker with SIGSEGV)."""
    done = run_cli(
        "run", "-c", str(ROOT / "configs" / "speaking.yaml"), "--no-progress",
        "--set", "sources.0.max_frames=20", "--set", outputs(tmp_path, "cut"), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert [r["seq"] for r in read_jsonl(tmp_path / "cut.jsonl")] == list(range(20))


def test_an_rtsp_stream_with_its_own_audio_stays_in_sync(media: Path, tmp_path: Path) -> None:
    """RTSP with audio (`audio.uri: self`): the sound comes in the same stream as the frames (H.264
    and L16 tracks from the test server), 20 s at the stream's own pace."""
    from tests.support import clips, rtsp_server

    clip = clips.make_clip(tmp_path / "face.mp4", frames=120, fps=25, width=176, height=144, from_clip=VIDEOS / "carphone_pristine.mp4")
    bursts = bursts_over(30.0)
    write_audio(tmp_path / "bursts.wav", tone_bursts(30.0, bursts))
    port = rtsp_server.free_port()
    server = rtsp_server.spawn(port, clip=str(clip), audio=str(tmp_path / "bursts.wav"))
    try:
        source = (
            # max_waiting as many as its slots: under load the generator falls behind, and frames
            # that waited past the default 4 would be dropped with their seq (max_frames counts them).
            f"sources=[{{id: cam, uri: 'rtsp://127.0.0.1:{port}/live', max_frames: 500, max_waiting: 16, "
            "audio: {uri: self, missing: {policy: wait, wait_ms: 1000}}}]"
        )
        done = run_cli(
            "run", "-c", LIPSYNC, "--no-progress", "--set", source,
            "--set", f"model.path={media / 'generator.onnx'}", "--set", outputs(tmp_path, "cam"), timeout=120,
        )  # fmt: skip
    finally:
        server.kill()
        server.wait()
    assert done.returncode == 0, done.stderr[-2000:]
    records = read_jsonl(tmp_path / "cam.jsonl")
    index = [round(r["time"] * 25) for r in records]  # a live source may drop a frame: its pts tell which
    with VideoReader("t", str(clip)) as reader:
        pictures = [f.image for f in reader.frames()]
    lift = brightening(tmp_path / "cam.mp4", [pictures[i % len(pictures)] for i in index])
    found = edges({index[k] for k in bright_frames(lift)})
    wanted = edges(burst_frames(bursts, 25, index[-1] + 1) & set(index))
    assert len(records) == 500 and len(found) == len(wanted) >= 6, (found, wanted)
    offsets = [(f0 - w0, f1 - w1) for (f0, f1), (w0, w1) in zip(found, wanted)]
    assert all(abs(a) <= 1 and abs(b) <= 1 for a, b in offsets), offsets
    print(f"rtsp sync over 20 s, (first, last) frame offsets per burst: {offsets}")


def test_a_face_clip_with_its_own_sound_track_stays_in_sync(media: Path, template: tuple[list[np.ndarray], Fraction], tmp_path: Path) -> None:
    """`audio.uri: self`: tone bursts muxed onto a face clip (AAC in the MP4), the clip's own frames
    generated; the output keeps the clip's pts and its audio track as it was."""
    from tests.support.audio import mux_clip

    frames, _ = template
    pictures = [frames[k % len(frames)] for k in range(300)]  # 12 s at 25 fps
    bursts = bursts_over(12.0)
    clip = mux_clip(tmp_path / "face.mp4", pictures, 25, tone_bursts(12.0, bursts))
    source = f"sources=[{{id: clip, uri: '{clip}', audio: {{uri: self}}}}]"
    done = run_cli(
        "run", "-c", LIPSYNC, "--no-progress", "--set", source,
        "--set", f"model.path={media / 'generator.onnx'}", "--set", outputs(tmp_path, "clip"), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    records = read_jsonl(tmp_path / "clip.jsonl")
    assert [r["pts"] for r in records] == video_pts(clip)
    with VideoReader("c", str(clip)) as reader:
        decoded = [f.image for f in reader.frames()]
    offsets = assert_in_sync(brightening(tmp_path / "clip.mp4", decoded), bursts, Fraction(25))
    assert_audio_unshifted(tmp_path / "clip.mp4", bursts)
    print(f"muxed clip sync, (first, last) frame offsets per burst: {offsets}")


def test_a_template_driven_by_live_audio_comes_out_in_real_time(media: Path, template: tuple[list[np.ndarray], Fraction], tmp_path: Path) -> None:
    """The talking-avatar server: audio pushed over ZeroMQ as it is spoken (20 ms chunks at their
    pace, on the producer's clock), the template's frames come out as it arrives, in sync, and the
    file is as long as the audio."""
    frames, fps = template
    seconds, base_us = 8.0, 3_000_000
    bursts = bursts_over(seconds, every=2.0)
    samples = tone_bursts(seconds, bursts)
    port, http = free_port(), free_port()
    source = (
        f"sources=[{{id: avatar, uri: '{VIDEOS / 'carphone_pristine.mp4'}', template: pingpong, "
        f"audio: {{uri: 'zmq+tcp://127.0.0.1:{port}', missing: {{policy: wait, wait_ms: 300}}}}}}]"
    )
    result: dict[str, object] = {}
    job = threading.Thread(
        target=lambda: result.update(done=run_cli(
            "run", "-c", LIPSYNC, "--no-progress", "--set", source,
            "--set", f"model.path={media / 'generator.onnx'}", "--set", outputs(tmp_path, "avatar"),
            "--set", "http.enabled=true", "--set", f"http.port={http}", timeout=120,
        ))
    )  # fmt: skip
    job.start()
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    http_ready(http, job)  # the daemon is up: "real time" is measured from here
    started = time.monotonic()
    chunk = RATE // 50
    for n, at in enumerate(range(0, samples.size, chunk)):
        delay = started + n * 0.02 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        header = {"rate": RATE, "format": "s16le", "pts": base_us + round(at * 1_000_000 / RATE)}
        push.send_multipart([json.dumps(header).encode(), (samples[at : at + chunk] * 32767).astype("<i2").tobytes()])
    push.send_multipart([b'{"eos": true}'])
    job.join(60)
    elapsed = time.monotonic() - started
    push.close(linger=0)
    ctx.term()
    done = result["done"]
    assert done.returncode == 0, done.stderr[-2000:]  # type: ignore[attr-defined]
    records = read_jsonl(tmp_path / "avatar.jsonl")
    assert len(records) == int(np.ceil(seconds * fps))
    assert records[0]["time"] == pytest.approx(base_us / 1e6, abs=1e-4)  # on the audio's clock
    assert elapsed < seconds + 5.0  # frames came as the audio did, not after it all
    assert audio_duration_s(tmp_path / "avatar.mp4") == pytest.approx(seconds + 1024 / RATE, abs=0.05)
    offsets = assert_in_sync(brightening(tmp_path / "avatar.mp4", pingpong(frames, len(records))), bursts, fps)
    print(f"live template sync, (first, last) frame offsets per burst: {offsets}")
