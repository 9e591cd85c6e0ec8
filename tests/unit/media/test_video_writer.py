"""VideoFileWriter: a reader -> writer round trip keeps frame count, timestamps and audio."""

from __future__ import annotations

import itertools
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import pytest

from framewire.media.video_reader import StreamInfo, VideoReader
from framewire.media.video_writer import VideoFileWriter
from framewire.pipeline.errors import FramewireError
from tests.support import clips

pytestmark = pytest.mark.timeout(60)

VIDEOS = Path(__file__).resolve().parents[3] / "assets" / "videos"

# file name, make_clip arguments, audio codec expected in the output
GENERATED = [
    ("mpeg4.avi", {"codec": "mpeg4"}, None),
    ("mpeg4_pcm.avi", {"codec": "mpeg4", "audio": True}, "aac"),  # PCM is re-encoded
    ("mpeg4_mp3.avi", {"codec": "mpeg4", "audio": True, "audio_codec": "libmp3lame"}, "mp3"),  # copied
    ("h264.mkv", {}, None),
    ("h264_aac.mkv", {"audio": True}, "aac"),
    ("mjpeg.mov", {"codec": "mjpeg"}, None),
    ("mjpeg_odd.avi", {"codec": "mjpeg", "width": 175, "height": 143}, None),
    ("h264_odd_aac.mp4", {"width": 175, "height": 143, "audio": True}, "aac"),
    # FLAC and AC-3 mux into MP4 but QuickTime, Safari or Chrome refuse them: AAC; ALAC and Opus play.
    ("h264_flac.mkv", {"audio": True, "audio_codec": "flac"}, "aac"),
    ("h264_ac3.mkv", {"audio": True, "audio_codec": "ac3"}, "aac"),
    ("h264_alac.mov", {"audio": True, "audio_codec": "alac"}, "alac"),
    ("h264_opus.mkv", {"audio": True, "audio_codec": "libopus"}, "opus"),
    ("raw.h264", {}, None),  # no pts at all: the reader derives them
]


def round_trip(
    source: Path, out: Path, *, crf: int = 23, preset: str = "veryfast"
) -> tuple[StreamInfo, list[int]]:
    """Read `source` and write every frame to `out` with its pts; return the info and the pts."""
    pts: list[int] = []
    with VideoReader("rt", str(source)) as reader:
        writer = VideoFileWriter(str(out), reader.info, crf=crf, preset=preset, audio_from=str(source))
        writer.open()
        for frame in reader.frames():
            writer.write(frame.image, frame.pts)
            pts.append(frame.pts)
        writer.close()
        return reader.info, pts


def assert_same_timeline(info: StreamInfo, pts: list[int], out: Path) -> None:
    with av.open(str(out)) as container:
        stream = container.streams.video[0]
        out_tb = stream.time_base
        assert out_tb is not None
        assert stream.codec_context.name == "h264"
        assert stream.codec_context.pix_fmt == "yuv420p"
        assert stream.frames == len(pts)
        packets = sum(1 for packet in container.demux(stream) if packet.size)
    assert packets == len(pts)
    out_pts = clips.video_pts(out)
    assert len(out_pts) == len(pts)
    if out_tb == info.time_base:
        assert out_pts == pts
    else:  # the MP4 muxer picked a finer time_base: same times, within half a frame (exact in practice)
        half_frame = 0.5 / float(info.fps)
        for a, b in zip(pts, out_pts, strict=True):
            assert b is not None
            assert abs(float(a * info.time_base) - float(b * out_tb)) < half_frame


def assert_same_audio(source: Path, out: Path, codec: str | None) -> None:
    assert clips.has_audio(out) is clips.has_audio(source) is (codec is not None)
    if codec is not None:
        assert clips.audio_codec(out) in (codec, f"{codec}float")  # FFmpeg's mp3 decoder is mp3float
        assert clips.audio_duration_s(out) == pytest.approx(clips.audio_duration_s(source), abs=0.1)


