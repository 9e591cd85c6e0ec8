"""Fragmented MP4 recordings scanned, cut back to whole fragments and appended to (a resumed job)."""

from __future__ import annotations

from pathlib import Path

import av
import pytest

from framewire.media import fragments
from framewire.media.video_reader import DecodedFrame, VideoReader
from framewire.media.video_writer import VideoFileWriter
from framewire.pipeline.errors import FramewireError
from tests.support import clips

pytestmark = pytest.mark.timeout(60)


def decoded(clip: Path) -> tuple[VideoReader, list[DecodedFrame]]:
    with VideoReader("t", str(clip)) as reader:
        return reader, list(reader.frames())


def record(path: Path, reader: VideoReader, frames: list[DecodedFrame], *, append: bool = False, **kwargs: object) -> None:
    writer = VideoFileWriter(str(path), reader.info, container="fmp4", preset="ultrafast", append=append, **kwargs)  # type: ignore[arg-type]
    writer.open()
    for frame in frames:
        writer.write(frame.image, frame.pts)
    writer.close()


def pts_of(path: Path) -> list[int]:
    with av.open(str(path)) as container:
        return [f.pts for f in container.decode(video=0)]


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Key frames only where the writer puts them (every fragment_s): a flat picture has no scene cuts.
    return clips.make_clip(tmp_path_factory.mktemp("clip") / "in.mp4", frames=100, pattern="flat")


def test_scan_counts_the_frames_of_each_complete_fragment(tmp_path: Path, clip: Path) -> None:
    reader, frames = decoded(clip)
    out = tmp_path / "out.mp4"
    record(out, reader, frames[:60])
    found = fragments.scan(str(out))
    assert found is not None and found.video is not None
    assert [f.samples[found.video.track_id] for f in found.fragments] == [25, 25, 10]
    assert found.frames() == 60 and found.boundary(59) == (50, 2) and found.boundary(25) == (25, 1)
    assert [f.sequence for f in found.fragments] == [1, 2, 3]
    assert found.video.timescale == reader.info.time_base.denominator  # the clip's own clock
    assert found.decode_end(2)[found.video.track_id] == frames[50].pts  # where the next fragment starts


@pytest.mark.parametrize("torn", [1, 9, 300, -1])
def test_a_torn_last_fragment_is_left_out_and_cut_away(tmp_path: Path, clip: Path, torn: int) -> None:
    """A SIGKILL mid-write leaves part of a moof or mdat: the fragments before it are what the file holds."""
    reader, frames = decoded(clip)
    out = tmp_path / "out.mp4"
    record(out, reader, frames[:75])
    whole = fragments.scan(str(out))
    assert whole is not None and len(whole.fragments) == 3
    last = whole.fragments[-1]
    end = last.start + torn if torn > 0 else last.end - 1
    with open(out, "r+b") as file:
        file.truncate(end)
    found = fragments.scan(str(out))
    assert found is not None and found.frames() == 50 and found.end_of(2) == last.start
    fragments.cut(str(out), found.end_of(2))
    assert clips.count_frames(out) == 50


def test_a_file_without_its_index_is_not_a_recording(tmp_path: Path) -> None:
    (tmp_path / "torn.mp4").write_bytes(b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2\x00\x00\x01")
    assert fragments.scan(str(tmp_path / "torn.mp4")) is None
    assert fragments.scan(str(tmp_path / "absent.mp4")) is None


def test_appending_goes_on_with_the_same_timestamps_and_plays_through(tmp_path: Path, clip: Path) -> None:
    reader, frames = decoded(clip)
    out = tmp_path / "out.mp4"
    record(out, reader, frames[:60])
    found = fragments.scan(str(out))
    assert found is not None
    held, count = found.boundary(60 - 1)
    assert held == 50
    fragments.cut(str(out), found.end_of(count))
    record(out, reader, frames[held:], append=True)
    assert pts_of(out) == [f.pts for f in frames]  # every frame once, in order, with its own time
    after = fragments.scan(str(out))
    assert after is not None and [f.sequence for f in after.fragments] == [1, 2, 3, 4]
    with av.open(str(out)) as container:  # one track, as before: nothing of the second init segment
        assert len(container.streams) == 1


def test_appending_with_other_encoder_settings_is_refused(tmp_path: Path, clip: Path) -> None:
    reader, frames = decoded(clip)
    out = tmp_path / "out.mp4"
    record(out, reader, frames[:50])
    size = out.stat().st_size
    with pytest.raises(FramewireError, match="cannot resume: its vide track differs"):
        record(out, reader, frames[50:], append=True, crf=40)
    found = fragments.scan(str(out))
    assert found is not None and found.frames() == 50 and clips.count_frames(out) == 50
    assert out.stat().st_size <= size


def test_appending_keeps_the_audio_going(tmp_path: Path) -> None:
    clip = clips.make_clip(tmp_path / "in.mp4", frames=100, pattern="flat", audio=True)
    reader, frames = decoded(clip)
    out = tmp_path / "out.mp4"
    record(out, reader, frames[:75], audio_from=str(clip))
    found = fragments.scan(str(out))
    assert found is not None
    fragments.cut(str(out), found.end_of(2))
    record(out, reader, frames[50:], append=True, audio_from=str(clip))
    assert pts_of(out) == [f.pts for f in frames]
    with av.open(str(out)) as container:
        packets = [(p.pts, p.duration) for p in container.demux(audio=0) if p.pts is not None]
    assert all(a + d == b for (a, d), (b, _) in zip(packets, packets[1:], strict=False))  # no gap, no overlap
    assert clips.audio_duration_s(out) == pytest.approx(clips.audio_duration_s(clip), abs=0.05)
