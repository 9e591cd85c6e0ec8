"""The decode worker: one process per source, filling the frame-pool slots the hub grants it.

It opens its source (`FrameSource`, built by the plan's factory in this process), sends the
stream's info (STREAM), waits for its pool (POOL) and slots (GRANT), and for each frame writes the
pixels into a granted slot and sends FRAME with the frame's header. A file source under `block`
waits for a free slot; a live source under `drop_oldest` / `drop_newest` keeps reading and drops
(and counts) frames while no slot is free. At the end, or on STOP, it sends EOS with the number of
frames it sent, and the error that ended it if any.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from framewire.pipeline.wire import messages as msg
from framewire.pipeline.wire.audioring import AudioRing, AudioRingLayout, ring_of
from framewire.pipeline.plan import Policy
from framewire.pipeline.errors import FramewireError, one_line
from framewire.pipeline.frame import (
    AudioFrameSource,
    Frame,
    FrameSource,
    LiveFrameSource,
    PendingPixels,
    SourceInterrupted,
    traceparent,
)
from framewire.pipeline.wire.framepool import FramePool, PoolLayout
from framewire.pipeline.worker.hub_link import HubConnection, SupervisorWatch, WorkerSpec, setup_process
from framewire.pipeline.plan import SourceOptions
from framewire.pipeline.stagespec import DECODE

log = logging.getLogger(__name__)

POLL_MS = 200
STATS_INTERVAL_S = 0.25
Pending = tuple[np.ndarray | PendingPixels, int, float, float]
"""A frame read but not yet in a slot: image, pts, time in seconds, when it was read (epoch)."""


def source_main(spec: WorkerSpec) -> None:
    """Entry point of a decode process."""
    setup_process(spec)
    conn = HubConnection.open(spec)
    source_id = spec.source_id or "?"
    watch = SupervisorWatch(spec.supervisor_pid)
    reader: FrameSource | None = None
    sent = 0
    error: str | None = None
    grants = Grants()
    try:
        reader = spec.factory()
        stats = SourceStats(source_id, reader)
        if isinstance(reader, LiveFrameSource):  # it waits on the network: it must hear a STOP
            reader.set_interrupt(functools.partial(_interrupted, conn, grants, watch, stats))
        info = reader.open()
        conn.send({"type": msg.STREAM, "source": source_id, "info": info})
        pump = Pump(conn, reader, source_id, spec.source_options, watch, grants, stats, first_seq=_first_seq(info))
        sent, error = pump.run()
    except SourceInterrupted:
        log.info("source %s: stopped before it connected", source_id)
    except BaseException as exc:
        error = one_line(exc)
        log.debug("source %s failed", source_id, exc_info=True)
    finally:
        if reader is not None:
            try:
                reader.close()
            except Exception:
                log.debug("closing source %s failed", source_id, exc_info=True)
    eos: dict[str, Any] = {"type": msg.EOS, "source": source_id, "frames": sent}
    if error:
        eos["error"] = error
    conn.send(eos)
    conn.close(linger_ms=5000)


def _first_seq(info: dict[str, Any]) -> int:
    """The seq of the source's first frame: 0, or where a resumed file goes on (its outputs hold the
    frames before: sources.resume); the hub's order starts there too (STREAM carries it)."""
    first = info.get("first_seq", 0)
    return first if type(first) is int and first > 0 else 0


class Grants:
    """Slots the hub has granted this source, and the pool they live in."""

    def __init__(self) -> None:
        self.free: deque[int] = deque()
        self.pool: FramePool | None = None
        self.pool_wire: dict[str, Any] | None = None
        self.ring: AudioRing | None = None
        self.stop = False

    def take(self, header: dict[str, Any]) -> None:
        kind = header["type"]
        if kind == msg.POOL:
            self.pool_wire = dict(header["pool"])
            self.pool = FramePool.attach(PoolLayout.from_wire(self.pool_wire))
            audio = ring_of(self.pool_wire)
            if audio is not None:
                self.ring = AudioRing.attach(AudioRingLayout.from_wire(audio))
        elif kind == msg.GRANT:
            self.free.extend(int(s) for s in header["slots"])
        elif kind == msg.STOP:
            self.stop = True

    def drain(self, conn: HubConnection, timeout_ms: int) -> None:
        """Take every message waiting, waiting up to `timeout_ms` for the first."""
        wait = timeout_ms
        while conn.poll(wait):
            received = conn.receive()
            if received is not None:
                self.take(received[0])
            wait = 0