@pytest.mark.parametrize(
    ("name", "audio"), [("bikes.mp4", None), ("carphone_pristine.mp4", None), ("bigbuckbunny.mp4", "aac")]
)
def test_shipped_clip_round_trip(tmp_path: Path, name: str, audio: str | None) -> None:
    source = VIDEOS / name
    out = tmp_path / "out" / name
    info, pts = round_trip(source, out, preset="ultrafast")
    assert len(pts) == info.frame_count
    assert_same_timeline(info, pts, out)
    assert_same_audio(source, out, audio)


@pytest.mark.parametrize(("name", "kwargs", "audio"), GENERATED, ids=[name for name, _, _ in GENERATED])
def test_generated_clip_round_trip(
    tmp_path: Path, name: str, kwargs: dict[str, Any], audio: str | None
) -> None:
    source = clips.make_clip(tmp_path / name, frames=30, **kwargs)
    out = tmp_path / "out.mp4"
    info, pts = round_trip(source, out)
    assert len(pts) == 30
    assert_same_timeline(info, pts, out)
    assert_same_audio(source, out, audio)


def test_odd_size_is_padded_with_its_edge_and_keeps_content(tmp_path: Path) -> None:
    source = clips.make_clip(tmp_path / "odd.avi", codec="mjpeg", width=175, height=143, frames=5)
    out = tmp_path / "odd.mp4"
    round_trip(source, out, crf=12)
    with av.open(str(out)) as container:
        images = [frame.to_ndarray(format="bgr24") for frame in container.decode(video=0)]
    assert images[0].shape == (144, 176, 3)
    drawn = clips.draw_frame(4, 175, 143)
    assert np.abs(images[4][:143, :175].astype(np.int16) - drawn).mean() < 5
    # The extra column and row repeat the last ones (up to compression).
    assert np.abs(images[4][:143, 175].astype(np.int16) - images[4][:143, 174]).mean() < 5
    assert np.abs(images[4][143, :175].astype(np.int16) - images[4][142, :175]).mean() < 5


def test_close_after_one_frame_leaves_a_playable_file(tmp_path: Path) -> None:
    source = VIDEOS / "bigbuckbunny.mp4"
    out = tmp_path / "deep" / "er" / "one.mp4"
    with VideoReader("one", str(source)) as reader:
        writer = VideoFileWriter(str(out), reader.info, preset="ultrafast", audio_from=str(source))
        writer.open()
        first = next(reader.frames())
        writer.write(first.image, first.pts)
        writer.close()
        writer.close()
    assert clips.video_pts(out) == [first.pts]
    # The rest of the audio is flushed on close even though the video stopped early.
    assert clips.audio_duration_s(out) == pytest.approx(clips.audio_duration_s(source), abs=0.1)


def test_the_encoder_runs_the_threads_it_is_given(tmp_path: Path) -> None:
    source = VIDEOS / "bikes.mp4"
    with VideoReader("one", str(source)) as reader:
        first = next(reader.frames())
        for threads in (1, 3):
            writer = VideoFileWriter(str(tmp_path / f"{threads}.mp4"), reader.info, preset="ultrafast", threads=threads)
            writer.open()
            writer.write(first.image, first.pts)
            assert writer._video is not None and writer._video.codec_context.thread_count == threads
            writer.close()
            assert clips.video_pts(tmp_path / f"{threads}.mp4") == [first.pts]


def test_close_without_open_is_harmless(tmp_path: Path) -> None:
    writer = VideoFileWriter(str(tmp_path / "never.mp4"), info_for(160, 120))
    writer.close()
    writer.close()
    assert not (tmp_path / "never.mp4").exists()


