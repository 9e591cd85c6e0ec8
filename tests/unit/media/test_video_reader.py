"""VideoReader on the shipped clips and on generated ones: counts, pts, pixels, and every way to fail."""

from __future__ import annotations

import json
from fractions import Fraction
from itertools import pairwise
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from framewire.media.video_reader import DecodedFrame, StreamInfo, VideoReader, next_pts, to_bgr
from framewire.pipeline.errors import SourceError
from framewire.pipeline.uris import local_path, redact
from framewire.sources.file import FileSource
from tests.support import clips

pytestmark = pytest.mark.timeout(60)

VIDEOS = Path(__file__).resolve().parents[3] / "assets" / "videos"

# name, frames, width, height, fps, audio codec
SHIPPED = [
    ("bikes.mp4", 250, 640, 272, Fraction(25), None),
    ("carphone_pristine.mp4", 120, 176, 144, Fraction(30000, 1001), None),
    ("bigbuckbunny.mp4", 132, 1280, 720, Fraction(25), "aac"),
]

# file name, make_clip arguments
GENERATED = [
    ("h264.mp4", {}),
    ("mpeg4.avi", {"codec": "mpeg4"}),
    ("h264.mkv", {}),
    ("mjpeg.mov", {"codec": "mjpeg"}),
    ("mjpeg_odd.avi", {"codec": "mjpeg", "width": 175, "height": 143}),
    ("h264_odd.mp4", {"width": 175, "height": 143}),
    ("mpeg4_odd.avi", {"codec": "mpeg4", "width": 175, "height": 143}),
    ("h264_audio.mp4", {"audio": True}),
    ("mpeg4_pcm.avi", {"codec": "mpeg4", "audio": True}),
    ("mpeg4_mp3.avi", {"codec": "mpeg4", "audio": True, "audio_codec": "libmp3lame"}),
    ("h264_audio.mkv", {"audio": True}),
]


def read_all(source_id: str, uri: str) -> tuple[StreamInfo, list[DecodedFrame]]:
    with VideoReader(source_id, uri) as reader:
        return reader.info, list(reader.frames())


def assert_well_formed(info: StreamInfo, frames: list[DecodedFrame]) -> None:
    pts = [frame.pts for frame in frames]
    assert all(b > a for a, b in pairwise(pts)), pts
    assert [frame.index for frame in frames] == list(range(len(frames)))
    for frame in frames[:3] + frames[-2:]:
        assert frame.image.shape == (info.height, info.width, 3)
        assert frame.image.dtype == np.uint8
        assert frame.image.flags.c_contiguous
    # Exactly the float of pts * time_base: the reader divides ints instead of making a Fraction.
    assert [frame.time_s for frame in frames] == [float(frame.pts * info.time_base) for frame in frames]


@pytest.mark.parametrize(("name", "count", "width", "height", "fps", "audio"), SHIPPED)
def test_shipped_clip_yields_every_frame(
    name: str, count: int, width: int, height: int, fps: Fraction, audio: str | None
) -> None:
    info, frames = read_all("cam", str(VIDEOS / name))
    assert (info.width, info.height, info.fps, info.frame_count) == (width, height, fps, count)
    assert (info.has_audio, info.audio_codec, info.is_file) == (audio is not None, audio, True)
    assert info.duration_s == pytest.approx(count / fps, abs=0.05)
    assert len(frames) == count
    assert_well_formed(info, frames)


@pytest.mark.parametrize(("name", "kwargs"), GENERATED, ids=[name for name, _ in GENERATED])
def test_generated_clip_yields_every_frame(tmp_path: Path, name: str, kwargs: dict[str, Any]) -> None:
    path = clips.make_clip(tmp_path / name, frames=30, **kwargs)
    info, frames = read_all("gen", str(path))
    width, height = kwargs.get("width", 160), kwargs.get("height", 120)
    assert (info.width, info.height, info.fps) == (width, height, Fraction(25))
    assert info.frame_count in (30, None)  # Matroska does not store a count
    assert info.has_audio is bool(kwargs.get("audio"))
    assert len(frames) == 30 == clips.count_frames(path)
    assert_well_formed(info, frames)
    # Pixels match what was drawn (lossy codecs, so on average), which also pins the BGR order.
    for frame in frames[::10]:
        drawn = clips.draw_frame(frame.index, info.width, info.height)
        assert np.abs(frame.image.astype(np.int16) - drawn).mean() < 5


