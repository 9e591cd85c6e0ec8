"""What a worker of the live layout runs its model on: the newest frame of each source it decodes,
taken one at a time, the source that has waited longest first.

A reader thread a source `put`s each frame it reads; the model's thread `take`s. Each source waits with
at most one frame, so a slow model drops frames at the source, as its policy says: `drop_oldest` keeps
the frame just read (the one waiting is dropped), `drop_newest` keeps the one waiting. A frame older
than its source's `max_staleness_ms` when taken is dropped as stale. Every drop is counted per source,
and a source's frames are taken in `seq` order (a frame only ever replaces an older one). The share is
what bench/live_peer.py's plain per-core program does with a lock and a dict, with the policies and
counts framewire keeps for every live source (pipeline.plan.SourceOptions, Report).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from framewire.pipeline.errors import one_line
from framewire.pipeline.frame import FrameSource, LiveFrameSource, SourceInterrupted
from framewire.pipeline.plan import Policy, SourceOptions, SourcePlan
from framewire.pipeline.worker.decode import Pacer

log = logging.getLogger(__name__)

STOP_WAIT_S = 1.0
"""How long a rebalance waits for a reader that leaves to stop (a frame interval is plenty)."""


@dataclass(frozen=True)
class Waiting:
    """A frame read and not yet taken: its source, its seq (per source, from 0), its pixels and times."""

    source: str
    seq: int
    image: Any
    pts: int
    time_s: float
    read_at: float
    """When it was read (the share's clock, seconds)."""
    read_wall: float = 0.0
    """When it was read, in seconds since the epoch: where its decode span and its latency start."""


@dataclass
class Counts:
    """One source's frames: read, taken by the model, and dropped (overflow: replaced by or losing to
    another frame while the model was busy; stale: past `max_staleness_ms` when taken; lost: waiting when
    the source left)."""

    read: int = 0
    taken: int = 0
    overflow: int = 0
    stale: int = 0
    lost: int = 0
    next_seq: int = field(default=0, repr=False)


class LiveShare:
    """The sources one worker decodes, each with at most one frame waiting for the model."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Condition()
        self._options: dict[str, SourceOptions] = {}
        self._waiting: dict[str, Waiting] = {}
        self._served: dict[str, float] = {}
        """When each source last had a frame taken (or joined): the oldest goes first."""
        self._counts: dict[str, Counts] = {}
        self._ending: set[str] = set()
        self._ended: dict[str, Counts] = {}
        """Sources that ended with their last frame taken (or none waiting), by their final counts."""

    def add(self, source: str, options: SourceOptions) -> None:
        """A source joins the share (a rebalance, or the worker's start); its seqs start at 0."""
        if options.policy == Policy.BLOCK:
            raise ValueError(f"source {source}: a block source keeps its decode worker, not a live share")
        with self._lock:
            if source in self._options or source in self._ending:
                raise ValueError(f"source {source} is already in this worker's share")
            self._ended.pop(source, None)  # back on this worker: its counts start again
            self._options[source] = options
            self._served[source] = self._clock()
            self._counts[source] = Counts()

    def remove(self, source: str) -> Counts:
        """The source leaves at once (it moves to another worker): a frame still waiting is lost,
        counted. Returns its counts; the other sources go on untouched."""
        with self._lock:
            self._ending.discard(source)
            counts = self._forget(source)
            if self._waiting.pop(source, None) is not None:
                counts.lost += 1
            return counts

    def end(self, source: str) -> None:
        """Its reader read its last frame (the stream ended, or failed): the frame still waiting is
        taken as any other, then the source leaves (`ended`)."""
        with self._lock:
            if source not in self._options:
                return
            if source in self._waiting:
                self._ending.add(source)
            else:
                self._ended[source] = self._forget(source)

    def ended(self, source: str) -> Counts | None:
        """The final counts of a source that ended and left; None while it is in the share."""
        with self._lock:
            return self._ended.get(source)

    def _forget(self, source: str) -> Counts:
        self._options.pop(source)
        self._served.pop(source)
        return self._counts.pop(source)

    def put(self, source: str, image: Any, pts: int, time_s: float) -> None:
        """A frame its reader thread just read; under a busy model, one of it and the waiting frame is
        dropped as the source's policy says."""
        with self._lock:
            options, counts = self._options.get(source), self._counts.get(source)
            if options is None or counts is None:
                return  # it left while its reader was reading: its reader is told to stop
            counts.read += 1
            frame = Waiting(source, counts.next_seq, image, pts, time_s, self._clock(), time.time())
            counts.next_seq += 1
            if source in self._waiting:
                counts.overflow += 1
                if options.policy == Policy.DROP_NEWEST:
                    return
            self._waiting[source] = frame
            self._lock.notify()

    def take(self, timeout_s: float) -> Waiting | None:
        """The frame of the source that has waited longest for the model, stale ones dropped on the way;
        None if none came within `timeout_s`."""
        deadline = self._clock() + timeout_s
        with self._lock:
            while True:
                frame = self._oldest_fresh()
                if frame is not None:
                    return frame
                left = deadline - self._clock()
                if left <= 0:
                    return None
                self._lock.wait(left)

    def _oldest_fresh(self) -> Waiting | None:
        now = self._clock()
        for source in sorted(self._waiting, key=self._served.__getitem__):
            frame = self._waiting.pop(source)
            counts, limit = self._counts[source], self._options[source].staleness_ms
            if limit is not None and (now - frame.read_at) * 1000.0 > limit:
                counts.stale += 1
                self._finish(source)
                continue
            counts.taken += 1
            self._served[source] = now
            self._finish(source)
            return frame
        return None

    def _finish(self, source: str) -> None:
        """An ending source whose last frame just left (taken or stale) leaves the share."""
        if source in self._ending:
            self._ending.discard(source)
            self._ended[source] = self._forget(source)

    @property
    def waiting(self) -> bool:
        """A frame waits for the model (it may still turn out stale when taken)."""
        with self._lock:
            return bool(self._waiting)

    def counts_of(self, source: str) -> Counts | None:
        """One source's counts so far (a copy), None when it is not in the share."""
        with self._lock:
            counts = self._counts.get(source)
            return Counts(**vars(counts)) if counts is not None else None

    def counts(self) -> Mapping[str, Counts]:
        """Each source's counts so far (copies)."""
        with self._lock:
            return {s: Counts(**vars(c)) for s, c in self._counts.items()}

    @property
    def sources(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._options)


class SourceReader:
    """One source of a share, read on its own thread (built, opened and read there, as its decode worker
    would): each frame `put` into the share. A source that fails leaves the share alone with its error;
    the worker's other sources go on. `stop` asks it to end (a live source hears it while it waits).

    With `wait_for_pool`, it reads no frame after opening until `pool_ready` is set: the worker's loop
    sets it once the hub has made the source's pool (and its audio ring, which the source must have
    before its first frame). `wake` is called when it opened, after each frame and at its end: the
    loop waits on it and on the hub at once."""

    def __init__(
        self,
        source: SourcePlan,
        share: LiveShare,
        *,
        wake: Callable[[], None] = lambda: None,
        wait_for_pool: bool = False,
    ) -> None:
        self.source_id = source.source_id
        self.options = source.options
        self._plan, self._share, self._wake = source, share, wake
        self._stop = threading.Event()
        self.pool_ready = threading.Event()
        if not wait_for_pool:
            self.pool_ready.set()
        self.source: FrameSource | None = None
        """The source once built (its thread's): its `stats()` are read by the loop."""
        self.info: dict[str, Any] | None = None
        self.error: str | None = None
        self._done = False
        share.add(self.source_id, source.options)
        self._thread = threading.Thread(
            target=self._run, name=f"framewire-read-{self.source_id}", daemon=True
        )

    def start(self) -> SourceReader:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float) -> bool:
        """Wait for it to end; False if it is still reading after `timeout_s`."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @property
    def counts(self) -> Counts | None:
        """Its final counts once it ended and its last frame left the share; None before."""
        return self._share.ended(self.source_id)

    @property
    def ended(self) -> bool:
        return self.counts is not None

    @property
    def closing(self) -> bool:
        """Asked to stop, or done reading: its source's state (online or not) says nothing any more."""
        return self._stop.is_set() or self._done

    def _run(self) -> None:
        reader: FrameSource | None = None
        try:
            reader = self.source = self._plan.factory()
            if isinstance(reader, LiveFrameSource):
                reader.set_interrupt(self._stop.is_set)
            self.info = reader.open()
            self._wake()
            while not self.pool_ready.wait(0.1):
                if self._stop.is_set():
                    return
            due = Pacer(self._plan.options.realtime).due
            limit = self._plan.options.max_frames
            for read, (image, pts, time_s) in enumerate(reader.frames(), 1):
                due(time_s)
                if self._stop.is_set():
                    break
                self._share.put(self.source_id, image, pts, time_s)
                self._wake()
                if limit is not None and read >= limit:
                    break
        except SourceInterrupted:
            pass
        except Exception as exc:  # its own failure: the share's other sources go on
            self.error = one_line(exc)
            log.warning("source %s failed: %s", self.source_id, self.error)
            log.debug("source %s failed", self.source_id, exc_info=True)
        finally:
            self._done = True
            if reader is not None:
                try:
                    reader.close()
                except Exception:
                    log.debug("closing source %s failed", self.source_id, exc_info=True)
            self._share.end(self.source_id)
            self._wake()


class Readers:
    """A worker's readers, one a source of its share. `apply` takes the share the layout gives it now
    (stages.live_layout.rebalance): it starts readers for sources new to it and stops those that moved
    away, the frame each had waiting lost and counted; the sources that stay are not touched."""

    def __init__(self, share: LiveShare, plans: Mapping[str, SourcePlan]) -> None:
        self.share, self.plans = share, plans
        self.readers: dict[str, SourceReader] = {}

    def apply(self, sources: Sequence[str]) -> dict[str, Counts]:
        """Read exactly `sources` from now on; returns the counts of the sources that left."""
        gone: dict[str, Counts] = {}
        for source in [s for s in self.readers if s not in sources]:
            reader = self.readers.pop(source)
            reader.stop()
            # A reader stops at its next frame; until it does, it could put one more frame, which a
            # reader started for the same source on this worker later must not get.
            reader.join(STOP_WAIT_S)
            ended = reader.counts
            gone[source] = ended if ended is not None else self.share.remove(source)
        for source in sources:
            if source not in self.readers:
                self.readers[source] = SourceReader(self.plans[source], self.share).start()
        return gone

    def stop_all(self, timeout_s: float) -> bool:
        """Ask every reader to end and wait for them; False if one is still reading after `timeout_s`."""
        for reader in self.readers.values():
            reader.stop()
        deadline = time.monotonic() + timeout_s
        return all(r.join(max(0.0, deadline - time.monotonic())) for r in self.readers.values())
