"""A live-layout worker's share of sources: the longest-waiting source first, its newest frame, in seq
order, drops and stale frames counted per source as its policy says, and a source that leaves takes
only its own waiting frame with it."""

from __future__ import annotations

import threading

import pytest
from framewire.pipeline.plan import Policy, SourceOptions
from framewire.pipeline.worker.live_share import LiveShare

pytestmark = pytest.mark.timeout(30)

OLDEST = SourceOptions(policy=Policy.DROP_OLDEST)
NEWEST = SourceOptions(policy=Policy.DROP_NEWEST)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_source_that_waited_longest_goes_first_with_its_newest_frame() -> None:
    clock = Clock()
    share = LiveShare(clock)
    share.add("a", OLDEST)
    clock.now += 1
    share.add("b", OLDEST)
    for i in range(3):
        share.put("b", f"b{i}", i, i / 25)
        share.put("a", f"a{i}", i, i / 25)
    first = share.take(0)
    clock.now += 1
    second = share.take(0)
    assert first is not None and second is not None
    assert (first.source, first.seq, first.image) == ("a", 2, "a2")  # a joined first: it waited longest
    assert (second.source, second.seq, second.image) == ("b", 2, "b2")
    assert share.take(0) is None
    counts = share.counts()
    assert (counts["a"].read, counts["a"].taken, counts["a"].overflow) == (3, 1, 2)
    share.put("b", "b3", 3, 3 / 25)
    share.put("a", "a3", 3, 3 / 25)
    clock.now += 1
    third = share.take(0)
    assert third is not None and third.source == "a"  # served before b, so first again


def test_drop_newest_keeps_the_frame_that_was_waiting() -> None:
    share = LiveShare(Clock())
    share.add("cam", NEWEST)
    for i in range(4):
        share.put("cam", i, i, 0.0)
    frame = share.take(0)
    assert frame is not None and (frame.seq, frame.image) == (0, 0)
    assert share.counts()["cam"].overflow == 3


def test_a_frame_past_its_staleness_is_dropped_and_counted_and_the_next_source_served() -> None:
    clock = Clock()
    share = LiveShare(clock)
    share.add("late", SourceOptions(policy=Policy.DROP_OLDEST, max_staleness_ms=50))
    share.add("fresh", OLDEST)
    share.put("late", "x", 0, 0.0)
    share.put("fresh", "y", 0, 0.0)
    clock.now += 0.2
    frame = share.take(0)
    assert frame is not None and frame.source == "fresh"
    assert share.counts()["late"].stale == 1 and share.counts()["late"].taken == 0


def test_a_source_that_leaves_loses_only_its_waiting_frame() -> None:
    share = LiveShare(Clock())
    share.add("a", OLDEST)
    share.add("b", OLDEST)
    share.put("a", 1, 0, 0.0)
    share.put("b", 2, 0, 0.0)
    gone = share.remove("a")
    assert (gone.read, gone.lost) == (1, 1)
    share.put("a", 3, 1, 0.0)  # its reader's last frame, after it left: ignored
    frame = share.take(0)
    assert frame is not None and frame.source == "b" and share.sources == ("b",)
    with pytest.raises(ValueError, match="block source"):
        share.add("file", SourceOptions(policy=Policy.BLOCK))
    with pytest.raises(ValueError, match="already in"):
        share.add("b", OLDEST)


def test_reader_threads_and_the_model_keep_each_source_in_order_and_account_for_every_frame() -> None:
    share = LiveShare()
    sources = [f"cam{i}" for i in range(4)]
    for s in sources:
        share.add(s, OLDEST)
    per_source = 500

    def read(source: str) -> None:
        for i in range(per_source):
            share.put(source, i, i, i / 25)

    readers = [threading.Thread(target=read, args=(s,)) for s in sources]
    for t in readers:
        t.start()
    seen: dict[str, list[int]] = {s: [] for s in sources}
    while True:
        reading = any(t.is_alive() for t in readers)
        frame = share.take(0.01)
        if frame is not None:
            seen[frame.source].append(frame.seq)
        elif not reading:
            break
    for t in readers:
        t.join(5)
    for s in sources:
        seqs, counts = seen[s], share.counts()[s]
        assert seqs == sorted(set(seqs))
        assert counts.read == per_source
        assert counts.taken == len(seqs) and seqs[-1] == per_source - 1  # the last frame read is taken
        assert counts.taken + counts.overflow + counts.stale == per_source


def test_a_source_that_ended_can_join_again_with_fresh_counts() -> None:
    share = LiveShare(Clock())
    share.add("cam", OLDEST)
    share.put("cam", 1, 0, 0.0)
    share.end("cam")
    assert share.ended("cam") is None  # its last frame still waits
    frame = share.take(0)
    assert frame is not None and frame.seq == 0
    ended = share.ended("cam")
    assert ended is not None and (ended.read, ended.taken, ended.lost) == (1, 1, 0)
    share.add("cam", OLDEST)
    assert share.ended("cam") is None and share.counts()["cam"].read == 0
