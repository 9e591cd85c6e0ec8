"""The live layout as the hub keeps it: which worker of the model's stage reads each live source.

With `stages.layout: live` the model's stage is marked `decodes_sources` (stages.live_layout), and its
workers read the live sources themselves (pipeline.worker.live_loop). Here the hub keeps the share-out
(`share_out`: even, and a source that comes moves none), tells each worker its share (SHARE add) when
it is READY (at start, or restarted after a death: its sources come back with it), and when a source
goes and the shares differ by two, moves one: the worker that has it lets go (SHARE drop, answered
SHARE released) before the one it goes to opens it. What becomes of a source's frames and counts when
they come back (LIVE), when it opens again or when its worker dies: hub.live_frames.

The sources' records stay the inputs' (hub.inputs): only where their messages go differs
(peers.ShareWorker). A block source (a file) keeps its decode worker in either layout.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from framewire.pipeline.hub.peers import Roster, ShareWorker, StageWorker
from framewire.pipeline.plan import Policy, SourcePlan
from framewire.pipeline.stagespec import Shares, StageSpec, share_out
from framewire.pipeline.wire import messages as msg

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

    def letting_go(self, index: int) -> list[str]:
        """The sources worker `index` was letting go of (it died before it said it had)."""
        return [sid for sid, old in self.moving.items() if old == index]

    def _tell(self, peer: StageWorker | None, source_id: str) -> None:
        if peer is not None and peer.available:
            peer.send({"type": msg.SHARE, "add": source_id, "item": self._items.get(source_id)})
