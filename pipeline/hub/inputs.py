"""The sources as the hub sees them: their decode workers, frame pools, slots and counters.

A source's decode worker says STREAM when it has opened its source: the hub makes the source's
frame pool (its slots sized by the plan's slot layout for that stream) and sends it POOL; once
every stage has a worker up, it GRANTs the slots. Each FRAME enters the routing; each slot comes
back to the source when every output is done with its frame: freed slots are held back while the
source still has half its slots at hand, then GRANTed together (one message for several frames,
not one a frame: each message wakes two processes). EOS ends the source; STATS
carry a live source's counters. A source whose outputs have all closed is retired: its pool is
unlinked, and its record (state, counts, last error) stays in `ended` for `GET /sources` and the
metrics until the control API removes it for good.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from framewire.pipeline.wire import messages as msg
from framewire.pipeline.wire.audioring import AudioRing, AudioRingLayout
from framewire.pipeline.wire.framepool import FramePool, PoolLayout
from framewire.pipeline.wire.shm import segment_name
from framewire.pipeline.plan import Plan, Policy, Report, SourcePlan
from framewire.pipeline.hub.lifecycle import Lifecycle
from framewire.pipeline.hub.shares import LiveLayout
from framewire.pipeline.hub.peers import DecodeWorker, ShareWorker
from framewire.pipeline.hub.header import FrameHeader, FrameKey
from framewire.pipeline.hub.routing import FrameState, Router

log = logging.getLogger(__name__)

OVER_BUDGET_LOG_S = 10.0
"""A source over its latency budget is logged at once, then at most this often (with the count)."""


@dataclass
class SourceRecord:
    """One source: its plan, decode worker, pool, and what happened to its frames."""

    plan: SourcePlan
    worker: DecodeWorker | ShareWorker | None = None
    info: dict[str, Any] | None = None
    pool: FramePool | None = None
    wire: dict[str, Any] | None = None
    """Its pool (and audio ring) as POOL names them."""
    ring: AudioRing | None = None
    """The source's audio ring (wire.audioring), when its stream asked for one."""
    ungranted: list[int] = field(default_factory=list)
    """Its pool's slots, before granting has begun."""
    spare: int = 0
    """Slots its decode worker holds: granted and not yet come back in a FRAME (at most that many:
    a FRAME on its way here has already taken one)."""
    held: list[int] = field(default_factory=list)
    """Freed slots not yet granted: they go when `spare` falls below `low_water`."""
    low_water: int = 1
    stopping: bool = False
    closed: set[str] = field(default_factory=set)
    """Outputs that closed the source's files."""
    done_frames: int = 0
    first_in: float | None = None
    last_done: float | None = None
    """When its first frame came in and its last one was written (monotonic): the time it ran."""
    read: int | None = None
    """Frames its decode worker delivered, known at its end of stream."""
    failed: int = 0
    dropped: int = 0
    error: str | None = None
    # Live sources: decode's STATS (increments) and the stale drops counted here.
    stale: int = 0
    overflow: int = 0
    """Frames dropped in the hub because more of the live sources' frames waited than their
    `max_waiting` add up to (Router.trim); like stale ones, their seqs are gaps in the output."""
    reconnects: int = 0
    offline_s: float = 0.0
    online: bool = True
    corrupt: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    over_budget: int = 0
    over_budget_logged: tuple[float, int] | None = None
    """When the last over-budget warning went out (monotonic) and the count it gave."""
    audio: dict[str, float] = field(default_factory=dict)
    """Audio counters from decode's STATS: windows by what the missing-audio policy did, gap seconds."""
    lost: int = 0
    """The live layout: frames its worker had read and not sent on when it died or let go of it."""
    last: tuple[int, float] | None = None
    """The live layout: the pts and time of its last frame in, which a worker that opens it again goes on from."""
    live_read: int = 0
    live_out: int = 0
    """The live layout: frames its current worker says it read, and of them those heard of since
    (sent on, or dropped): what is between is what that worker holds (`lost` if it dies)."""

    @property
    def source_id(self) -> str:
        return self.plan.source_id

    def give_slot(self, slot: int) -> None:
        """A slot is free again: back to the decode worker (unless it has ended), at once when it
        holds fewer than `low_water` slots, else with the next ones (a source with half its slots
        at hand never waits for one: the drop and block policies behave as with a grant a frame)."""
        if self.worker is None or self.worker.finished or slot < 0:
            return
        self.held.append(slot)
        if self.spare < self.low_water:
            self.grant(self.held)
            self.held = []

    def grant(self, slots: list[int]) -> None:
        assert self.worker is not None
        self.worker.send({"type": msg.GRANT, "slots": slots})
        self.spare += len(slots)

    def frame_done(self) -> None:
        """Every output wrote one of its frames."""
        self.done_frames += 1
        self.last_done = time.monotonic()

    def output_late(self, seq: int, latency_ms: float) -> None:
        """Count a frame output after the source's latency budget; warn now and then, not per frame."""
        budget = self.plan.options.latency_budget_ms
        if not budget or latency_ms <= budget:
            return
        self.over_budget += 1
        now = time.monotonic()
        last = self.over_budget_logged
        if last is None or now - last[0] >= OVER_BUDGET_LOG_S:
            since = self.over_budget - (last[1] if last else 0)
            log.warning(
                "source %s: seq %d took %.0f ms end to end, over its latency budget of %g ms "
                "(%d frame(s) over since the last warning, %d in all)",
                self.source_id, seq, latency_ms, budget, since, self.over_budget,
            )
            self.over_budget_logged = (now, self.over_budget)

    def fold_into(self, report: Report) -> None:
        """Its counts into the job's report (when it retires, or at the end)."""
        sid = self.source_id
        report.frames[sid] = self.done_frames
        report.read[sid] = self.read if self.read is not None else self.done_frames
        report.failed[sid] = self.failed
        report.dropped[sid] = self.dropped + self.stale + self.overflow + self.lost
        report.stale[sid] = self.stale
        report.overflow[sid] = self.overflow
        report.reconnects[sid] = self.reconnects
        report.offline_s[sid] = round(self.offline_s, 3)
        if self.first_in is not None and self.last_done is not None:
            report.active_s[sid] = round(self.last_done - self.first_in, 3)
        if self.rejected:
            report.rejected[sid] = dict(self.rejected)
        if self.plan.options.latency_budget_ms:
            report.over_budget[sid] = self.over_budget
        if self.error:
            report.source_errors[sid] = self.error