def test_file_uri_reads_like_a_path(tmp_path: Path) -> None:
    path = clips.make_clip(tmp_path / "with space.mp4", frames=5)
    info, frames = read_all("uri", path.as_uri())
    assert info.is_file and len(frames) == 5


def test_frames_without_pts_get_strictly_increasing_ones(tmp_path: Path) -> None:
    path = clips.make_clip(tmp_path / "raw.h264", frames=12)
    assert clips.video_pts(path)[0] is None  # the premise: a raw stream carries no timestamps
    info, frames = read_all("raw", str(path))
    step = info.frame_duration
    assert [frame.pts for frame in frames] == [i * step for i in range(12)]
    assert frames[1].time_s == pytest.approx(1 / 25)


def test_next_pts_keeps_good_pts_and_repairs_bad_ones() -> None:
    assert next_pts(None, None, 512) == 0
    assert next_pts(7, None, 512) == 7
    assert next_pts(2048, 1024, 512) == 2048
    assert next_pts(None, 1024, 512) == 1536
    assert next_pts(1024, 1024, 512) == 1536  # repeated pts
    assert next_pts(0, 1024, 512) == 1536  # going back


def test_fast_bgr_conversion_matches_libswscale() -> None:
    with av.open(str(VIDEOS / "bikes.mp4")) as container:
        frame = next(container.decode(video=0))
        fast = to_bgr(frame)
        reference = frame.to_ndarray(format="bgr24")
    diff = np.abs(fast.astype(np.int16) - reference)
    assert diff.mean() < 2 and diff.max() <= 6


def test_stream_info_survives_json() -> None:
    info = StreamInfo(
        source_id="cam", uri="rtsp://***@host/s", width=176, height=144, fps=Fraction(30000, 1001),
        time_base=Fraction(1, 30000), frame_count=None, duration_s=4.004, has_audio=True,
        audio_codec="aac", is_file=False,
    )
    data = json.loads(json.dumps(info.to_dict()))
    assert data["fps"] == "30000/1001" and data["time_base"] == "1/30000"
    assert StreamInfo.from_dict(data) == info
    assert info.frame_duration == 1001


def test_stream_info_from_dict_names_missing_key() -> None:
    data = StreamInfo("a", "x.mp4", 2, 2, Fraction(25), Fraction(1, 25), 1, 0.04, False, None, True).to_dict()
    del data["time_base"]
    with pytest.raises(ValueError, match="time_base"):
        StreamInfo.from_dict(data)


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("rtsp://admin:s3cret@10.0.0.1:554/live?ch=1", "rtsp://***@10.0.0.1:554/live?ch=1"),
        ("rtsp://admin:p@ss/word@cam.local/live", "rtsp://***@cam.local/live"),
        ("http://token@example.com/v.mp4", "http://***@example.com/v.mp4"),
        ("rtsp://10.0.0.1/live", "rtsp://10.0.0.1/live"),
        ("/videos/a@b.mp4", "/videos/a@b.mp4"),
        ("file:///videos/a.mp4", "file:///videos/a.mp4"),
    ],
)
def test_redact_hides_credentials(uri: str, shown: str) -> None:
    assert redact(uri) == shown


def test_local_path() -> None:
    assert local_path("clips/a.mp4") == "clips/a.mp4"
    assert local_path("file:///tmp/a%20b.mp4") == "/tmp/a b.mp4"
    assert local_path("rtsp://host/live") is None


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"source cam7: file not found: .*nope\.mp4"):
        VideoReader("cam7", str(tmp_path / "nope.mp4")).open()


def test_text_file_named_mp4(tmp_path: Path) -> None:
    path = tmp_path / "notes.mp4"
    path.write_text("not a video\n" * 100)
    with pytest.raises(SourceError, match=r"source cam7: cannot open .*notes\.mp4") as caught:
        VideoReader("cam7", str(path)).open()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("suffix", [".txt", ".nfo", ".asc"])
def test_a_text_file_is_not_a_video_though_ffmpeg_draws_it(tmp_path: Path, suffix: str) -> None:
    """FFmpeg's tty demuxer reads these suffixes as text to draw (54 frames of letters, once)."""
    path = tmp_path / f"notes{suffix}"
    path.write_text("these are not the frames you are looking for\n" * 100)
    with av.open(str(path)) as container:  # what FFmpeg alone makes of it
        assert container.format.name == "tty" and container.streams.video[0].codec_context.name == "ansi"
    expected = f"source cam7: not a video: {path} (text, which FFmpeg's tty demuxer would draw as frames)"
    with pytest.raises(SourceError) as opened:
        VideoReader("cam7", str(path)).open()
    with pytest.raises(SourceError) as checked:
        VideoReader("cam7", str(path)).check()
    assert str(opened.value) == str(checked.value) == expected


