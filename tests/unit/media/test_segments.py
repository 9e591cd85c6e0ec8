"""Crash-safe recordings: fragmented MP4 that plays after a SIGKILL, segments, numbering, retention."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import av
import pytest

from framewire.media.segments import Recording, Retention, Segment
from framewire.media.video_reader import StreamInfo, VideoReader
from framewire.media.video_writer import VideoFileWriter
from framewire.pipeline import paths
from tests.support import clips

pytestmark = pytest.mark.timeout(120)

VIDEOS = Path(__file__).resolve().parents[3] / "assets" / "videos"


def info_for(width: int = 160, height: int = 120, fps: int = 25) -> StreamInfo:
    return StreamInfo(
        source_id="t", uri="t.mp4", width=width, height=height, fps=Fraction(fps), time_base=Fraction(1, fps),
        frame_count=None, duration_s=None, has_audio=False, audio_codec=None, is_file=True,
    )


def seconds(path: Path) -> list[float]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.time_base is not None
        return [float(frame.pts * stream.time_base) for frame in container.decode(stream)]


@pytest.mark.parametrize("name", ["bigbuckbunny.mp4", "bikes.mp4"])
def test_fragmented_mp4_keeps_frames_timestamps_and_audio(tmp_path: Path, name: str) -> None:
    source, out = VIDEOS / name, tmp_path / name
    with VideoReader("rt", str(source)) as reader:
        writer = VideoFileWriter(str(out), reader.info, preset="ultrafast", audio_from=str(source), container="fmp4")
        writer.open()
        times = []
        for frame in reader.frames():
            writer.write(frame.image, frame.pts)
            times.append(float(frame.pts * reader.info.time_base))
        writer.close()
    assert seconds(out) == pytest.approx(times, abs=1e-3)
    if clips.has_audio(source):
        assert clips.audio_duration_s(out) == pytest.approx(clips.audio_duration_s(source), abs=0.1)


def test_fragmented_mp4_keeps_a_late_start() -> None:
    # Without an index at the end there is no edit list: the muxer's flags keep the first pts.
    info = info_for()
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"late-{os.getpid()}.mp4"
    try:
        with VideoFileWriter(str(out), info, container="fmp4") as writer:
            for i in range(30):
                writer.write(clips.draw_frame(i, 160, 120), 100 + i)
        assert seconds(out) == pytest.approx([(100 + i) / 25 for i in range(30)], abs=1e-3)
    finally:
        out.unlink(missing_ok=True)


KILLED = """
import os, signal, sys
sys.path.insert(0, {root!r})
from fractions import Fraction
from framewire.media.video_reader import StreamInfo
from framewire.media.video_writer import VideoFileWriter
from tests.support import clips
info = StreamInfo(source_id="t", uri="t", width=320, height=240, fps=Fraction(25), time_base=Fraction(1, 25),
                  frame_count=None, duration_s=None, has_audio=False, audio_codec=None, is_file=True)
writer = VideoFileWriter({path!r}, info, container={container!r}, fragment_s=1.0, preset="veryfast")
writer.open()
for i in range({frames}):
    writer.write(clips.draw_frame(i, 320, 240, "noise"), i)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize(("container", "playable"), [("fmp4", True), ("mp4", False)])
def test_sigkill_leaves_every_complete_fragment_playable(tmp_path: Path, container: str, playable: bool) -> None:
    path = tmp_path / "killed.mp4"
    root = str(Path(__file__).resolve().parents[3])
    script = KILLED.format(root=root, path=str(path), container=container, frames=130)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    if not playable:  # the classic MP4's index never got written
        with pytest.raises(av.error.InvalidDataError):
            clips.count_frames(path)
        return
    times = seconds(path)
    # Fragments of 1 s (25 frames): 130 frames written, the last fragment and the encoder's
    # look-ahead lost at most; what is there is the start of the recording, in order.
    assert 100 <= len(times) < 130
    assert times == pytest.approx([i / 25 for i in range(len(times))], abs=1e-3)


