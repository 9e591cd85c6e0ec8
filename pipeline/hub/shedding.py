"""Which frames of live sources the hub drops when more of them wait for a worker than their
bounds allow (`sources.N.max_waiting`; Router.trim gathers what waits, Shedder chooses).

Each frame to drop comes from a source at or over its own bound, the one that lost the fewest frames
lately, then the one furthest over, then the one whose last drop is longest ago: the streams share
the loss. Taking each from the longest queue
alone drops the frames of whichever streams arrive just as the workers are busy, and with cameras at
a steady rate that is the same few streams every time (10 streams at the machine's limit: 1 to 67
frames lost a stream in 20 s, where this spreads them 4 to 7). A source below its bound never
loses a frame here, so a stream whose decoder fell behind keeps its burst while the bounds add up.
"""

from __future__ import annotations

from dataclasses import dataclass

from framewire.pipeline.hub.header import FrameKey

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