def test_check_opens_and_closes_without_reading(tmp_path: Path) -> None:
    clip = clips.make_clip(tmp_path / "c.mp4", frames=5)
    reader = VideoReader("cam7", str(clip))
    reader.check()
    with pytest.raises(SourceError, match="not open"):
        reader.info  # noqa: B018 - check() describes nothing
    with pytest.raises(SourceError, match=r"^source cam7: is not a file: /dev/null$"):
        VideoReader("cam7", "/dev/null").check()
    with pytest.raises(SourceError, match=rf"^source cam7: is a directory: {tmp_path}$"):
        VideoReader("cam7", str(tmp_path)).check()


def test_file_without_video(tmp_path: Path) -> None:
    path = clips.make_audio_only(tmp_path / "tone.m4a")
    with pytest.raises(SourceError, match=r"source cam7: no video stream in .*tone\.m4a"):
        VideoReader("cam7", str(path)).open()


def test_error_message_hides_credentials() -> None:
    with pytest.raises(SourceError, match="source cam7") as caught:
        VideoReader("cam7", "nosuchproto://admin:s3cret@10.0.0.1/live").open()
    assert "s3cret" not in str(caught.value)
    assert "***@10.0.0.1" in str(caught.value)


def test_mp4_truncated_before_its_index_fails_to_open(tmp_path: Path) -> None:
    # A default MP4 keeps its index (moov) at the end: a cut-short copy cannot be opened at all.
    source = clips.make_clip(tmp_path / "full.mp4", frames=40)
    cut = clips.make_truncated_copy(source, tmp_path / "cut.mp4")
    with pytest.raises(SourceError, match=r"source cam7: cannot open .*cut\.mp4"):
        VideoReader("cam7", str(cut)).open()


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("faststart.mp4", {"faststart": True}), ("mpeg4.avi", {"codec": "mpeg4"}), ("h264.mkv", {})],
)
def test_truncated_file_yields_what_it_can_then_fails(
    tmp_path: Path, name: str, kwargs: dict[str, Any]
) -> None:
    source = clips.make_clip(tmp_path / name, frames=50, **kwargs)
    cut = clips.make_truncated_copy(source, tmp_path / f"cut_{name}")
    reader = VideoReader("cam7", str(cut))
    reader.open()
    got: list[DecodedFrame] = []
    with pytest.raises(SourceError, match=r"source cam7: truncated: decoded \d+ "):
        for frame in reader.frames():
            got.append(frame)
    reader.close()
    assert 0 < len(got) < 50


@pytest.mark.parametrize(("name", "codec"), [("h264.mp4", "h264"), ("mpeg4.avi", "mpeg4")])
def test_corrupt_file_fails(tmp_path: Path, name: str, codec: str) -> None:
    source = clips.make_clip(tmp_path / name, codec=codec, frames=50)
    bad = clips.make_corrupt_copy(source, tmp_path / f"bad_{name}")
    with (
        pytest.raises(SourceError, match=r"source cam7: (decode error at frame \d+|truncated)"),
        VideoReader("cam7", str(bad)) as reader,
    ):
        for _ in reader.frames():
            pass


def test_reader_lifecycle(tmp_path: Path) -> None:
    reader = VideoReader("cam7", str(clips.make_clip(tmp_path / "a.mp4", frames=3)))
    with pytest.raises(SourceError, match="cam7: not open"):
        reader.frames().__next__()
    reader.open()
    assert len(list(reader.frames())) == 3
    with pytest.raises(SourceError, match="cam7: frames\\(\\) is read once"):
        next(reader.frames())
    reader.close()
    reader.close()


def test_file_source_speaks_the_decode_worker_protocol(tmp_path: Path) -> None:
    path = clips.make_clip(tmp_path / "a.mkv", frames=4, audio=True)
    source = FileSource("cam7", path.as_uri())
    info = source.open()
    assert json.loads(json.dumps(info)) == info
    assert info["path"] == str(path) and info["source_id"] == "cam7" and info["has_audio"] is True
    assert StreamInfo.from_dict(info).width == 160
    frames = list(source.frames())
    source.close()
    assert [pts for _, pts, _ in frames] == [0, 40, 80, 120]
    assert [time_s for _, _, time_s in frames] == pytest.approx([0, 0.04, 0.08, 0.12])
    assert frames[0][0].shape == (120, 160, 3)