def recording(tmp_path: Path, template: str, announced: list[Segment], **kwargs: object) -> Recording:
    info = info_for()
    return Recording(
        str(tmp_path / template), "cam",
        lambda path, start_s, first: VideoFileWriter(path, info, preset="ultrafast", container="fmp4"),
        time_base=info.time_base, fps=info.fps, on_segment=announced.append, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def test_segments_rotate_on_media_time_and_are_announced(tmp_path: Path) -> None:
    announced: list[Segment] = []
    rec = recording(tmp_path, "{source_id}/{index:03d}.mp4", announced, segment_s=2.0)
    for i in range(125):  # 5 s at 25 fps
        rec.write(clips.draw_frame(i, 160, 120), i, read_at=1_700_000_000.0 + i / 25)
    rec.close()
    rec.close()
    assert [(s.index, s.frames, s.first_pts) for s in announced] == [(0, 50, 0), (1, 50, 50), (2, 25, 100)]
    assert [Path(s.path).name for s in announced] == ["000.mp4", "001.mp4", "002.mp4"]
    assert [s.duration_s for s in announced] == pytest.approx([2.0, 2.0, 1.0])
    assert all(s.bytes == Path(s.path).stat().st_size > 0 for s in announced)
    # Every frame once, at its own time, across the files.
    assert sum((seconds(Path(s.path)) for s in announced), []) == pytest.approx([i / 25 for i in range(125)], abs=1e-3)
    event = announced[1].event("cam", "output0.video_file")
    assert event["start"] == "2023-11-14T22:13:22.000000Z" and event["event"] == "segment"
    assert (event["frames"], event["index"], event["deleted"]) == (50, 1, [])


def test_a_restarted_recording_numbers_on_instead_of_writing_over(tmp_path: Path) -> None:
    for run in range(2):
        rec = recording(tmp_path, "{source_id}-{index}.mp4", [], segment_s=1.0)
        for i in range(50):
            rec.write(clips.draw_frame(i, 160, 120), i)
        rec.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cam-0.mp4", "cam-1.mp4", "cam-2.mp4", "cam-3.mp4"]


@pytest.mark.parametrize(
    ("retention", "kept"),
    [
        (Retention(keep_segments=2), ["cam-3.mp4", "cam-4.mp4"]),
        (Retention(keep_bytes=1), ["cam-4.mp4"]),  # the newest is kept whatever its size
        (Retention(keep_age_s=3600), ["cam-2.mp4", "cam-3.mp4", "cam-4.mp4"]),
    ],
    ids=["count", "bytes", "age"],
)
def test_retention_deletes_the_oldest_of_this_source(tmp_path: Path, retention: Retention, kept: list[str]) -> None:
    (tmp_path / "other-0.mp4").write_bytes(b"another source's file")
    (tmp_path / "cam-b-0.mp4").write_bytes(b"a source whose id starts the same")
    for index in range(2):  # from an earlier run, two hours old
        old = tmp_path / f"cam-{index}.mp4"
        old.write_bytes(b"x" * 1000)
        os.utime(old, (time.time() - 7200, time.time() - 7200))
    announced: list[Segment] = []
    rec = recording(tmp_path, "{source_id}-{index}.mp4", announced, segment_s=1.0, retention=retention)
    for i in range(75):
        rec.write(clips.draw_frame(i, 160, 120), i)
    rec.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, "cam-b-0.mp4", "other-0.mp4"])  # never another source's
    deleted = [Path(p).name for s in announced for p in s.deleted]
    assert sorted(deleted + kept) == [f"cam-{i}.mp4" for i in range(5)]