class SourceStats:
    """A live source's running totals (`stats()`), sent to the hub as STATS messages that carry
    what changed: counts as increments, `online` as it is now; at most every STATS_INTERVAL_S."""

    def __init__(self, source_id: str, reader: Any) -> None:
        self.source_id = source_id
        self.read: Callable[[], dict[str, Any]] | None = getattr(reader, "stats", None)
        self.sent: dict[str, Any] = {}
        self.at = 0.0

    def send(self, conn: HubConnection, *, force: bool = False, states: bool = True) -> None:
        """What changed, if anything; `states=False` (a source that has ended and closed): its counts only,
        not its `online`, which its closing turned off."""
        if self.read is None:
            return
        now = time.monotonic()
        if not force and now - self.at < STATS_INTERVAL_S:
            return
        self.at = now
        current = {k: dict(v) if isinstance(v, dict) else v for k, v in self.read().items()}
        changes = changes_since(current, self.sent)
        if not states:
            changes = {key: value for key, value in changes.items() if not isinstance(value, bool)}
        if changes:
            self.sent = current
            conn.send({"type": msg.STATS, "source": self.source_id, **changes})


def changes_since(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """What changed between two `stats()` readings: numbers as increments, flags as they are now."""
    out: dict[str, Any] = {}
    for key, value in now.items():
        old = before.get(key)
        if isinstance(value, bool):
            if value != old:
                out[key] = value
        elif isinstance(value, int | float):
            step = value - (old or 0)
            if step:
                out[key] = step
        elif isinstance(value, dict):
            old = old or {}
            steps = {k: v - old.get(k, 0) for k, v in value.items() if v != old.get(k, 0)}
            if steps:
                out[key] = steps
    return out


def _interrupted(conn: HubConnection, grants: Grants, watch: SupervisorWatch, stats: SourceStats) -> bool:
    """What a live source asks while it waits: has the hub said STOP (or gone)? Grants that arrive
    meanwhile are kept, and the source's counters go out (it may be offline for a while)."""
    grants.drain(conn, 0)
    stats.send(conn)
    return grants.stop or watch.gone()


class SupervisorGone(Exception):
    """The supervisor died: the source ends (the frames it sent are counted)."""


class Pump:
    """Reads a source's frames into granted slots, by its policy; `run()` returns (frames sent, error)."""

    def __init__(
        self,
        conn: HubConnection,
        reader: FrameSource,
        source_id: str,
        options: SourceOptions,
        watch: SupervisorWatch,
        grants: Grants | None = None,
        stats: SourceStats | None = None,
        first_seq: int = 0,
    ) -> None:
        self.conn = conn
        self.reader = reader
        self.source_id = source_id
        self.options = options
        self.watch = watch
        self.grants = grants or Grants()
        self.stats = stats or SourceStats(source_id, reader)
        self.seq = first_seq
        self.dropped = 0
        self._due = Pacer(options.realtime).due

    def run(self) -> tuple[int, str | None]:
        try:
            self._wait_for_pool()
            self._read_all(iter(self.reader.frames()))
        except SupervisorGone:
            return self.seq, "supervisor is gone"
        if self.dropped:
            self.conn.send({"type": msg.STATS, "source": self.source_id, "dropped": self.dropped})
        self.stats.send(self.conn, force=True)
        return self.seq, None

    def _wait_for_pool(self) -> None:
        while self.grants.pool is None and not self.grants.stop:
            self.grants.drain(self.conn, POLL_MS)
            self._check_supervisor()
        if self.grants.ring is not None and isinstance(self.reader, AudioFrameSource):
            self.reader.attach_audio(self.grants.ring)  # before the first frame: it writes the audio there

    def _check_supervisor(self) -> None:
        if self.watch.gone():
            raise SupervisorGone()

    def _read_all(self, frames: Iterator[tuple[np.ndarray | PendingPixels, int, float]]) -> None:
        pending: Pending | None = None
        limit = self.options.max_frames
        block = self.options.policy == Policy.BLOCK
        while not self.grants.stop and (limit is None or self.seq < limit):
            self._check_supervisor()
            # `block` holds a slot before it reads: a stop that comes while it waits leaves no frame
            # read and not sent, so every frame read is written.
            if block and not self._wait_for_slot():
                break
            try:
                image, pts, time_s = next(frames)
            except StopIteration:
                break
            read = (image, pts, time_s, self._due(time_s))
            if block:
                self._send(read)
                continue
            pending = self._keep(pending, read)
            if self.grants.free:
                self._send(pending)
                pending = None
        if pending is not None:  # read, never sent: it counts as dropped like the others
            self.dropped += 1

    def _wait_for_slot(self) -> bool:
        """`block`: wait for a free slot; False when told to stop."""
        self.grants.drain(self.conn, 0)  # a STOP must be heard even while free slots are at hand
        while not self.grants.free and not self.grants.stop:
            self.grants.drain(self.conn, POLL_MS)
            self._check_supervisor()
        return not self.grants.stop

    def _keep(self, pending: Pending | None, read: Pending) -> Pending:
        """A drop policy: which of the waiting frame and the one just read to keep (one is dropped)."""
        self.grants.drain(self.conn, 0)
        if pending is None:
            return read
        self.dropped += 1
        return read if self.options.policy == Policy.DROP_OLDEST else pending

    def _send(self, pending: Pending) -> None:
        image, pts, time_s, decoded_at = pending
        assert self.grants.pool is not None
        slot = self.grants.free.popleft()
        write_picture(self.grants.pool.view(slot, "image"), image, self.source_id, self.seq)
        staleness_ms, trace_every = self.options.staleness_ms, self.options.trace_every
        frame = Frame(
            source_id=self.source_id,
            seq=self.seq,
            pts=int(pts),
            time_s=float(time_s),
            width=int(image.shape[1]),
            height=int(image.shape[0]),
            slot=slot,
            pool_wire=self.grants.pool_wire,
            timings={DECODE: [decoded_at, time.time()]},
            deadline=decoded_at + staleness_ms / 1000.0 if staleness_ms else None,
            trace=traceparent() if trace_every is not None and self.seq % trace_every == 0 else None,
        )
        header = frame.to_header()
        header["type"] = msg.FRAME
        if self.dropped:
            header["dropped"] = self.dropped
            self.dropped = 0
        self.conn.send(header)
        self.seq += 1
        self.stats.send(self.conn)


class Pacer:
    """When each frame of a source counts as read: now, or, for a file paced at its own rate
    (`realtime`), when its time comes (it waits until then)."""

    def __init__(self, realtime: bool) -> None:
        self.realtime = realtime
        self._clock: tuple[float, float] | None = None
        """(monotonic time, frame time) of the first frame of a paced file."""

    def due(self, time_s: float) -> float:
        """The frame's read time (epoch), after waiting for it if the source is paced."""
        if not self.realtime:
            return time.time()
        if self._clock is None:
            self._clock = (time.monotonic(), time_s)
        delay = self._clock[0] + (time_s - self._clock[1]) - time.monotonic()
        if delay > 0:
            # Read ahead of its time, the frame is due now, as a live source would deliver it:
            # its latency starts here, not while it waited for its turn.
            time.sleep(delay)
        return time.time()


def write_picture(target: np.ndarray, image: np.ndarray | PendingPixels, source_id: str, seq: int) -> None:
    """A frame's picture into its slot's image region: converted straight into it (written once, not
    copied) or copied; FramewireError when it does not fit the stream's size or the job's format."""
    if picture_size(target) != (image.shape[1], image.shape[0]):
        width, height = picture_size(target)
        raise FramewireError(
            f"source {source_id}: frame {seq} is {image.shape[1]}x{image.shape[0]}, "
            f"the stream started at {width}x{height}"
        )
    if not isinstance(image, np.ndarray):
        image.write_into(target)
    elif target.ndim == 2:  # only PyAV's sources run in jobs that keep YUV frames (app.compose)
        raise FramewireError(f"source {source_id}: a BGR frame for a job that keeps YUV frames")
    else:
        np.copyto(target, image)


def picture_size(slot: np.ndarray) -> tuple[int, int]:
    """(width, height) of the picture a slot holds: BGR (height, width, 3) or I420 (height * 3 / 2,
    width: a job that keeps its frames as YUV, framewire.media.yuv)."""
    if slot.ndim == 2:
        return slot.shape[1], slot.shape[0] * 2 // 3
    return slot.shape[1], slot.shape[0]
