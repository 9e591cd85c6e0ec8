"""The live layout as the hub keeps it: which worker of the model's stage reads each live source.

With `stages.layout: live` the model's stage is marked `decodes_sources` (stages.live_layout), and its
workers read the live sources themselves (pipeline.worker.live_loop). Here the hub keeps the share-out
(`share_out`: even, and a source that comes moves none), tells each worker its share (SHARE add) when
it is READY (at start, or restarted after a death: its sources come back with it), and when a source
goes and the shares differ by two, moves one: the worker that has it lets go (SHARE drop, answered
SHARE released) before the one it goes to opens it. Frames come back as LIVE messages: the frame and
what its worker's stage made of it, admitted past that stage (Router.admit `at`).

The sources' records stay the inputs' (hub.inputs): only where their messages go differs
(peers.ShareWorker). A block source (a file) keeps its decode worker in either layout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from framewire.pipeline.errors import JobFailed
from framewire.pipeline.hub.header import FrameHeader, ResultHeader
from framewire.pipeline.hub.peers import Roster, ShareWorker, StageWorker
from framewire.pipeline.plan import Plan, Policy, SourcePlan
from framewire.pipeline.stagespec import Shares, StageSpec, share_out
from framewire.pipeline.wire import messages as msg

if TYPE_CHECKING:
    from framewire.pipeline.hub.inputs import SourceRecord
    from framewire.pipeline.hub.observer import HubObserver
    from framewire.pipeline.hub.routing import Router

log = logging.getLogger(__name__)


class LiveLayout:
    """The live sources shared out across the workers of the stage that decodes them."""

    def __init__(self, spec: StageSpec, roster: Roster) -> None:
        self.stage = spec.name
        self.workers = spec.workers
        self.shares: Shares = tuple(() for _ in range(spec.workers))
        """Filled as sources are added (`add`); the spec's own share-out is what `validate` shows."""
        self._roster = roster
        self._items: dict[str, Mapping[str, Any] | None] = {}
        self.moving: dict[str, int] = {}
        """Sources one worker is letting go of, for the next to open, by the index of the one letting go."""
        self.moves = 0

    @staticmethod
    def takes(source: SourcePlan) -> bool:
        """A live source (a drop policy) is read where the model runs; a block one keeps its decode worker."""
        return source.options.policy != Policy.BLOCK

    def index_of(self, source_id: str) -> int | None:
        return next((i for i, share in enumerate(self.shares) if source_id in share), None)

    def peer_at(self, index: int | None) -> StageWorker | None:
        return next((p for p in self._roster.of(self.stage) if p.index == index), None)

    def peer_of(self, source_id: str) -> StageWorker | None:
        """The worker that reads the source now; None while it moves or its worker is down."""
        if source_id in self.moving:
            return None
        return self.peer_at(self.index_of(source_id))

    def add(self, source: SourcePlan) -> ShareWorker:
        """A live source joins the worker with the fewest (no other source moves); it starts there now
        if that worker is up, else when it says READY."""
        sid = source.source_id
        self._items[sid] = source.item
        live = [s for share in self.shares for s in share if s != sid] + [sid]
        self.shares = share_out(live, self.workers, self.shares)
        self._tell(self.peer_of(sid), sid)
        return ShareWorker(sid, self.peer_of)

    def on_ready(self, peer: StageWorker, running: Callable[[str], bool]) -> None:
        """A worker of the stage is up (at start, or restarted): the running sources of its share start on it."""
        if peer.stage != self.stage or peer.index >= len(self.shares):
            return
        for sid in self.shares[peer.index]:
            if sid not in self.moving and running(sid):
                self._tell(peer, sid)

    def remove(self, source_id: str) -> None:
        """A source retired: it leaves its share, and if the shares now differ by two, one source moves."""
        self._items.pop(source_id, None)
        self.moving.pop(source_id, None)
        before = tuple(tuple(s for s in share if s != source_id) for share in self.shares)
        after = share_out([s for share in before for s in share], self.workers, before)
        was = {sid: index for index, share in enumerate(before) for sid in share}
        self.shares = after
        for index, share in enumerate(after):
            for sid in share:
                if was[sid] != index:
                    self._move(sid, was[sid], index)

    def _move(self, source_id: str, old: int, new: int) -> None:
        self.moves += 1
        log.info("source %s moves from %s[%s] to %s[%s]: the shares were uneven", source_id, self.stage, old, self.stage, new)
        peer = self.peer_at(old)
        if peer is not None and peer.available:
            self.moving[source_id] = old
            peer.send({"type": msg.SHARE, "drop": source_id})
        else:  # nobody to let go of it: it opens on its new worker (now, or when that one is up)
            self._tell(self.peer_at(new), source_id)

    def released(self, source_id: str, running: Callable[[str], bool]) -> None:
        """Its old worker let go of it (or died first): it opens on the one it moves to."""
        if self.moving.pop(source_id, None) is not None and running(source_id):
            self._tell(self.peer_of(source_id), source_id)

    def lose(
        self, index: int, records: Mapping[str, SourceRecord], router: Router, running: Callable[[str], bool]
    ) -> None:
        """Worker `index` died: the frames its sources' records say it held are lost (counted); they
        open again with its restart, and those it was letting go of on their new worker."""
        for sid in self.shares[index] + tuple(self.letting_go(index)):
            record = records.get(sid)
            if record is not None and isinstance(record.worker, ShareWorker):
                lose_worker(record, router)
        for sid in self.letting_go(index):
            self.released(sid, running)

    def letting_go(self, index: int) -> list[str]:
        """The sources worker `index` was letting go of (it died before it said it had)."""
        return [sid for sid, old in self.moving.items() if old == index]

    def _tell(self, peer: StageWorker | None, source_id: str) -> None:
        if peer is not None and peer.available:
            peer.send({"type": msg.SHARE, "add": source_id, "item": self._items.get(source_id)})


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
