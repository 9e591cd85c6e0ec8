"""The workers as the hub sees them: one small interface for a stage worker, wherever it runs.

A `Peer` is a worker of a middle stage or an output: it has credits (frames it may still take), the
frames it holds, the slot regions it reads and writes, and `send`. A `LocalPeer` is a child process
reached over the hub's ipc:// socket; a `RemotePeer` is a `worker` command's process on another
host, reached over the tcp:// listener, which takes the slot regions it reads inline. A decode
worker is not a peer (it takes no work): it is a `DecodeWorker`, one per source.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from framewire.pipeline.worker.hub_link import WorkerSpec
from framewire.pipeline.hub.header import FrameKey
from framewire.pipeline.hub.routing import FrameState

Send = Callable[[bytes, dict[str, Any], Mapping[str, np.ndarray] | None], bool]
"""Send `header` and tensors to the peer with this identity on a socket; False if it is not reachable."""


class Peer:
    """A worker of a stage (or output), local or remote."""

    def __init__(self, stage: str, index: int, name: str, send: Send, identity: bytes) -> None:
        self.stage = stage
        self.index = index
        self.name = name
        """How the logs call it: `infer[1]`, `remote infer host:123.0`."""
        self.identity = identity
        self._send = send
        self.credits = 0
        self.ready = False
        self.finished = False
        self.inflight: dict[FrameKey, float] = {}
        """The frames it holds, with when each was sent (monotonic)."""
        self.reads: frozenset[str] = frozenset()
        self.writes: frozenset[str] = frozenset()
        self.backend_down: str | None = None
        """Why its backend does not answer (its STATUS), while it waits for it; None: it answers."""

    @property
    def available(self) -> bool:
        """It may be given work."""
        return self.ready and not self.finished

    @property
    def starting(self) -> bool:
        """Started, not READY yet."""
        return not self.ready and not self.finished

    def send(self, header: dict[str, Any], tensors: Mapping[str, np.ndarray] | None = None) -> bool:
        return self._send(self.identity, header, tensors)

    def work(self, key: FrameKey, state: FrameState) -> Mapping[str, np.ndarray]:
        """The tensors that go with a frame to this worker."""
        return state.tensors

    def announce(self, credits: int, writes: frozenset[str] | None = None) -> None:
        """Its READY: the credits it asks for (less what it already holds) and what it writes."""
        self.ready = True
        self.credits = max(1, credits) - len(self.inflight)
        if writes is not None:
            self.writes = writes

    def give_back(self, key: FrameKey) -> bool:
        """An answer for a frame it held: the credit comes back. False if it did not hold it."""
        if key not in self.inflight:
            return False
        del self.inflight[key]
        self.credits += 1
        return True


class LocalPeer(Peer):
    """A child process of this host, started from `spec`."""

    def __init__(self, spec: WorkerSpec, process: Any, send: Send) -> None:
        super().__init__(spec.stage, spec.index, spec.title.removeprefix("framewire: "), send, spec.identity)
        self.spec = spec
        self.process = process
        self.stalled: str | None = None
        """Why the hub killed it as hung, for its death's message."""


class RemotePeer(Peer):
    """A worker on another host: its frames carry the slot regions it reads (wire.remote)."""

    def __init__(
        self,
        stage: str,
        index: int,
        route: bytes,
        send: Send,
        *,
        reads: frozenset[str],
        writes: frozenset[str],
        regions: Callable[[FrameKey, FrameState, frozenset[str]], Mapping[str, np.ndarray]],
        now: float,
    ) -> None:
        super().__init__(stage, index, f"remote {stage} {peer_name(route)}", send, route)
        self.reads = reads
        self.writes = writes
        self._regions = regions
        self.last_seen = now

    def work(self, key: FrameKey, state: FrameState) -> Mapping[str, np.ndarray]:
        names = self.reads & state.written
        if not names:
            return state.tensors
        return {**state.tensors, **self._regions(key, state, names)}


@dataclass
class DecodeWorker:
    """The process that reads one source into its frame pool."""

    spec: WorkerSpec
    process: Any
    send_to: Send
    finished: bool = False

    @property
    def identity(self) -> bytes:
        return self.spec.identity

    @property
    def source_id(self) -> str:
        return self.spec.source_id or ""

    def send(self, header: dict[str, Any]) -> bool:
        return self.send_to(self.identity, header, None)


@dataclass
class Roster:
    """The peers of every stage, local and remote, by stage name."""

    by_stage: dict[str, list[Peer]] = field(default_factory=dict)

    def of(self, stage: str) -> list[Peer]:
        return self.by_stage.get(stage, [])

    def add(self, peer: Peer) -> None:
        """Add `peer`; a local one replaces the dead worker of the same index it restarts."""
        peers = self.by_stage.setdefault(peer.stage, [])
        if isinstance(peer, LocalPeer):
            peers[:] = [p for p in peers if not (isinstance(p, LocalPeer) and p.index == peer.index)]
        peers.append(peer)

    def remove(self, peer: Peer) -> None:
        self.by_stage[peer.stage] = [p for p in self.of(peer.stage) if p is not peer]

    def has_ready(self, stage: str) -> bool:
        return any(peer.ready for peer in self.of(stage))

    def all(self) -> Iterator[Peer]:
        for peers in self.by_stage.values():
            yield from peers


def peer_name(route: bytes) -> str:
    """A remote peer's routing id, readable and bounded, for the logs."""
    return route[:64].decode("utf-8", "replace")