class Inputs:
    """Every source of the job, and the messages of their decode workers."""

    def __init__(self, plan: Plan, router: Router, lifecycle: Lifecycle, live: LiveLayout | None = None) -> None:
        self.plan = plan
        self.router = router
        self.lifecycle = lifecycle
        self.live = live
        """The live layout's share-out, when the job asks for it: its live sources have no decode worker."""
        self.sources: dict[str, SourceRecord] = {}
        self.ended: dict[str, SourceRecord] = {}
        """Retired sources: their pools are gone, their counts stay until `forget`."""
        self.granting = False
        """Slots are granted once every stage has a worker up (`start_granting`)."""
        self._next_index = 0
        self._pools_made = 0

    def add(self, source: SourcePlan) -> SourceRecord:
        """A source, with its decode worker started."""
        record = SourceRecord(source)
        self.sources[source.source_id] = record
        self.router.open(source.source_id)
        options = source.options
        if options.waiting_limit is not None:
            self.router.bound(source.source_id, options.waiting_limit, keep_newest=options.policy == Policy.DROP_OLDEST)
        if self.live is not None and self.live.takes(source):
            record.worker = self.live.add(source)
            return record
        record.worker = self.lifecycle.start_decode(source, self._next_index)
        self._next_index += 1
        return record

    def of(self, worker: DecodeWorker | ShareWorker) -> SourceRecord:
        return self.sources[worker.source_id]

    # --- messages from decode workers -----------------------------------------------------------

    def handle(
        self, worker: DecodeWorker | ShareWorker, kind: str, header: dict[str, Any], tensors: dict[str, np.ndarray]
    ) -> SourceRecord | None:
        """A decode worker's message; returns the source when it has just opened (STREAM)."""
        if kind == msg.FRAME:
            self.on_frame(worker, header, tensors)
        elif kind == msg.STREAM:
            return self.on_stream(worker, header)
        elif kind == msg.EOS:
            self.on_eos(worker, header)
        elif kind == msg.STATS:
            self.on_stats(worker, header)
        else:
            log.warning("unexpected %s message for source %s", kind, worker.source_id)
        return None

    def on_stream(self, worker: DecodeWorker | ShareWorker, header: dict[str, Any]) -> SourceRecord:
        """The source opened: its pool is made and sent; slots follow when granting has begun (one of
        the live layout that opens again keeps its pool: hub.live_frames.reopen)."""
        record = self.of(worker)
        info = dict(header.get("info") or {})
        if record.plan.ran_before:  # the outputs write beside the earlier run's files (SourcePlan)
            info["ran_before"] = True
        record.info = info
        first = info.get("first_seq")
        if type(first) is int and first > 0:  # a resumed file: its frames go on from there
            self.router.start_at(record.source_id, first)
        if record.stopping:
            worker.send({"type": msg.STOP})
        regions = self.plan.slot_layout(record.source_id, info)
        self._pools_made += 1
        name = segment_name(os.getpid(), self._pools_made, record.source_id)
        layout = PoolLayout.plan(name, self.plan.slots_per_source, regions)
        record.pool = FramePool.create(layout)
        wire = layout.to_wire()
        audio = info.get("audio")
        if isinstance(audio, dict):  # the frames' pool names the ring too: every stage finds it there
            rate = int(audio["rate"])
            ring_name = segment_name(os.getpid(), self._pools_made, f"audio-{record.source_id}")
            ring = AudioRingLayout(ring_name, rate, max(1, int(float(audio["capacity_s"]) * rate)))
            record.ring = AudioRing.create(ring)
            wire["audio"] = ring.to_wire()
        log.info(
            "source %s: %sx%s, pool of %d slots (%.1f MiB)",
            record.source_id, info.get("width"), info.get("height"), layout.slots, layout.total_bytes / 2**20,
        )
        record.wire = wire
        worker.send({"type": msg.POOL, "source": record.source_id, "pool": wire, "next_seq": self.router.received(record.source_id)})
        record.ungranted = list(range(layout.slots))
        record.spare, record.held, record.low_water = 0, [], max(1, layout.slots // 2)
        self.grant_waiting()
        return record

    def on_frame(self, worker: DecodeWorker | ShareWorker, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        """A frame in its slot (its header read once, here: a decode worker speaks for its own source)."""
        record = self.of(worker)
        head = FrameHeader.read(header, record.source_id)
        record.spare -= 1
        if record.first_in is None:
            record.first_in = time.monotonic()
        record.dropped += head.dropped
        header.pop("dropped", None)
        header.pop("type", None)
        self.router.admit(head, header, dict(tensors))

    def on_eos(self, worker: DecodeWorker | ShareWorker, header: dict[str, Any]) -> None:
        record = self.of(worker)
        worker.finished = True
        if header.get("error"):
            record.error = str(header["error"])
            # Alone, the job's final error line says it; beside others, say it as it happens.
            level = logging.WARNING if len(self.sources) > 1 else logging.INFO
            log.log(level, "source %s ended with an error: %s", record.source_id, record.error)
        record.read = self.router.end(record.source_id, int(header.get("frames", self.router.received(record.source_id))))

    def on_stats(self, worker: DecodeWorker | ShareWorker, header: dict[str, Any]) -> None:
        record = self.sources.get(str(header.get("source")))
        if record is None:
            return
        if record.stopping and record.info is None:  # a live source still connecting: tell it again
            worker.send({"type": msg.STOP})
        try:
            record.dropped += int(header.get("dropped", 0))
            record.stale += int(header.get("stale", 0))
            record.reconnects += int(header.get("reconnects", 0))
            record.offline_s += float(header.get("offline_s", 0.0))
            record.corrupt += int(header.get("corrupt", 0))
            if "online" in header:
                record.online = bool(header["online"])
            for reason, count in dict(header.get("rejected") or {}).items():
                record.rejected[str(reason)[:32]] = record.rejected.get(str(reason)[:32], 0) + int(count)
            for what, count in dict(header.get("audio") or {}).items():
                record.audio[str(what)[:32]] = record.audio.get(str(what)[:32], 0) + float(count)
        except (TypeError, ValueError) as exc:
            log.warning("source %s: bad STATS message: %s", record.source_id, exc)

    def on_death(self, worker: DecodeWorker, how: str) -> None:
        """A decode worker died: its source ends with the frames it had sent; the others go on."""
        record = self.of(worker)
        record.error = f"decode worker for source {record.source_id} died ({how})"
        log.warning("%s", record.error)
        worker.finished = True
        record.read = self.router.end(record.source_id, self.router.received(record.source_id))

    def drop_stale(self, key: FrameKey) -> None:
        """A frame that reached inference too late (the source's `max_staleness_ms`): it is dropped,
        not passed on unprocessed, so no output shows it as if it had been processed (a video file
        of a live source simply has fewer frames). Its slot goes straight back to the source, the
        order steps over its seq, and it counts as dropped, reason "stale"."""
        state = self.router.drop(key)
        record = self.sources[key.source]
        record.stale += 1
        if state is not None:
            record.give_slot(state.slot)

    def drop_waiting(self, states: list[FrameState]) -> None:
        """Frames dropped while they waited for a worker, past the live sources' `max_waiting`
        (Router.trim): counted, reason "overflow"; their slots go back."""
        for state in states:
            record = self.sources.get(state.head.key.source)
            if record is not None:
                record.overflow += 1
                record.give_slot(state.slot)

    # --- slots, stops, retirement -----------------------------------------------------------------

    def start_granting(self) -> None:
        self.granting = True
        self.grant_waiting()

    def grant_waiting(self) -> None:
        if not self.granting:
            return
        for record in self.sources.values():
            if record.ungranted and record.worker is not None and not record.worker.finished:
                record.grant(record.ungranted)
                record.ungranted = []

    def stop(self, record: SourceRecord) -> None:
        """Ask a source to stop reading. Remembered: a decode worker that has not connected yet
        cannot be sent anything, so it is told again when it first speaks (STREAM or STATS)."""
        record.stopping = True
        if record.worker is not None and not record.worker.finished:
            record.worker.send({"type": msg.STOP})

    def finished(self, record: SourceRecord) -> bool:
        """Its end of stream went to the outputs and every one of them closed it."""
        return self.router.ended(record.source_id) and record.closed >= set(self.plan.output_names)

    def retire_finished(self, report: Report, drop_pool: Callable[[str, str], None]) -> list[str]:
        """Sources whose outputs are all closed: unlink their pools (`drop_pool(source, pool)` lets
        the workers unmap them), keep only their records, in `ended`. A daemon that adds and removes
        sources for weeks holds no pool, process or routing state of them."""
        retired: list[str] = []
        for sid, record in list(self.sources.items()):
            if not self.finished(record) or self.router.in_flight(sid):
                continue
            record.fold_into(report)
            if record.ring is not None:
                record.ring.close()
                record.ring = None
            if record.pool is not None:
                name = record.pool.layout.name
                record.pool.close()
                record.pool = None
                drop_pool(sid, name)
            del self.sources[sid]
            self.ended[sid] = record
            self.router.close(sid)
            if self.live is not None and isinstance(record.worker, ShareWorker):
                self.live.remove(sid)
            retired.append(sid)
        return retired

    def forget(self, source_id: str) -> bool:
        """Drop an ended source's record (DELETE of an ended source); False if there is none."""
        return self.ended.pop(source_id, None) is not None

    def every(self) -> list[SourceRecord]:
        """Running sources, then ended ones."""
        return [*self.sources.values(), *self.ended.values()]

    def close_pools(self) -> None:
        for record in self.sources.values():
            if record.ring is not None:
                record.ring.close()
                record.ring = None
            if record.pool is not None:
                record.pool.close()
                record.pool = None

    def expected_total(self, retired_frames: int) -> int | None:
        """Frames the job will output in all, when every source says (for the progress bar)."""
        total = retired_frames
        for sid, record in self.sources.items():
            counted = (record.info or {}).get("frame_count")
            limit = record.plan.options.max_frames
            flow = self.router.flows.get(sid)
            first = flow.first if flow is not None else 0  # a resumed file's earlier frames are not done here
            if self.router.ending(sid):
                total += (self.router.flows[sid].eos_frames or 0) - first
            elif isinstance(counted, int) and counted > 0:
                total += (min(counted, limit) if limit else counted) - first
            elif record.plan.expected_frames is not None:
                total += record.plan.expected_frames
            else:
                return None
        return total

    def describe(self, record: SourceRecord) -> dict[str, Any]:
        """A source for `GET /sources`: opening, running, draining (read to its end, its frames and
        files being finished), ended or failed (ended with an error)."""
        sid = record.source_id
        state = "running"
        if sid in self.ended:  # retired: its outputs have closed its files
            state = "failed" if record.error else "ended"
        elif self.router.ending(sid) or self.router.ended(sid):
            state = "draining"
        elif record.info is None:
            state = "opening"
        return {
            "id": sid,
            "state": state,
            "frames": record.done_frames,
            "read": record.read if record.read is not None else self.router.received(sid),
            "dropped": record.dropped,
            "stale": record.stale,
            "overflow": record.overflow,
            "over_budget": record.over_budget,
            "failed": record.failed,
            "lost": record.lost,
            "reconnects": record.reconnects,
            "offline_s": round(record.offline_s, 3),
            "online": record.online and state not in ("draining", "ended", "failed"),  # read no more
            "corrupt": record.corrupt,
            "rejected": dict(record.rejected),
            "error": record.error,
            "width": (record.info or {}).get("width"),
            "height": (record.info or {}).get("height"),
        }
