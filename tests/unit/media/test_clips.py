"""Event clips cut from the ring of a source's packets: pre- and post-roll, merging, the maximum length."""

from __future__ import annotations

from pathlib import Path

import av
import pytest

from framewire.media.clips import ClipCutter, PacketRing
from framewire.media.remux import header_of, init_segment
from tests.support import clips
from tests.unit.sources.test_packets import make_gop_clip

pytestmark = pytest.mark.timeout(120)


class Feed:
    """A real file's packets handed to a ring as the decode worker's would come (pipeline.wire.packets)."""

    def __init__(self, path: Path, ring: PacketRing) -> None:
        self.container = av.open(str(path))
        self.streams = [self.container.streams.video[0], *self.container.streams.audio[:1]]
        ring.streams(init_segment(self.streams))
        self.packets = [p for p in self.container.demux(*self.streams) if p.size and p.dts is not None]
        self.ring = ring
        self.at = 0

    def until(self, time_s: float) -> None:
        while self.at < len(self.packets):
            packet = self.packets[self.at]
            if float(packet.dts * packet.time_base) > time_s:
                return
            self.ring.add(header_of(str(packet.stream.type), packet), bytes(packet))
            self.at += 1


def cutter_for(tmp_path: Path, seconds: int = 20, **roll: float) -> tuple[ClipCutter, Feed]:
    src = make_gop_clip(tmp_path / "src.mp4", frames=25 * seconds)
    ring = PacketRing(10.0, 64 << 20)
    names = iter(range(100))
    cutter = ClipCutter(
        "cam",
        ring,
        pre_s=roll.get("pre", 3.0),
        post_s=roll.get("post", 2.0),
        max_s=roll.get("max", 30.0),
        name=lambda start: str(tmp_path / f"clip-{next(names)}.mp4"),
    )
    return cutter, Feed(src, ring)


def run(cutter: ClipCutter, feed: Feed, events: list[float], until: float, lag: float = 0.5) -> list:
    """Packets arrive `lag` seconds ahead of the frames (the model's latency); events come with frames."""
    closed = []
    t = 0.0
    while t <= until:
        feed.until(t + lag)
        closed += cutter.packets_arrived()
        while events and events[0] <= t:
            cutter.event(events[0], events.pop(0))
        closed += cutter.frame(t)
        t = round(t + 0.04, 2)
    return closed + cutter.end()


def test_a_clip_starts_at_the_key_frame_before_its_pre_roll_and_ends_after_its_post_roll(
    tmp_path: Path,
) -> None:
    cutter, feed = cutter_for(tmp_path)
    closed = run(cutter, feed, [6.5], until=15)
    assert len(closed) == 1
    times = clips.video_times(closed[0].path)
    assert 3.5 - 1.0 < times[0] <= 3.5, "at the key frame at or before the pre-roll (a key frame a second)"
    assert 8.5 - 0.04 <= times[-1] <= 8.5, "to the end of the post-roll"
    assert clips.count_frames(closed[0].path) == len(times) == closed[0].frames


def test_overlapping_events_merge_into_one_clip(tmp_path: Path) -> None:
    cutter, feed = cutter_for(tmp_path)
    closed = run(cutter, feed, [5.0, 6.0, 9.0, 15.0], until=19)
    assert [c.events for c in closed] == [[5.0, 6.0, 9.0], [15.0]]
    first = clips.video_times(closed[0].path)
    assert first[0] <= 2.0 and 11.0 - 0.04 <= first[-1] <= 11.0


def test_a_run_of_events_longer_than_the_maximum_goes_on_in_the_next_clip(tmp_path: Path) -> None:
    cutter, feed = cutter_for(tmp_path, max=8.0)
    closed = run(cutter, feed, [4.0, 6.0, 8.0, 10.0], until=16)
    assert len(closed) == 2
    assert all(clips.video_times(c.path)[-1] - clips.video_times(c.path)[0] <= 8.0 for c in closed)
    assert closed[0].events == [4.0, 6.0] and closed[1].events == [8.0, 10.0]  # 8 + post would pass 1 + 8


def test_the_ring_keeps_its_seconds_from_a_key_frame(tmp_path: Path) -> None:
    cutter, feed = cutter_for(tmp_path)
    feed.until(18.0)
    ring = cutter.ring
    assert ring.packets[0].key and ring.packets[0].kind == "video"
    assert 18.0 - 11.0 <= ring.packets[0].time_s <= 18.0 - 10.0
    assert ring.bytes == sum(len(p.data) for p in ring.packets)


def test_an_annotated_clip_is_cut_from_the_composited_frames_encoded_as_they_come(tmp_path: Path) -> None:
    from fractions import Fraction

    from framewire.media.annotated import AnnotatedEncoder

    ring = PacketRing(10.0, 64 << 20)
    encoder = AnnotatedEncoder(ring, 160, 120, Fraction(25), Fraction(1, 12800))
    cutter = ClipCutter(
        "cam", ring, pre_s=1.0, post_s=1.0, max_s=30.0, name=lambda s: str(tmp_path / "a.mp4")
    )
    closed = []
    for index in range(150):
        encoder.write(clips.draw_frame(index, 160, 120), index * 512)
        if index == 75:
            cutter.event(3.0, "e")
        closed += cutter.frame(index / 25)
    encoder.close()
    closed += cutter.end()
    assert len(closed) == 1
    times = clips.video_times(closed[0].path)
    assert 1.0 <= times[0] <= 2.0 and 4.0 - 0.04 <= times[-1] <= 4.0 + 0.04
    assert clips.count_frames(closed[0].path) == len(times) == closed[0].frames


def test_the_ring_counts_the_packets_lost_on_the_way_and_those_its_bytes_cut_short(tmp_path: Path) -> None:
    src = make_gop_clip(tmp_path / "src.mp4", frames=100, audio=False)
    ring = PacketRing(10.0, 64 << 20)
    feed = Feed(src, ring)
    for number, packet in enumerate(feed.packets[:50]):
        if number not in (7, 8, 30):  # three the decode worker numbered were dropped on the way
            ring.add({**header_of("video", packet), "n": number}, bytes(packet))
    assert (ring.lost, ring.trimmed) == (3, 0)
    small = PacketRing(10.0, 1)  # 1 byte: every key-frame interval but the newest goes, well inside 10 s
    Feed(src, small).until(4.0)
    assert small.trimmed > 0 and small.packets[0].key
    assert small.trimmed == small.count - len(small.packets)
