"""Shared-memory frame pool: fixed slots per source, handed between processes by index.

A decoded 1080p frame is 6.2 MB; sending it over a socket at every hop costs milliseconds, while a
slot index costs nothing. Each slot holds named regions (the decoded image, the model input, the
composited image) whose shapes the caller gives at creation. Only the supervisor creates and unlinks
a pool and decides which stage owns a slot at any moment, so the slots need no locks.

The memory is a file under /dev/shm mapped with mmap, not `multiprocessing.shared_memory`, whose
resource tracker unlinks segments when an attaching process exits.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

SHM_DIR = "/dev/shm"
ALIGN = 4096


@dataclass(frozen=True)
class Region:
    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int

    @property
    def nbytes(self) -> int:
        # math.prod, not np.prod: every view() of a slot asks, and np.prod makes an array first
        # (6.5 against 2 us a view, bench budget's profile; docs/benchmarks.md).
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
            offset += _align(region.nbytes)
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


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class FramePool:
    """A mapped pool; `create` makes it (supervisor), `attach` maps an existing one (workers)."""

    def __init__(self, layout: PoolLayout, mapping: mmap.mmap, owner: bool) -> None:
        self.layout = layout
        self._mmap = mapping
        self._owner = owner
        self._regions = {r.name: r for r in layout.regions}
        self._buffer = np.frombuffer(mapping, dtype=np.uint8)

    @staticmethod
    def path_of(name: str) -> str:
        return os.path.join(SHM_DIR, name)

    @classmethod
    def create(cls, layout: PoolLayout) -> FramePool:
        path = cls.path_of(layout.name)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, layout.total_bytes)
            mapping = mmap.mmap(fd, layout.total_bytes)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        return cls(layout, mapping, owner=True)

    @classmethod
    def attach(cls, layout: PoolLayout) -> FramePool:
        fd = os.open(cls.path_of(layout.name), os.O_RDWR)
        try:
            mapping = mmap.mmap(fd, layout.total_bytes)
        finally:
            os.close(fd)
        return cls(layout, mapping, owner=False)

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
        try:
            self._mmap.close()
        except BufferError:
            pass  # a view is still alive somewhere; the mapping goes with the process
        if self._owner:
            try:
                os.unlink(self.path_of(self.layout.name))
            except FileNotFoundError:
                pass


POOL_PREFIX = "framewire-"


def pool_name(owner_pid: int, index: int, source_id: str) -> str:
    """A pool's file name carries its owner's pid, so a later run can tell an orphan."""
    return f"{POOL_PREFIX}{owner_pid}-{index}-{source_id}"[:200]


def sweep_orphans(shm_dir: str = SHM_DIR, owner_pid: int | None = None) -> list[str]:
    """Remove the pools (and audio rings, named alike) whose owning supervisor is gone, killed
    without cleanup: every such one, or only `owner_pid`'s. Returns their names. Safe to run from
    several processes at once: a segment another one removed first is skipped."""
    removed: list[str] = []
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return removed
    prefix = POOL_PREFIX if owner_pid is None else f"{POOL_PREFIX}{owner_pid}-"
    for name in names:
        if not name.startswith(prefix):
            continue
        pid_text = name[len(POOL_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or _alive(int(pid_text)):
            continue
        try:
            os.unlink(os.path.join(shm_dir, name))
            removed.append(name)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


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