def test_segments_of_a_clip_with_audio_carry_their_own_audio(tmp_path: Path) -> None:
    source = VIDEOS / "bigbuckbunny.mp4"
    announced: list[Segment] = []
    with VideoReader("bbb", str(source)) as reader:
        info = reader.info
        opener = functools.partial(
            lambda path, start_s, first: VideoFileWriter(path, info, preset="ultrafast", audio_from=str(source),
                                                         container="fmp4", audio_start_s=None if first else start_s))  # fmt: skip
        rec = Recording(str(tmp_path / "{index}.mp4"), "bbb", opener, time_base=info.time_base, fps=info.fps,
                        segment_s=2.0, on_segment=announced.append)  # fmt: skip
        for frame in reader.frames():
            rec.write(frame.image, frame.pts)
        rec.close()
    assert [s.frames for s in announced] == [50, 50, 32]
    durations = [clips.audio_duration_s(Path(s.path)) for s in announced]
    assert sum(durations) == pytest.approx(clips.audio_duration_s(source), abs=0.15)
    assert durations[0] == pytest.approx(2.0, abs=0.1) and durations[1] == pytest.approx(2.0, abs=0.1)


def test_segments_of_a_clip_with_flac_audio_each_carry_aac(tmp_path: Path) -> None:
    source = clips.make_clip(tmp_path / "flac.mkv", frames=125, audio=True, audio_codec="flac")
    announced: list[Segment] = []
    with VideoReader("c", str(source)) as reader:
        info = reader.info
        opener = functools.partial(
            lambda path, start_s, first: VideoFileWriter(path, info, preset="ultrafast", audio_from=str(source),
                                                         container="fmp4", audio_start_s=None if first else start_s))  # fmt: skip
        rec = Recording(str(tmp_path / "out" / "{index}.mp4"), "c", opener, time_base=info.time_base, fps=info.fps,
                        segment_s=2.0, on_segment=announced.append)  # fmt: skip
        for frame in reader.frames():
            rec.write(frame.image, frame.pts)
        rec.close()
    assert [s.frames for s in announced] == [50, 50, 25]
    assert [clips.audio_codec(Path(s.path)) for s in announced] == ["aac", "aac", "aac"]
    durations = [clips.audio_duration_s(Path(s.path)) for s in announced]
    assert sum(durations) == pytest.approx(clips.audio_duration_s(source), abs=0.15)


def test_path_templates() -> None:
    start = 1_700_000_000.5
    assert paths.render("out/{source_id}/{start}-{index:04d}.mp4", "cam", 7, start) == "out/cam/20231114T221320Z-0007.mp4"
    assert paths.render("{start:%Y/%m/%d/%H%M%S}.mp4", "cam", 0, start) == "2023/11/14/221320.mp4"
    assert paths.pattern("out/[x]/{source_id}-{index:03d}-{start:%H}.mp4", "c*m") == "out/[[]x]/c[*]m-*-*.mp4"
    at = "20260102T030405Z"
    found = [f"out/cam-001-{at}.mp4", f"out/cam-012-{at}.mp4", f"out/other-099-{at}.mp4", f"out/cam-abc-{at}.mp4",
             "out/cam-077-yesterday.mp4"]  # fmt: skip
    assert paths.last_index("out/{source_id}-{index:03d}-{start}.mp4", "cam", found) == 12
    assert paths.last_index("out/{source_id}.mp4", "cam", ["out/cam.mp4"]) is None
    ours = paths.regex("out/{source_id}-{start:%Y%m%d-%H%M%S}.mp4", "cam")
    assert ours.match("out/cam-20260102-030405.mp4") and not ours.match("out/cam-b-20260102-030405.mp4")
    assert paths.check("a/{source_id}{index}{start:%Y}") == {"source_id", "index", "start"}
    for bad in ("{nope}.mp4", "{index.real}.mp4", "{source_id!r}.mp4", "{x.mp4", "{index:%Y}.mp4"):
        with pytest.raises(ValueError):
            paths.check(bad)


def test_a_later_run_is_numbered_before_the_extension() -> None:
    assert paths.numbered("out/{source_id}.mp4", 2) == "out/{source_id}.2.mp4"
    assert paths.numbered("out.d/{source_id}", 3) == "out.d/{source_id}.3"
    assert paths.numbered("out/{source_id}/video.tar.gz", 2) == "out/{source_id}/video.tar.2.gz"
    assert paths.numbered("out/.hidden", 2) == "out/.hidden.2"
