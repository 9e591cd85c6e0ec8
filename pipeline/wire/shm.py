"""Named shared-memory segments: made by one owner, mapped by name in other processes, removed by
their owner or, when it was killed before it could, by the sweep of orphans.

The frame pool and the audio ring each lay their own structure over one of these. A segment is a
file under /dev/shm mapped with mmap, not `multiprocessing.shared_memory`, whose resource tracker
unlinks segments when an attaching process exits. Its name begins with `framewire-<owner pid>-`,
so a later process can tell an orphan (its owner gone) from a segment still in use.
"""

from __future__ import annotations

import mmap
import os
from typing import Generic, Protocol, Self, TypeVar

import numpy as np

SHM_DIR = "/dev/shm"
ALIGN = 4096
PREFIX = "framewire-"


def align(n: int) -> int:
    """`n` bytes rounded up to a page: regions laid out on page boundaries."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


def segment_name(owner_pid: int, index: int, tag: str) -> str:
    """A segment's name carries its owner's pid, so a later run can tell an orphan."""
    return f"{PREFIX}{owner_pid}-{index}-{tag}"[:200]


class Segment:
    """One mapped segment of `size` bytes; `create` makes it (the owner), `attach` maps it."""

    def __init__(self, name: str, mapping: mmap.mmap, owner: bool) -> None:
        self.name = name
        self.owner = owner
        self._mmap = mapping
        self.buffer = np.frombuffer(mapping, dtype=np.uint8)
        """The whole mapping as one uint8 array, no copy."""

    @staticmethod
    def path_of(name: str) -> str:
        return os.path.join(SHM_DIR, name)

    @classmethod
    def create(cls, name: str, size: int) -> Segment:
        """A new zero-filled segment; FileExistsError if the name is taken."""
        path = cls.path_of(name)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            mapping = mmap.mmap(fd, size)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        return cls(name, mapping, owner=True)

    @classmethod
    def attach(cls, name: str, size: int) -> Segment:
        """Map a segment another process made; FileNotFoundError if it is not there."""
        fd = os.open(cls.path_of(name), os.O_RDWR)
        try:
            mapping = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(name, mapping, owner=False)

    @property
    def closed(self) -> bool:
        """Unmapped: `close` ran and no view held the mapping open."""
        return self._mmap.closed

    def close(self) -> None:
        """Unmap; the owner also removes the file (one already removed, by a sweep, is fine). Views
        taken earlier must not be used after."""
        self.buffer = np.empty(0, dtype=np.uint8)
        try:
            self._mmap.close()
        except BufferError:
            pass  # a view is still alive somewhere; the mapping goes with the process
        if self.owner:
            try:
                os.unlink(self.path_of(self.name))
            except FileNotFoundError:
                pass


class SegmentLayout(Protocol):
    """What a structure laid over a segment tells about it: the segment's name and size."""

    @property
    def name(self) -> str: ...

    @property
    def total_bytes(self) -> int: ...


LayoutT = TypeVar("LayoutT", bound=SegmentLayout)


class OverSegment(Generic[LayoutT]):
    """A structure laid over one segment, sized by its layout (the frame pool, the audio ring):
    `create` makes the segment (the owner), `attach` maps it (any other process)."""

    def __init__(self, layout: LayoutT, segment: Segment) -> None:
        self.layout = layout
        self.segment = segment

    @classmethod
    def create(cls, layout: LayoutT) -> Self:
        return cls(layout, Segment.create(layout.name, layout.total_bytes))

    @classmethod
    def attach(cls, layout: LayoutT) -> Self:
        return cls(layout, Segment.attach(layout.name, layout.total_bytes))


def sweep_orphans(shm_dir: str = SHM_DIR, owner_pid: int | None = None, prefix: str = PREFIX) -> list[str]:
    """Remove the segments named `<prefix><pid>-...` whose owner is gone (killed without cleanup):
    every such one, or only `owner_pid`'s. Returns their names. Safe to run from several processes
    at once: a segment another one removed first is skipped."""
    removed: list[str] = []
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return removed
    wanted = prefix if owner_pid is None else f"{prefix}{owner_pid}-"
    for name in names:
        if not name.startswith(wanted):
            continue
        pid_text = name[len(prefix) :].split("-", 1)[0]
        if not pid_text.isdigit() or _alive(int(pid_text)):
            continue
        try:
            os.unlink(os.path.join(shm_dir, name))
            removed.append(name)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie (dead, not yet reaped by its parent) does not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")
