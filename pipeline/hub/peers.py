"""The workers as the hub sees them.

A `StageWorker` is a worker of a middle stage or an output, a child process reached over the hub's
ipc:// socket: it has credits (frames it may still take), the frames it holds, and `send`. A
decode worker takes no work: it is a `DecodeWorker`, one per source. Every worker runs on
this host, started by its fork server (the retired remote protocol's workers on other hosts are gone).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from framewire.pipeline.worker.hub_link import WorkerSpec
from framewire.pipeline.hub.header import FrameKey

Send = Callable[[bytes, dict[str, Any], Mapping[str, np.ndarray] | None], bool]
"""Send `header` and tensors to the peer with this identity on a socket; False if it is not reachable."""


class StageWorker:
    """A worker of a stage (or output): a child process of this host, started from `spec`."""

    def __init__(self, spec: WorkerSpec, process: Any, send: Send) -> None:
        self.stage = spec.stage
        self.index = spec.index
        self.name = spec.title.removeprefix("framewire: ")
        """How the logs call it: `infer[1]`."""
        self.identity = spec.identity
        self.spec = spec
        self.process = process
        self._send = send
        self.credits = 0
        self.ready = False
        self.finished = False
        self.inflight: dict[FrameKey, float] = {}
        """The frames it holds, with when each was sent (monotonic)."""
        self.stalled: str | None = None
        """Why the hub killed it as hung, for its death's message."""
        self.backend_down: str | None = None
        """Why its backend does not answer (its STATUS), while it waits for it; None: it answers."""
        self.heard = 0.0
        """When it last sent anything (monotonic): a live-layout worker says something every second."""
        self.held = False
        """Given no new work, though up: a worker of a new generation not yet taking over, or an old
        one retiring (pipeline.hub.swap)."""

    @property
    def available(self) -> bool:
        """It may be given work."""
        return self.ready and not self.finished and not self.held

    @property
    def starting(self) -> bool:
        """Started, not READY yet."""
        return not self.ready and not self.finished

    def send(self, header: dict[str, Any], tensors: Mapping[str, np.ndarray] | None = None) -> bool:
        return self._send(self.identity, header, tensors)

    def announce(self, credits: int) -> None:
        """Its READY: the credits it asks for (less what it already holds)."""
        self.ready = True
        self.credits = max(1, credits) - len(self.inflight)

    def give_back(self, key: FrameKey) -> bool:
        """An answer for a frame it held: the credit comes back. False if it did not hold it."""
        if key not in self.inflight:
            return False
        del self.inflight[key]
        self.credits += 1
        return True


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
    """The peers of every stage, by stage name."""

    by_stage: dict[str, list[StageWorker]] = field(default_factory=dict)

    def of(self, stage: str) -> list[StageWorker]:
        return self.by_stage.get(stage, [])

    def add(self, peer: StageWorker, *, beside: bool = False) -> None:
        """Add `peer`; it replaces the dead worker of the same index it restarts, unless `beside`
        (a new generation starting next to the one it replaces: pipeline.hub.swap)."""
        peers = self.by_stage.setdefault(peer.stage, [])
        if not beside:
            peers[:] = [p for p in peers if p.index != peer.index]
        peers.append(peer)

    def remove(self, peer: StageWorker) -> None:
        self.by_stage[peer.stage] = [p for p in self.of(peer.stage) if p is not peer]

    def has_ready(self, stage: str) -> bool:
        return any(peer.ready for peer in self.of(stage))

    def all(self) -> Iterator[StageWorker]:
        for peers in self.by_stage.values():
            yield from peers



class ShareWorker:
    """A live source read by a worker of the model's stage (the live layout: pipeline.hub.shares) as the
    inputs see it: what they would send its decode worker (POOL, GRANT, STOP) goes to the worker whose
    share holds it now, naming the source; nothing goes while that worker is down or not READY yet
    (it is told again when it opens the source: Inputs.on_stream)."""

    def __init__(self, source_id: str, peer_of: Callable[[str], StageWorker | None]) -> None:
        self.source_id = source_id
        self._peer_of = peer_of
        self.finished = False

    @property
    def name(self) -> str:
        peer = self._peer_of(self.source_id)
        return f"{peer.name if peer is not None else 'no worker'} (source {self.source_id})"

    def send(self, header: dict[str, Any]) -> bool:
        peer = self._peer_of(self.source_id)
        if peer is None or not peer.available:
            return False
        return peer.send({**header, "source": self.source_id})
