"""Where a resumed file source goes on: the JSONL and the recording agree, both cut back, and the
reader starts at that frame (by seeking where the pts allow, else by decoding the frames before)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framewire.media import fragments
from framewire.media.video_reader import VideoReader
from framewire.media.video_writer import VideoFileWriter
from framewire.sources.file import FileSource
from framewire.sources.resume import ResumeTargets, read_jsonl, recover
from tests.support import clips

pytestmark = pytest.mark.timeout(60)


def lines(path: Path, frames: range, pts_step: int = 512, *, events: bool = False) -> None:
    with path.open("w") as file:
        for seq in frames:
            file.write(json.dumps({"v": 2, "source": "c", "seq": seq, "pts": seq * pts_step}) + "\n")
            if events and seq % 10 == 9:
                file.write(json.dumps({"v": 2, "source": "c", "event": "segment"}) + "\n")


def seqs(path: Path) -> list[int]:
    return [r["seq"] for r in map(json.loads, path.read_text().splitlines()) if "seq" in r]


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clips.make_clip(tmp_path_factory.mktemp("clip") / "in.mp4", frames=100, pattern="flat")


def recording(path: Path, clip: Path, frames: int) -> None:
    with VideoReader("c", str(clip)) as reader:
        writer = VideoFileWriter(str(path), reader.info, container="fmp4", preset="ultrafast")
        writer.open()
        for frame, _ in zip(reader.frames(), range(frames), strict=False):
            writer.write(frame.image, frame.pts)
        writer.close()


def test_a_torn_last_line_is_dropped_and_events_kept(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    lines(path, range(30), events=True)
    with path.open("a") as file:
        file.write('{"v":2,"source":"c","seq":30,"pts":15')  # killed mid-line
    held = read_jsonl(str(path))
    assert held.frames == 30 and held.pts[-1] == 29 * 512
    assert held.end_of(30) == len(path.read_text()) - len('{"v":2,"source":"c","seq":30,"pts":15')
    assert path.read_text()[: held.end_of(25)].splitlines()[-1].endswith('"seq": 24, "pts": 12288}')


def test_records_out_of_order_end_what_is_held(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    lines(path, range(10))
    with path.open("a") as file:
        file.write(json.dumps({"seq": 12, "pts": 0}) + "\n")
    assert read_jsonl(str(path)).frames == 10
    assert read_jsonl(str(tmp_path / "absent.jsonl")).frames == 0


def test_the_outputs_agree_on_the_last_whole_fragment(tmp_path: Path, clip: Path) -> None:
    """JSONL ahead of the recording (its last fragment was still being encoded): both end at 50."""
    jsonl, video = tmp_path / "c.jsonl", tmp_path / "c.mp4"
    lines(jsonl, range(68))
    recording(video, clip, 60)  # fragments of 25, 25, 10: the JSONL has 68
    point = recover("c", ResumeTargets((str(jsonl),), (str(video),)))
    assert point.frame == 60 and point.after_pts == 59 * 512
    assert seqs(jsonl) == list(range(60)) and clips.count_frames(video) == 60
    lines(jsonl, range(55))  # now the JSONL is behind: the recording goes back to the fragment before
    point = recover("c", ResumeTargets((str(jsonl),), (str(video),)))
    assert point.frame == 50 and seqs(jsonl) == list(range(50)) and clips.count_frames(video) == 50


def test_a_recording_without_a_whole_fragment_starts_everything_over(tmp_path: Path, clip: Path) -> None:
    jsonl, video = tmp_path / "c.jsonl", tmp_path / "c.mp4"
    lines(jsonl, range(20))
    (tmp_path / "c.mp4.part").write_bytes(b"\x00\x00\x00\x08free")
    point = recover("c", ResumeTargets((str(jsonl),), (str(video),)))
    assert point.frame == 0 and jsonl.read_text() == "" and not (tmp_path / "c.mp4.part").exists()
    assert recover("c", ResumeTargets()).frame == 0  # no file output: nothing to go on from


@pytest.mark.parametrize("with_pts", [True, False], ids=["seek", "decode-and-drop"])
def test_the_reader_starts_at_the_frame(clip: Path, with_pts: bool) -> None:
    with VideoReader("c", str(clip)) as reader:
        everything = [(f.pts, f.index) for f in reader.frames()]
    with VideoReader("c", str(clip)) as reader:
        reader.resume_at(60, everything[59][0] if with_pts else None)
        rest = [(f.pts, f.index) for f in reader.frames()]  # and no "truncated" error: 100 in all
    assert rest == everything[60:]


def test_a_seek_that_cannot_be_trusted_falls_back_to_decoding(tmp_path: Path) -> None:
    """A raw H.264 stream has no pts: the frames before are decoded and dropped instead."""
    raw = clips.make_clip(tmp_path / "in.h264", frames=40)
    with VideoReader("c", str(raw)) as reader:
        everything = [(f.pts, f.index) for f in reader.frames()]
    with VideoReader("c", str(raw)) as reader:
        reader.resume_at(25, everything[24][0])
        assert [(f.pts, f.index) for f in reader.frames()] == everything[25:]


def test_a_resumed_file_source_says_where_it_starts(tmp_path: Path, clip: Path) -> None:
    jsonl, video = tmp_path / "c.jsonl", tmp_path / "c.mp4"
    lines(jsonl, range(78))
    recording(video, clip, 80)
    source = FileSource("c", str(clip), resume=ResumeTargets((str(jsonl),), (str(video),)))
    info = source.open()
    try:
        assert info["first_seq"] == 75
        assert sum(1 for _ in source.frames()) == 25
    finally:
        source.close()
    found = fragments.scan(str(video))
    assert found is not None and found.frames() == 75