def test_audio_from_a_file_without_audio_gives_no_audio(tmp_path: Path) -> None:
    silent = clips.make_clip(tmp_path / "silent.mp4", frames=3)
    out = tmp_path / "out.mp4"
    with VideoFileWriter(str(out), info_for(160, 120), audio_from=str(silent)) as writer:
        writer.write(clips.draw_frame(0, 160, 120), 0)
    assert not clips.has_audio(out)


def test_unwritable_path_names_it(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    path = blocker / "sub" / "out.mp4"
    with pytest.raises(FramewireError, match=f"video_file output {path}: cannot create") as caught:
        VideoFileWriter(str(path), info_for(160, 120)).open()
    assert "\n" not in str(caught.value)


def test_bad_writes_are_refused(tmp_path: Path) -> None:
    writer = VideoFileWriter(str(tmp_path / "out.mp4"), info_for(160, 120))
    image = clips.draw_frame(0, 160, 120)
    with pytest.raises(FramewireError, match="before open"):
        writer.write(image, 0)
    writer.open()
    writer.write(image, 0)
    with pytest.raises(FramewireError, match="pts 0 after 0 is not increasing"):
        writer.write(image, 0)
    with pytest.raises(FramewireError, match=r"is \(120, 159, 3\) uint8, expected \(120, 160, 3\)"):
        writer.write(image[:, :159], 1)
    writer.close()
    with pytest.raises(FramewireError, match="after close"):
        writer.write(image, 2)
    assert clips.count_frames(tmp_path / "out.mp4") == 1


def info_for(width: int, height: int) -> StreamInfo:
    return StreamInfo(
        source_id="t", uri="t.mp4", width=width, height=height, fps=Fraction(25), time_base=Fraction(1, 25),
        frame_count=None, duration_s=None, has_audio=False, audio_codec=None, is_file=True,
    )


@pytest.mark.parametrize("rate", [16000, 50000])
def test_flac_audio_becomes_aac_at_a_rate_aac_has(tmp_path: Path, rate: int) -> None:
    """A template driven by a FLAC file (assets/audio/speech.flac, 16 kHz) records AAC, not FLAC:
    QuickTime and Safari refuse FLAC in an MP4. A rate AAC lacks is resampled to the next one up."""
    speech = Path(__file__).resolve().parents[3] / "assets" / "audio" / "speech.flac"
    if rate != 16000:
        speech = tmp_path / "speech.flac"
        with av.open(str(speech), "w") as out:
            stream = out.add_stream("flac", rate=rate, layout="mono")
            assert isinstance(stream, av.audio.stream.AudioStream)
            frame = av.AudioFrame.from_ndarray(np.zeros((1, rate), np.int16), format="s16", layout="mono")
            frame.sample_rate, frame.pts = rate, 0
            out.mux(stream.encode(frame))
            out.mux(stream.encode(None))
    video = clips.make_clip(tmp_path / "v.mp4", frames=10)
    out_path = tmp_path / "out.mp4"
    with VideoReader("t", str(video)) as reader:
        writer = VideoFileWriter(str(out_path), reader.info, preset="ultrafast", audio_from=str(speech))
        writer.open()
        for frame in reader.frames():
            writer.write(frame.image, frame.pts)
        writer.close()
    assert clips.audio_codec(speech) == "flac" and clips.audio_codec(out_path) == "aac"
    with av.open(str(out_path)) as container:
        assert container.streams.audio[0].codec_context.sample_rate == (16000 if rate == 16000 else 64000)
    assert clips.audio_duration_s(out_path) == pytest.approx(clips.audio_duration_s(speech), abs=0.1)


def _i420_frames(count: int) -> tuple[StreamInfo, list[np.ndarray], list[int]]:
    from framewire.media import yuv

    with VideoReader("yuv", str(VIDEOS / "bikes.mp4")) as reader:
        info = reader.info
        frames, pts = [], []
        for pending, p, _ in itertools.islice(reader.pending_frames(), count):
            planar = np.empty(yuv.shape(info.width, info.height), np.uint8)
            pending.write_into(planar)
            frames.append(planar)
            pts.append(p)
    return info, frames, pts


def _packets(path: Path) -> list[bytes]:
    with av.open(str(path)) as container:
        return [bytes(p) for p in container.demux(video=0) if p.size]


@pytest.mark.parametrize("threads", [1, 2])
def test_x264_is_handed_the_callers_memory_which_is_free_again_once_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    # A frame-pool slot goes back to its source once the output has written it: the encoder must
    # have taken the picture by then. One buffer, overwritten with noise right after each write,
    # gives the same stream as a fresh array a frame.
    info, frames, pts = _i420_frames(24)
    wrapped = []
    real = av.VideoFrame.from_numpy_buffer

    def from_numpy_buffer(array: np.ndarray, format: str = "rgb24", width: int = 0) -> av.VideoFrame:
        wrapped.append(array)
        return real(array, format=format, width=width)

    monkeypatch.setattr(av.VideoFrame, "from_numpy_buffer", staticmethod(from_numpy_buffer))
    noise = np.random.default_rng(0).integers(0, 256, frames[0].shape, dtype=np.uint8)
    slot = np.empty_like(frames[0])
    reused = VideoFileWriter(str(tmp_path / "reused.mp4"), info, preset="ultrafast", threads=threads)
    with reused:
        for planar, p in zip(frames, pts):
            np.copyto(slot, planar)
            reused.write(slot, p)
            np.copyto(slot, noise)
    assert len(wrapped) == len(frames) and all(a is slot for a in wrapped)

    monkeypatch.setattr("framewire.media.video_writer.COPIES_INPUT", frozenset())
    copied = VideoFileWriter(str(tmp_path / "copied.mp4"), info, preset="ultrafast", threads=threads)
    with copied:
        for planar, p in zip(frames, pts):
            copied.write(planar.copy(), p)
    assert len(wrapped) == len(frames)  # the copy path did not wrap
    assert _packets(tmp_path / "reused.mp4") == _packets(tmp_path / "copied.mp4")


def test_a_height_pyav_cannot_wrap_is_copied(tmp_path: Path) -> None:
    # 176x142: PyAV would read an I420 array of 213 rows as 140 rows high; such frames are copied.
    from framewire.media import yuv

    info = StreamInfo(
        source_id="odd", uri="odd", width=176, height=142, fps=Fraction(25), time_base=Fraction(1, 25),
        frame_count=3, duration_s=None, has_audio=False, audio_codec=None, is_file=True,
    )
    images = [clips.draw_frame(i, 176, 142) for i in range(3)]
    writer = VideoFileWriter(str(tmp_path / "odd.mp4"), info, preset="ultrafast", crf=12)
    with writer:
        for i, image in enumerate(images):
            planar = cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420)
            assert planar.shape == yuv.shape(176, 142)
            writer.write(planar, i)
    with av.open(str(tmp_path / "odd.mp4")) as container:
        decoded = [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]
    assert [d.shape for d in decoded] == [(142, 176, 3)] * 3
    assert np.abs(decoded[2].astype(np.int16) - images[2]).mean() < 5


def test_the_aac_of_an_mpeg_ts_source_is_copied_without_its_adts_headers(tmp_path: Path) -> None:
    """An SRT, UDP or HLS camera's AAC comes as ADTS, which MP4 refuses (the output failed at its
    first audio packet): it is copied with the AudioSpecificConfig instead, not re-encoded."""
    from tests.unit.sources.test_packets import ts_copy

    source = ts_copy(tmp_path / "cam.ts")
    out = tmp_path / "out" / "cam.mp4"
    _, pts = round_trip(source, out, preset="ultrafast")
    assert len(pts) == clips.count_frames(out) == 132  # an MPEG-TS file says no frame count
    assert_same_audio(VIDEOS / "bigbuckbunny.mp4", out, "aac")
