"""Which frames of live sources the hub drops when more of them wait for a worker than their
bounds allow (`sources.N.max_waiting`): Router.trim gathers what waits, Bounds keeps the counts
that tell it when, Shedder chooses.

Each frame to drop comes from a source at or over its own bound: the one that lost the fewest
frames lately, then the one furthest over, then the one whose last drop is longest ago. So the
streams share the loss. Taking each from the longest queue alone drops the frames of whichever
streams arrive just as the workers are busy, and with cameras at a steady rate that is the same
few streams every time (10 streams over the machine's limit: from 2 to 346 frames lost a stream in
20 s, where sharing loses 109 to 130 each). A source below its bound never loses a frame here, so a
stream whose decoder fell behind keeps its burst while the bounds add up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from framewire.pipeline.hub.header import FrameHeader, FrameKey


class FrameState(Protocol):
    """What the bounds read of a frame in flight (routing.FrameState)."""

    held: bool
    stage_pos: int

    @property
    def head(self) -> FrameHeader: ...


LOST_MEMORY = 64
"""Each source's drops are remembered lately: once one has lost this many, every count halves."""


@dataclass
class Waiting:
    """A bounded source's frames that wait for a worker (none held), oldest first."""

    source: str
    most: int
    keep_newest: bool
    keys: list[FrameKey]


class Shedder:
    """The drops of each live source lately, and the choice of the next frames to drop."""

    def __init__(self) -> None:
        self.lost: dict[str, int] = {}
        self.last: dict[str, int] = {}
        """When each source last dropped (a count of drops): among equals, the one longest ago."""
        self._drops = 0

    def join(self, source: str) -> None:
        """A source starts level with the one that lost the fewest lately: else, as the one that
        lost none, it would take every drop until it caught up."""
        self.lost.setdefault(source, min(self.lost.values(), default=0))

    def forget(self, source: str) -> None:
        self.lost.pop(source, None)
        self.last.pop(source, None)

    def choose(self, waiting: list[Waiting]) -> list[FrameKey]:
        """The frames to drop, past what the bounds add up to: each the oldest waiting frame of its
        source, or its newest under drop_newest."""
        over = sum(len(item.keys) - item.most for item in waiting)
        chosen: list[FrameKey] = []
        lost, last = self.lost, self.last

        def rank(item: Waiting) -> tuple[int, int, int]:
            return -lost.get(item.source, 0), len(item.keys) - item.most, -last.get(item.source, -1)

        while over > 0:
            item = max((item for item in waiting if item.keys and len(item.keys) >= item.most), key=rank)
            chosen.append(item.keys.pop(0) if item.keep_newest else item.keys.pop())
            self._drops += 1
            self.last[item.source] = self._drops
            lost[item.source] = lost.get(item.source, 0) + 1
            if lost[item.source] >= LOST_MEMORY:
                for source in lost:
                    lost[source] //= 2
            over -= 1
        return chosen


class Bounds:
    """The live sources' bounds, and how many of their frames are ready: waiting for a worker of a
    stage up to the model, not held by one. The router tells it each move of a frame (`moved`,
    `gone`), so the check each turn (`over`) needs no scan of the queues; `choose` sets the counts
    again from the scan that finds the frames to drop."""

    def __init__(self, upto: int) -> None:
        self.upto = upto
        """The index of the last stage whose waiting frames count (the model's); -1: none."""
        self.of: dict[str, tuple[int, bool]] = {}
        """A bounded source: its most frames waiting, and whether it keeps the newest."""
        self.ready: dict[str, int] = {}
        self.ready_total = self.bound_total = 0
        self.shedder = Shedder()

    def bound(self, source: str, most: int, keep_newest: bool) -> None:
        self.bound_total += most - self.of.get(source, (0, False))[0]
        self.of[source] = (most, keep_newest)
        self.ready.setdefault(source, 0)
        self.shedder.join(source)

    def forget(self, source: str) -> None:
        self.ready_total -= self.ready.pop(source, 0)
        self.bound_total -= self.of.pop(source, (0, False))[0]
        self.shedder.forget(source)

    def is_ready(self, state: FrameState) -> bool:
        return not state.held and state.stage_pos <= self.upto and state.head.key.source in self.ready

    def moved(self, state: FrameState, was: bool) -> None:
        """`state` was ready (`was`) before it moved: the counts follow."""
        now = self.is_ready(state)
        if now != was:
            step = 1 if now else -1
            self.ready[state.head.key.source] += step
            self.ready_total += step

    def gone(self, state: FrameState) -> None:
        """`state` left the router (dropped)."""
        if self.is_ready(state):
            self.ready[state.head.key.source] -= 1
            self.ready_total -= 1

    @property
    def over(self) -> bool:
        """More frames are ready than the bounds add up to."""
        return self.ready_total > self.bound_total

    def choose(self, ready: dict[str, list[FrameKey]]) -> list[FrameKey]:
        """The frames to drop (Shedder) of those ready, each source's in seq order; the counts are
        set from them first."""
        waiting = [Waiting(name, most, new, ready.get(name, [])) for name, (most, new) in self.of.items()]
        for item in waiting:
            self.ready_total += len(item.keys) - self.ready[item.source]
            self.ready[item.source] = len(item.keys)
        return self.shedder.choose(waiting)
