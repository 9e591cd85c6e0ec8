"""The live layout's frames as the hub takes them: a LIVE frame admitted past the stage that read and ran
it, a source opened again on a worker (restarted, or moved to), and a worker's death, with what each
does to the source's record and counts (the share-out itself: hub.shares)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from framewire.pipeline.errors import JobFailed
from framewire.pipeline.hub.header import FrameHeader, ResultHeader
from framewire.pipeline.hub.inputs import Inputs, SourceRecord
from framewire.pipeline.hub.observer import HubObserver
from framewire.pipeline.hub.peers import ShareWorker, StageWorker
from framewire.pipeline.hub.routing import Router
from framewire.pipeline.hub.shares import LiveLayout
from framewire.pipeline.plan import Plan
from framewire.pipeline.wire import messages as msg

log = logging.getLogger(__name__)


class LiveFrames:
    """What a worker of the live layout sends for the sources of its share, taken on the hub's loop."""

    def __init__(
        self,
        live: LiveLayout,
        inputs: Inputs,
        plan: Plan,
        observer: HubObserver,
        from_decode: Callable[[ShareWorker, dict[str, Any], dict[str, np.ndarray]], None],
    ) -> None:
        self.live, self.inputs, self.router, self.plan = live, inputs, inputs.router, plan
        self.observer, self._from_decode = observer, from_decode

    def take(self, peer: StageWorker, kind: str, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        """A message from a worker of the stage that reads the live sources, about one of them: a frame
        (LIVE), a source let go of (SHARE released), or what a decode worker would say (STREAM, EOS, STATS)."""
        sid = str(header.get("released") if kind == msg.SHARE else header.get("source"))
        record = self.inputs.sources.get(sid)
        if record is None or not isinstance(record.worker, ShareWorker):
            log.debug("%s message from %s for source %s, which it does not read", kind, peer.name, sid)
        elif kind == msg.LIVE:
            admit(record, peer.stage, header, tensors, self.router, self.plan, self.observer)
        elif kind == msg.STREAM and record.pool is not None:  # opened again: its pool, order and outputs stay
            reopen(record, self.router)
            self.inputs.grant_waiting()
        elif kind == msg.SHARE:
            lost = header.get("lost", 0)
            record.lost += lost if type(lost) is int else 0
            self.live.released(sid, self.running)
        else:
            self._from_decode(record.worker, header, tensors)

    def running(self, source: str) -> bool:
        """The source is listed and has not said its end (a live worker may start reading it)."""
        return source in self.inputs.sources and not self.router.ending(source)

    def lose(self, index: int) -> None:
        """Worker `index` died: the frames its sources' records say it held are lost (counted); they
        open again with its restart, and those it was letting go of on their new worker."""
        for sid in self.live.shares[index] + tuple(self.live.letting_go(index)):
            record = self.inputs.sources.get(sid)
            if record is not None and isinstance(record.worker, ShareWorker):
                lose_worker(record, self.router)
        for sid in self.live.letting_go(index):
            self.live.released(sid, self.running)


def reopen(record: SourceRecord, router: Router) -> None:
    """A live source opened again on a worker (its own restarted, or the one it moved to): it keeps its
    pool, and its frames go on from the next seq. Its slots are those no frame in flight holds (the
    last worker's are free: what it held is gone with it), granted again from none."""
    assert record.pool is not None and record.worker is not None
    sid = record.source_id
    in_use = {state.slot for key, state in router.frames.items() if key.source == sid}
    record.ungranted = [slot for slot in range(record.pool.layout.slots) if slot not in in_use]
    record.spare, record.held = 0, []
    record.live_read = record.live_out = 0
    pool: dict[str, Any] = {"type": msg.POOL, "source": sid, "pool": record.wire, "next_seq": router.received(sid)}
    if record.last is not None:  # the new reader's clock starts again: its frames go on after these
        pool["pts_after"], pool["time_after"] = record.last
    record.worker.send(pool)
    if record.stopping:
        record.worker.send({"type": msg.STOP})


def admit(
    record: SourceRecord,
    stage: str,
    header: dict[str, Any],
    tensors: dict[str, np.ndarray],
    router: Router,
    plan: Plan,
    observer: HubObserver,
) -> None:
    """A LIVE frame: read by a worker of `stage` itself, with what the stage made of it (or its failure),
    into the routing past that stage, its counts into the source's record."""
    head = FrameHeader.read(header, record.source_id)
    count_frame(record, header)
    time_s = header.get("time")
    record.last = (head.pts, float(time_s) if isinstance(time_s, int | float) else 0.0)
    record.spare -= 1
    record.first_in = record.first_in if record.first_in is not None else time.monotonic()
    record.dropped += head.dropped
    failed = header.pop("failed", None)
    for name in ("type", "stage", "dropped"):
        header.pop(name, None)
    at = router.stages.index(stage)
    if isinstance(failed, str):
        if not plan.skip_failed_frames:
            raise JobFailed(f"{stage} failed on source {head.source} frame {head.seq}: {failed}")
        router.fail(router.admit(head, header, {}, at=at), stage, failed)
        record.failed += 1
        observer.on_failed(head.source, stage)
        return
    spans, spec = ResultHeader.read(header), plan.spec(stage)
    for name in spec.runs:
        observer.on_stage_done(head.source, name, spans.span(name))
    if spec.feeds_tracks:
        observer.on_track_result(head.source, header.get("result"))
    router.admit(head, header, dict(tensors), at=at + 1)


def count_frame(record: SourceRecord, header: dict[str, Any]) -> None:
    """A LIVE frame's counts, as its worker gave them: drops since its last frame, and its reads."""
    dropped, stale, read = header.get("dropped", 0), header.pop("stale_n", 0), header.pop("read", 0)
    if type(stale) is int and type(read) is int and type(dropped) is int:
        record.stale += stale
        record.live_out += 1 + dropped + stale
        record.live_read = max(record.live_read, read)


def lose_worker(record: SourceRecord, router: Router) -> None:
    """Its worker died: what it had read and not sent on is lost, counted. A source it was stopping
    ends here (nobody will send its end); the others open again with the worker's restart."""
    record.lost += max(0, record.live_read - record.live_out)
    record.live_read = record.live_out = 0
    record.spare, record.held = 0, []
    if record.stopping and not router.ending(record.source_id):
        assert record.worker is not None
        record.worker.finished = True
        record.read = router.end(record.source_id, router.received(record.source_id))
