"""The loop of a live-layout worker: the model's stage worker, reading its share of the live sources itself.

The hub shares the live sources out across the workers of the model's stage (pipeline.hub.shares) and
tells each its share (SHARE). For each source the worker runs a reader thread (live_share.SourceReader):
it opens the source and puts every frame it reads into the share, at most one waiting a source, drops
counted by the source's policy. The loop announces the stream (STREAM), gets its pool and slots (POOL,
GRANT) as a decode worker would, and then, whenever the model is free, takes the newest frame of the
source that waited longest, writes it into a slot, runs the stage on it and sends the hub the frame
and its result in one message (LIVE). No decode process, no FRAME and no WORK: the hops and wake-ups
a plain per-core program does not pay (stages.live_layout). The frame's pixels are in the pool as
ever, so every output, preview and recording reads them as in the default layout.

A source that fails ends alone (EOS with its error); the worker's other sources go on. Frames from the
hub (WORK: block sources of the job, decoded by their own workers) are served between live frames.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from fractions import Fraction
from collections.abc import Mapping
from typing import Any

import zmq

from framewire.pipeline.errors import one_line
from framewire.pipeline.frame import AudioFrameSource, Frame, traceparent
from framewire.pipeline.plan import SourcePlan
from framewire.pipeline.stagespec import DECODE
from framewire.pipeline.wire import messages as msg
from framewire.pipeline.wire.audioring import AudioRing, AudioRingLayout, ring_of
from framewire.pipeline.wire.framepool import FramePool
from framewire.pipeline.worker.decode import SourceStats, write_picture
from framewire.pipeline.worker.live_share import STOP_WAIT_S, Counts, LiveShare, SourceReader, Waiting
from framewire.pipeline.worker.hub_link import WorkerSpec
from framewire.pipeline.worker.stage import POLL_MS, Loop, worker_main

log = logging.getLogger(__name__)

BEAT_S = 1.0
"""How often a live-layout worker tells the hub it lives, frames or not (the hub's stall check)."""


def live_main(spec: WorkerSpec) -> None:
    """Entry point of a live-layout worker: a stage worker whose loop also reads its share of the sources."""
    worker_main(spec, LiveLoop)


class Shared:
    """One source of this worker's share: its reader, its pool and slots, the seq its next frame takes,
    and the drops already told to the hub."""

    def __init__(self, reader: SourceReader) -> None:
        self.reader = reader
        self.announced = False
        self.pool: FramePool | None = None
        self.pool_wire: dict[str, Any] | None = None
        self.free: deque[int] = deque()
        self.next_seq = 0
        self.told = Counts()
        """The share's counts as the hub last heard them (each LIVE carries the steps since)."""
        self.no_slot = 0
        """Frames taken while every slot was with the outputs: dropped, like the decode worker's."""
        self.stats: SourceStats | None = None
        self.after: tuple[int, float] | None = None
        """Opened again (its worker restarted, or it moved): the pts and time of its last frame before."""
        self.shift: tuple[int, float] | None = None
        """What its frames' pts and time are moved by so that they go on after `after` (fixed at the first)."""

    def clock(self, pts: int, time_s: float) -> tuple[int, float]:
        """A frame's pts and time, moved past the frames the source gave before it was opened again
        (a new reader's clock starts afresh; the outputs take increasing timestamps only)."""
        if self.shift is None:
            self.shift = (0, 0.0)
            if self.after is not None and pts <= self.after[0]:
                ticks, seconds = frame_step(self.reader.info or {})
                self.shift = (self.after[0] + ticks - pts, self.after[1] + seconds - time_s)
        return pts + self.shift[0], time_s + self.shift[1]


class LiveLoop(Loop):
    """A stage worker's loop that also reads the live sources shared out to it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.share = LiveShare()
        self.shared: dict[str, Shared] = {}
        self.plans: dict[str, SourcePlan] = {s.source_id: s for s in self.spec.live_sources}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poller = zmq.Poller()
        self._poller.register(self.conn.sock, zmq.POLLIN)
        self._poller.register(self._wake_r, zmq.POLLIN)
        self._beat_at = 0.0

    def run(self) -> None:
        try:
            while True:
                self._send_counts()
                self._beat()
                self._tend()
                waiting = self.share.waiting or bool(self.backlog)
                events = dict(self._poller.poll(0 if waiting else POLL_MS))
                if self._wake_r in events:
                    self._drain_wakes()
                if not self._take_messages():
                    return
                if not self._step() and not events and self.watch.gone():
                    log.warning("supervisor is gone; exiting")
                    return
        finally:
            self._stop_readers()

    # --- messages ----------------------------------------------------------------------------------

    def _take_messages(self) -> bool:
        """Every message waiting from the hub, each handled; False on a STOP of the worker."""
        while self.backlog or self.conn.poll(0):
            received = self.backlog.popleft() if self.backlog else self.conn.receive()
            if received is None:
                continue
            header, tensors = received
            kind = header["type"]
            if kind == msg.SHARE:
                self._share_message(header)
            elif kind in (msg.POOL, msg.GRANT, msg.STOP) and header.get("source") in self.shared:
                self._source_message(self.shared[str(header["source"])], kind, header)
            elif kind == msg.STOP and header.get("source") is None:
                return False
            elif kind == msg.GRANT:
                continue  # a source that left: its slots are the hub's again when it comes back
            elif not self.handle(header, tensors):
                return False
        return True

    def _share_message(self, header: Mapping[str, Any]) -> None:
        if isinstance(header.get("add"), str):
            self._add(header["add"], header.get("item"))
        elif isinstance(header.get("drop"), str):
            self._release(header["drop"])

    def _source_message(self, one: Shared, kind: str, header: Mapping[str, Any]) -> None:
        if kind == msg.POOL and header.get("pool"):
            after = header.get("pts_after"), header.get("time_after")
            if type(after[0]) is int and isinstance(after[1], int | float):
                one.after = (after[0], float(after[1]))
            self._attach(one, dict(header["pool"]), header.get("next_seq"))
        elif kind == msg.GRANT:
            if one.pool is not None:  # granted before the pool came: the hub grants again after it
                one.free.extend(int(s) for s in header["slots"])
        elif kind == msg.STOP:
            one.reader.stop()

    def _add(self, source_id: str, item: Any) -> None:
        """A source joins the share: its reader starts. One the worker cannot build ends at once, alone."""
        if source_id in self.shared:
            return
        try:
            plan = self.plans.get(source_id) if item is None else None
            if plan is None:
                if self.spec.make_source is None or not isinstance(item, dict):
                    raise LookupError(f"source {source_id} is not one this worker can read")
                plan = self.spec.make_source(item)
            reader = SourceReader(plan, self.share, wake=self._wake, wait_for_pool=True)
        except Exception as exc:
            log.warning("source %s cannot start here: %s", source_id, one_line(exc))
            self.conn.send({"type": msg.EOS, "source": source_id, "frames": 0, "error": one_line(exc)})
            return
        self.shared[source_id] = Shared(reader.start())

    def _release(self, source_id: str) -> None:
        """The source moves to another worker: its reader stops, the frame it had waiting is lost and
        counted, and the hub hears where its seqs stopped (SHARE released) before it restarts there."""
        one = self.shared.pop(source_id, None)
        if one is None:
            self.conn.send({"type": msg.SHARE, "released": source_id, "lost": 0})
            return
        one.reader.stop()
        one.reader.join(STOP_WAIT_S)
        ended = one.reader.counts
        counts = ended if ended is not None else self.share.remove(source_id)
        self._detach(one)
        lost = counts.lost + counts.overflow - one.told.overflow + counts.stale - one.told.stale + one.no_slot
        self.conn.send({"type": msg.SHARE, "released": source_id, "lost": lost, "next_seq": one.next_seq})

    def _attach(self, one: Shared, wire: dict[str, Any], next_seq: Any) -> None:
        """The hub made (or kept) the source's pool: the reader may read frames from now on."""
        one.pool, one.pool_wire = self.pools.get(wire), wire
        one.next_seq = next_seq if type(next_seq) is int else 0
        one.free.clear()
        audio = ring_of(wire)
        source = one.reader.source
        if audio is not None and isinstance(source, AudioFrameSource):
            source.attach_audio(AudioRing.attach(AudioRingLayout.from_wire(audio)))
        one.reader.pool_ready.set()

    def _detach(self, one: Shared) -> None:
        if one.pool is not None:
            self.pools.drop(one.pool.layout.name)
            one.pool = None

    # --- the sources ---------------------------------------------------------------------------------

    def _tend(self) -> None:
        """Streams opened are announced, ended sources get their EOS, live counters go out."""
        for source_id, one in list(self.shared.items()):
            reader = one.reader
            if not one.announced and reader.info is not None:
                one.announced = True
                self.conn.send({"type": msg.STREAM, "source": source_id, "info": reader.info})
            if one.stats is None and reader.source is not None:
                one.stats = SourceStats(source_id, reader.source)
            if one.stats is not None:
                one.stats.send(self.conn, states=not reader.closing)
            if reader.ended:
                self._end(source_id, one)

    def _end(self, source_id: str, one: Shared) -> None:
        """Its reader ended and its last frame left the share: the drops not yet told, then its EOS."""
        del self.shared[source_id]
        counts = one.reader.counts or Counts()
        dropped = counts.overflow - one.told.overflow + one.no_slot
        stale = counts.stale - one.told.stale
        if dropped or stale:
            self.conn.send({"type": msg.STATS, "source": source_id, "dropped": dropped, "stale": stale})
        if one.stats is not None:  # the reader has closed the source: its state says nothing now
            one.stats.send(self.conn, force=True, states=False)
        eos: dict[str, Any] = {"type": msg.EOS, "source": source_id, "frames": one.next_seq}
        if one.reader.error:
            eos["error"] = one.reader.error
        self.conn.send(eos)
        self._detach(one)

    def _stop_readers(self) -> None:
        for one in self.shared.values():
            one.reader.stop()
        for one in self.shared.values():
            one.reader.join(STOP_WAIT_S)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _beat(self) -> None:
        """A word to the hub every BEAT_S: a worker whose frames never pass through the hub's hands is
        known to be alive (not hung in a stage call) by that (Lifecycle.kill_stalled)."""
        now = time.monotonic()
        if now - self._beat_at >= BEAT_S:
            self._beat_at = now
            self.conn.send({"type": msg.STATUS, "beat": True})

    def _wake(self) -> None:
        """A reader's sign (from its thread) that the loop has something to do."""
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (the loop wakes anyway) or closed (the worker is ending)

    def _drain_wakes(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    # --- a frame -------------------------------------------------------------------------------------

    def _step(self) -> bool:
        """The next live frame through the stage, if one waits: True if one was taken."""
        waiting = self.share.take(0)
        if waiting is None:
            return False
        one = self.shared.get(waiting.source)
        if one is None or one.pool is None:
            return True  # it left while its frame waited
        if not one.free:
            one.no_slot += 1
            return True
        self._run(one, waiting, one.free.popleft())
        limit = one.reader.options.max_frames
        if limit is not None and one.next_seq >= limit:  # counted over its readers: one opened again goes on
            one.reader.stop()
        return True

    def _run(self, one: Shared, waiting: Waiting, slot: int) -> None:
        assert one.pool is not None
        seq = one.next_seq
        one.next_seq += 1
        pts, time_s = one.clock(int(waiting.pts), float(waiting.time_s))
        every = one.reader.options.trace_every
        frame = Frame(
            waiting.source, seq, pts, time_s, int(waiting.image.shape[1]),
            int(waiting.image.shape[0]), slot=slot, pool=one.pool, pool_wire=one.pool_wire,
            trace=traceparent() if every is not None and seq % every == 0 else None,
        )
        error: str | None = None
        outs: list[Frame] = []
        try:
            write_picture(one.pool.view(slot, "image"), waiting.image, waiting.source, seq)
            frame.timings[DECODE] = [waiting.read_wall, time.time()]
            started = time.time()
            outs = list(self.stage.process(frame))
            if len(outs) > 1:
                raise RuntimeError(f"stage {self.spec.stage} returned {len(outs)} frames for one")
            (outs[0] if outs else frame).timings.setdefault(self.spec.stage, [started, time.time()])
        except Exception as exc:  # this frame only: the worker's other frames and sources go on
            error = one_line(exc)
            log.error("%s failed on source %s seq %s: %s", self.spec.stage, waiting.source, seq, error)
            log.debug("%s failed", self.spec.stage, exc_info=True)
        out = outs[0] if outs and error is None else frame
        header = out.to_header()
        header.update(type=msg.LIVE, stage=self.spec.stage, slot=slot, **self._steps(one))
        if error is not None:
            header["failed"] = error
        self.conn.send(header, out.tensors if outs and error is None else None)

    def _steps(self, one: Shared) -> dict[str, int]:
        """What the hub has not heard of the source's counts: drops since its last frame, and reads."""
        counts = self.share.counts_of(one.reader.source_id) or one.reader.counts or one.told
        dropped = counts.overflow - one.told.overflow + one.no_slot
        stale = counts.stale - one.told.stale
        one.told, one.no_slot = counts, 0
        return {"dropped": dropped, "stale_n": stale, "read": counts.read}


def frame_step(info: Mapping[str, Any]) -> tuple[int, float]:
    """One frame's duration in the stream's time base and in seconds, from its info (`fps`, `time_base`
    as "num/den"); one tick and no time when it does not say."""
    try:
        fps, base = Fraction(str(info["fps"])), Fraction(str(info["time_base"]))
        return max(1, round(1 / (fps * base))), float(1 / fps)
    except (KeyError, ValueError, ZeroDivisionError):
        return 1, 0.0
