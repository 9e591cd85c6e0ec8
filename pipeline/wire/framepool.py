"""Shared-memory frame pool: fixed slots per source, handed between processes by index.

A decoded 1080p frame is 6.2 MB; sending it over a socket at every hop costs milliseconds, while a
slot index costs nothing. Each slot holds named regions (the decoded image, the model input, the
composited image) whose shapes the caller gives at creation. Only the supervisor creates and unlinks
a pool and decides which stage owns a slot at any moment, so the slots need no locks. The memory is
a shared-memory segment (pipeline.wire.shm), swept like any other when its owner was killed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from framewire.pipeline.wire.shm import ALIGN, OverSegment, Segment, align


@dataclass(frozen=True)
class Region:
    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int

    @property
    def nbytes(self) -> int:
        # math.prod, not np.prod: every view() of a slot asks, and np.prod makes an array first
        # (6.5 against 2 us a view, bench budget's profile; docs/results/history.md).
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class PoolLayout:
    """Where each named region lies inside a slot, and how many slots there are."""

    name: str
    slots: int
    regions: tuple[Region, ...]
    slot_bytes: int

    @classmethod
    def plan(cls, name: str, slots: int, regions: Mapping[str, tuple[tuple[int, ...], str]]) -> PoolLayout:
        placed = []
        offset = 0
        for region_name, (shape, dtype) in regions.items():
            region = Region(region_name, tuple(int(d) for d in shape), np.dtype(dtype).name, offset)
            placed.append(region)
            offset += align(region.nbytes)
        return cls(name, slots, tuple(placed), max(offset, ALIGN))

    @property
    def total_bytes(self) -> int:
        return self.slot_bytes * self.slots

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "slots": self.slots,
            "slot_bytes": self.slot_bytes,
            "regions": [[r.name, list(r.shape), r.dtype, r.offset] for r in self.regions],
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> PoolLayout:
        regions = tuple(Region(n, tuple(s), d, o) for n, s, d, o in data["regions"])
        return cls(str(data["name"]), int(data["slots"]), regions, int(data["slot_bytes"]))


class FramePool(OverSegment[PoolLayout]):
    """A mapped pool; `create` makes it (supervisor), `attach` maps an existing one (workers)."""

    def __init__(self, layout: PoolLayout, segment: Segment) -> None:
        super().__init__(layout, segment)
        self._regions = {r.name: r for r in layout.regions}
        self._buffer = segment.buffer

    @property
    def memory(self) -> np.ndarray:
        """The whole mapping as one uint8 array, no copy: what a GPU engine registers as pinned
        memory. Whoever keeps it must drop it before `close`, or the mapping cannot be closed."""
        return self._buffer

    def has(self, region: str) -> bool:
        return region in self._regions

    def view(self, slot: int, region: str) -> np.ndarray:
        """A numpy view of one region of one slot: no copy, writes go to shared memory."""
        if not 0 <= slot < self.layout.slots:
            raise IndexError(f"slot {slot} outside pool {self.layout.name} of {self.layout.slots}")
        r = self._regions[region]
        start = slot * self.layout.slot_bytes + r.offset
        return self._buffer[start : start + r.nbytes].view(r.dtype).reshape(r.shape)

    def close(self) -> None:
        """Unmap; the owner also removes the file. Views taken earlier must not be used after."""
        self._buffer = np.empty(0, dtype=np.uint8)
        self.segment.close()


class PoolCache:
    """Pools a worker has attached, by name, so each is mapped once per process.

    `on_attach(pool)` runs when a pool is first mapped here and `on_detach(pool)` just before it is
    unmapped (a stage registers the pool as pinned memory and must let go of it first)."""

    def __init__(
        self,
        on_attach: Callable[[FramePool], None] | None = None,
        on_detach: Callable[[FramePool], None] | None = None,
    ) -> None:
        self._pools: dict[str, FramePool] = {}
        self._on_attach = on_attach
        self._on_detach = on_detach

    def get(self, layout_wire: Mapping[str, Any]) -> FramePool:
        name = str(layout_wire["name"])
        pool = self._pools.get(name)
        if pool is None:
            pool = FramePool.attach(PoolLayout.from_wire(layout_wire))
            self._pools[name] = pool
            if self._on_attach is not None:
                self._on_attach(pool)
        return pool

    def drop(self, name: str) -> None:
        pool = self._pools.pop(name, None)
        if pool is None:
            return
        try:
            if self._on_detach is not None:
                self._on_detach(pool)
        finally:
            pool.close()

    def close(self) -> None:
        for name in list(self._pools):
            self.drop(name)
