"""The hub's tcp:// listener: workers of other hosts join, take frames inline and answer, or are lost.

A remote worker says READY (checked: its stage, credits, the regions it reads and writes) and
becomes a `RemotePeer` of its stage beside the local ones. Its WORK carries the slot regions it
reads; its RESULT carries back the regions it wrote, which are checked against the pool's layout
and copied into the slot before the frame goes on (wire.remote). Everything it sends is
untrusted: a bad message is counted and dropped, never fatal. A worker silent for `timeout_s`, or
one that says BYE or FATAL, is lost: the frames it held go to other workers. A stage that runs
only remotely fails the job when it has had no worker for `wait_s`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import zmq

from framewire.pipeline.errors import FramewireError, JobFailed
from framewire.pipeline.hub.header import FrameKey, ResultHeader
from framewire.pipeline.hub.inputs import Inputs
from framewire.pipeline.hub.observer import HubObserver
from framewire.pipeline.hub.peers import Peer, RemotePeer, Roster, peer_name
from framewire.pipeline.hub.routing import FrameState, Router
from framewire.pipeline.plan import Plan
from framewire.pipeline.wire import curve, remote
from framewire.pipeline.wire import messages as msg
from framewire.pipeline.wire.messages import bad_message_reason
from framewire.pipeline.wire.remote import RemoteSettings

log = logging.getLogger(__name__)

REMOTE_INDEX_BASE = 1000
"""Remote peers are numbered from here, apart from the local workers of the same stage."""


class FramePath(Protocol):
    """What the hub does with a worker's answers, wherever the worker runs (pipeline.hub.core.Hub)."""

    def on_ready(self, peer: Peer, header: dict[str, Any]) -> None: ...

    def on_result(self, peer: Peer, result: ResultHeader, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None: ...

    def on_failed(self, peer: Peer, key: FrameKey, error: str) -> None: ...

    def on_closed(self, peer: Peer, source: str) -> None: ...

    def on_event(self, peer: Peer, event: Any) -> None: ...

    def requeue(self, peer: Peer) -> list[FrameKey]: ...


class RemoteHub:
    """The listener socket and its peers."""

    def __init__(
        self,
        settings: RemoteSettings,
        plan: Plan,
        router: Router,
        inputs: Inputs,
        roster: Roster,
        observer: HubObserver,
        path: FramePath,
    ) -> None:
        self.settings = settings
        self.plan = plan
        self.router = router
        self.inputs = inputs
        self.roster = roster
        self.observer = observer
        self.path = path
        self.peers: dict[bytes, RemotePeer] = {}
        self._joined = 0
        self._missing_since: dict[str, float] = {}
        try:
            self.ctx, self.sock, self._auth = remote.open_listener(self.settings)
        except FramewireError as exc:
            raise JobFailed(str(exc), exc.exit_code) from None
        except zmq.ZMQError as exc:
            raise JobFailed(f"transport.listen: cannot listen on {self.settings.listen}: {exc}") from None
        log.info("listening for remote workers on %s", self.settings.listen)

    def receive_all(self) -> None:
        for _ in range(1000):
            try:
                parts = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self._handle(parts)

    def send(self, route: bytes, header: dict[str, Any], tensors: Mapping[str, np.ndarray] | None = None) -> bool:
        """Never blocks: a remote peer that does not read (its marks are full) is not waited for."""
        try:
            self.sock.send_multipart([route, *msg.encode(header, dict(tensors or {}))], zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:  # disconnected: it reconnects, or times out
                return False
            raise

    def stop_all(self) -> None:
        """Tell every remote peer to stop: not our children, so told, not waited for."""
        for peer in list(self.peers.values()):
            peer.send({"type": msg.STOP})

    def close(self) -> None:
        curve.close(self.ctx, self.sock, self._auth, linger=1000)

    def _bad(self, reason: str, who: bytes, error: str) -> None:
        self.observer.on_bad_message(reason)
        log.warning("dropped a bad message from remote %r: %s", who[:64], error)

    def _handle(self, parts: list[Any]) -> None:
        """A message from a worker on another host: checked like any, and more (it is untrusted)."""
        route = parts[0].bytes
        try:
            header, tensors = msg.decode(parts[1:])
        except msg.WireError as exc:
            self._bad(bad_message_reason(str(exc)), route, str(exc))
            return
        kind = header["type"]
        peer = self.peers.get(route)
        if peer is None:
            if kind == msg.READY:
                self._join(route, header, parts[1])
            elif kind == msg.PING:  # restarted hub, or a worker declared lost: it should register
                self.send(route, {"type": msg.PONG, "known": False})
            elif kind != msg.BYE:
                self._bad("unknown_peer", route, f"{kind} from a worker that has not joined")
            return
        peer.last_seen = time.monotonic()
        try:
            self._handle_peer(peer, kind, header, tensors)
        except msg.WireError as exc:
            self._bad(bad_message_reason(str(exc)), route, str(exc))

    def _handle_peer(self, peer: RemotePeer, kind: str, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        if kind == msg.PING:
            peer.send({"type": msg.PONG, "known": True})
        elif kind == msg.READY:
            remote.check_ready(header, [peer.stage])
            self.path.on_ready(peer, header)
        elif kind == msg.RESULT:
            self._result(peer, header, tensors)
        elif kind == msg.FAILED:
            key = FrameKey.of(header)
            if key in peer.inflight:
                self.path.on_failed(peer, key, str(header.get("error", "unknown error")))
        elif kind == msg.CLOSED and peer.stage in self.router.outputs:
            self.path.on_closed(peer, str(header.get("source")))
        elif kind == msg.EVENT and peer.stage in self.router.outputs:  # checked by hub.events
            self.path.on_event(peer, header.get("event"))
        elif kind == msg.BYE:
            self.lose(peer, "it left")
        elif kind == msg.FATAL:
            log.error("remote %s worker %s failed: %s", peer.stage, peer_name(peer.identity), header.get("error"))
            self.lose(peer, "it failed")
        else:
            self._bad("type", peer.identity, f"a remote worker may not send {kind}")

    def _join(self, route: bytes, header: dict[str, Any], first: Any) -> None:
        try:
            joining = remote.check_ready(header, self.router.stages + self.router.outputs)
        except msg.WireError as exc:
            self._bad(bad_message_reason(str(exc)), route, str(exc))
            self.send(route, {"type": msg.STOP, "error": str(exc)})
            return
        if joining.stage in self.router.outputs and self.roster.of(joining.stage):
            error = f"output {joining.stage} already has its worker (an output runs in one process)"
            log.warning("refused remote worker %s: %s", peer_name(route), error)
            self.send(route, {"type": msg.STOP, "error": error})
            return
        self._joined += 1
        peer = RemotePeer(
            joining.stage, REMOTE_INDEX_BASE + self._joined, route, self.send,
            reads=joining.reads, writes=joining.writes, regions=self._regions, now=time.monotonic(),
        )
        self.peers[route] = peer
        self.roster.add(peer)
        if not isinstance(header.get("provider"), str) or len(header["provider"]) > 64:
            header.pop("provider", None)
        try:
            where = first.get("Peer-Address")
        except (zmq.ZMQError, AttributeError):
            where = "?"
        log.warning("remote %s worker %s joined from %s (%d credits)", joining.stage, peer_name(route), where,
                    joining.credits)
        self.path.on_ready(peer, header)

    def _result(self, peer: RemotePeer, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        key = FrameKey.of(header)
        state = self.router.frames.get(key)
        record = self.inputs.sources.get(key.source)
        if state is None or record is None or record.pool is None or key not in peer.inflight:
            peer.give_back(key)  # late or duplicate: nothing to take from it
            return
        if self.router.at(key, peer.stage) is not None and header.get("stale") is not True:
            try:
                merged, plain, regions = remote.accept_result(
                    state.header, header, tensors, record.pool.layout, peer.writes, peer.stage,
                    self.plan.members.get(peer.stage, ()),
                )
            except msg.WireError as exc:
                self._bad(bad_message_reason(str(exc)), peer.identity, str(exc))
                self.path.on_failed(peer, key, f"a bad result from a remote worker: {exc}")
                return
            for name, array in regions.items():
                np.copyto(record.pool.view(state.slot, name), array)
            header, tensors = merged, plain
        self.path.on_result(peer, ResultHeader.read(header), header, tensors)

    def _regions(self, key: FrameKey, state: FrameState, names: frozenset[str]) -> dict[str, np.ndarray]:
        """The slot regions of a frame a remote peer reads (those written by now), as views."""
        record = self.inputs.sources.get(key.source)
        if record is None or record.pool is None:
            return {}
        return remote.region_tensors(record.pool, state.slot, sorted(names))

    def check(self, now: float, all_done: bool) -> None:
        """Remote workers silent past the timeout are lost; a remote-only stage without a worker
        fails the job after `wait_s` (when set)."""
        settings = self.settings
        for peer in list(self.peers.values()):
            if now - peer.last_seen > settings.timeout_s:
                self.lose(peer, f"silent for {now - peer.last_seen:.1f} s")
        for name in settings.remote_only:
            if self.roster.has_ready(name):
                self._missing_since.pop(name, None)
                continue
            since = self._missing_since.setdefault(name, now)
            if settings.wait_s is not None and now - since > settings.wait_s and not all_done:
                raise JobFailed(
                    f"no {name} worker connected to {settings.listen} for {settings.wait_s:g} s "
                    f"(start one with `run_pipeline.py worker --stage {name}`; check its keys and the firewall)"
                )

    def lose(self, peer: RemotePeer, why: str) -> None:
        """A remote worker left, failed or went silent: the frames it held go to the next worker.
        Nobody restarts it; if it comes back it joins again as a new worker."""
        self.peers.pop(peer.identity, None)
        peer.finished = True
        peer.ready = False
        self.roster.remove(peer)
        self.observer.on_remote_lost(peer.stage)
        if peer.stage in self.router.outputs:
            raise JobFailed(f"remote output {peer.stage} ({peer_name(peer.identity)}) was lost: {why}")
        lost = self.path.requeue(peer)
        log.warning(
            "remote %s worker %s lost (%s); %d frame(s) it held go to the next worker",
            peer.stage, peer_name(peer.identity), why, len(lost),
        )

