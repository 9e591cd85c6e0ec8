"""Where each frame goes next: the hub's routing state, with no sockets and no processes.

A frame enters when its source's decode worker has written it into a slot (`admit`), waits in the
queue of each middle stage in turn (preprocess, infer, ... as the plan names them), and after the
last one waits in its source's reorder buffer until every frame before it is done; then it is
queued for every output, in `seq` order, followed once by the source's `EndOfStream`. `dispatch`
hands queued work to the workers that have credits, the least busy first, and the callers send it.

A stage whose workers keep state per source (`StageSpec.ordered`: a tracker) gets a `_Gate` per source
instead of a shared queue: the source sticks to one worker of that stage, and its frames reach it in
`seq` order, skipping those dropped or failed before the stage. When that worker dies, the source
moves to another worker (its state there starts fresh) and the move is counted.

Everything here is plain state, unit-tested without a process (tests/unit/pipeline/test_routing.py).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from framewire.pipeline.hub.header import FrameHeader, FrameKey
from framewire.pipeline.hub.shedding import Bounds

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EndOfStream:
    """A source's end, queued for the outputs behind its last frame. Never a frame key: a source may
    be called anything, `eos` included."""

    source: str


QueueItem = FrameKey | EndOfStream


@dataclass
class FrameState:
    """A frame in flight: what the hub knows of it (`head`, fixed), and the header and inline
    tensors the last stage left it with, passed on to the next one as they are."""

    head: FrameHeader
    header: dict[str, Any]
    tensors: dict[str, np.ndarray]
    stage_pos: int = 0
    """Index of the middle stage it is at; len(stages) once it is past them."""
    refs: int = 0
    """Outputs still to write it."""
    held: bool = False
    """A worker holds it (sent, not answered): not waiting in a queue."""

    @property
    def slot(self) -> int:
        return self.head.slot


class Assignee(Protocol):
    """What routing needs of a worker (hub.peers.StageWorker)."""

    @property
    def available(self) -> bool: ...

    @property
    def starting(self) -> bool: ...

    credits: int
    inflight: dict[FrameKey, float]


@dataclass
class _Flow:
    """One source's order: what decode sent, what went on to the outputs, and its end."""

    received: int = 0
    first: int = 0
    """The seq of its first frame (a resumed file starts past the frames its outputs hold)."""
    eos_frames: int | None = None
    eos_queued: bool = False
    next_out: int = 0
    reorder: dict[int, FrameKey | None] = field(default_factory=dict)
    """Frames done with the middle stages, by seq; None: dropped, nothing to output."""

    @property
    def ended(self) -> bool:
        """Its last frame and its end of stream are queued for the outputs."""
        return self.eos_frames is not None and self.eos_queued


@dataclass
class _Gate:
    """One source at one ordered stage: the worker it sticks to and the frames to send it in order."""

    next_seq: int = 0
    waiting: dict[int, FrameKey] = field(default_factory=dict)
    skipped: set[int] = field(default_factory=set)
    """Seqs that never reach the stage (dropped or failed before it): stepped over."""
    peer: Any = None
    eos_sent: bool = False


SendWork = Callable[[Any, FrameKey, FrameState], bool]
"""Send a frame to a worker; False when it could not go now (the worker is not reachable yet)."""
SendEnd = Callable[[Any, str], None]
"""Tell a worker that a source ended."""


class Router:
    """The queues of every stage and output, the frames in flight and each source's order."""

    def __init__(
        self,
        stages: Sequence[str],
        outputs: Sequence[str],
        *,
        ordered: Iterable[str] = (),
        sheds: Iterable[str] = (),
        on_done: Callable[[FrameKey, FrameState], None] | None = None,
    ) -> None:
        """`ordered`, `sheds`: the stages whose specs say so. `on_done(key, state)`: all outputs wrote it."""
        self.stages = tuple(stages)
        self.outputs = tuple(outputs)
        self.queues: dict[str, deque[QueueItem]] = {name: deque() for name in self.stages + self.outputs}
        self.frames: dict[FrameKey, FrameState] = {}
        self.flows: dict[str, _Flow] = {}
        self.ordered = tuple(name for name in self.stages if name in set(ordered))
        self.gates: dict[str, dict[str, _Gate]] = {name: {} for name in self.ordered}
        # `trim`: the live sources' frames waiting up to the first stage that sheds (without one, the first)
        at = next((i for i, name in enumerate(self.stages) if name in set(sheds)), 0 if self.stages else -1)
        self._bounds = Bounds(at)
        self.moved: dict[str, int] = {name: 0 for name in self.ordered}
        """Sources moved to another worker of an ordered stage because theirs died (state lost)."""
        self._on_done = on_done

    # --- sources -------------------------------------------------------------------------------

    def open(self, source: str) -> None:
        self.flows[source] = _Flow()
        for gates in self.gates.values():
            gates[source] = _Gate()

    def start_at(self, source: str, seq: int) -> None:
        """The source's first frame is `seq`, not 0 (a resumed file): its order starts there."""
        flow = self.flows[source]
        flow.first = flow.received = flow.next_out = seq
        for gates in self.gates.values():
            gates[source].next_seq = seq

    def close(self, source: str) -> None:
        """Forget a retired source (nothing of it may be in flight)."""
        self.flows.pop(source, None)
        self._bounds.forget(source)
        for gates in self.gates.values():
            gates.pop(source, None)

    def received(self, source: str) -> int:
        return self.flows[source].received

    def ended(self, source: str) -> bool:
        flow = self.flows.get(source)
        return flow is not None and flow.ended

    def ending(self, source: str) -> bool:
        """Its decode worker said end of stream (frames may still be in flight)."""
        flow = self.flows.get(source)
        return flow is not None and flow.eos_frames is not None

    def in_flight(self, source: str) -> int:
        return sum(1 for key in self.frames if key.source == source)

    def depth(self, stage: str) -> int:
        """Frames waiting for a worker of `stage`."""
        if stage in self.gates:
            return sum(len(gate.waiting) for gate in self.gates[stage].values())
        return len(self.queues[stage])

    # --- a frame's way -------------------------------------------------------------------------

    def admit(self, head: FrameHeader, header: dict[str, Any], tensors: dict[str, np.ndarray], at: int = 0) -> FrameKey:
        """A frame in its slot: on to the first stage (the live layout: past the `at` its worker ran)."""
        key = head.key
        flow = self.flows[key.source]
        if key.seq != flow.received:
            log.warning("source %s: frame seq %s, expected %s", key.source, key.seq, flow.received)
        flow.received = key.seq + 1
        self.frames[key] = state = FrameState(head, header, tensors, stage_pos=at)
        self._advance(key)
        self._bounds.moved(state, False)
        return key

    def bound(self, source: str, most: int, *, keep_newest: bool) -> None:
        """`most` frames of a live `source` may wait for a worker up to inference (`trim`: the bounds
        add up); past them it drops its oldest waiting frame (`keep_newest`) or its newest."""
        self._bounds.bound(source, most, keep_newest)

    def trim(self) -> list[FrameState]:
        """Frames of bounded sources still waiting after `dispatch` for a stage up to inference,
        past what their bounds add up to: dropped, as `shedding.Shedder` chooses (the streams share
        the loss). Else a busy machine queues every stream's frames to the staleness limit, and
        drops them only after a trip to a worker. Returns the dropped states."""
        bounds = self._bounds
        if not bounds.over:
            return []
        ready: dict[str, set[FrameKey]] = {source: set() for source in bounds.of}
        for pos, stage in enumerate(self.stages[: bounds.upto + 1]):
            gates = self.gates.get(stage)
            queued = (k for g in gates.values() for k in g.waiting.values()) if gates else self.queues[stage]
            for key in queued:
                if isinstance(key, FrameKey) and key.source in ready:
                    state = self.frames.get(key)
                    if state is not None and state.stage_pos == pos and bounds.is_ready(state):
                        ready[key.source].add(key)
        keys = bounds.choose({source: sorted(found, key=lambda k: k.seq) for source, found in ready.items()})
        return [state for key in keys if (state := self.drop(key)) is not None]

    def at(self, key: FrameKey, stage: str) -> FrameState | None:
        """The frame's state if it is at middle stage `stage` (else a late or duplicate answer)."""
        state = self.frames.get(key)
        if state is None:
            return None
        pos = state.stage_pos
        return state if pos < len(self.stages) and self.stages[pos] == stage else None

    def done(self, key: FrameKey, stage: str, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> bool:
        """`stage` finished the frame: on to the next stage, or to the reorder buffer."""
        state = self.at(key, stage)
        if state is None:
            return False
        was = self._bounds.is_ready(state)
        state.header = header
        state.tensors = tensors
        state.stage_pos += 1
        state.held = False
        self._advance(key)
        self._bounds.moved(state, was)
        return True

    def fail(self, key: FrameKey, stage: str, error: str) -> bool:
        """`stage` failed on the frame: it goes straight on to the outputs, unprocessed."""
        state = self.at(key, stage)
        if state is None:
            return False
        was = self._bounds.is_ready(state)
        state.header["error"] = f"{stage}: {error}"
        state.header.pop("result", None)
        state.tensors = {}
        self._skip_after(key, state.stage_pos)
        state.stage_pos = len(self.stages)
        self._advance(key)
        self._bounds.moved(state, was)
        return True

    def drop(self, key: FrameKey) -> FrameState | None:
        """The frame is dropped (stale): gone from every queue; the outputs never see it, the order
        steps over it. Returns its state (its slot is free)."""
        state = self.frames.pop(key, None)
        if state is None:
            return None
        self._bounds.gone(state)
        self._skip_after(key, state.stage_pos)
        flow = self.flows[key.source]
        flow.reorder[key.seq] = None
        self._release(key.source)
        return state

    def written(self, key: FrameKey) -> None:
        """One output wrote the frame; the last one frees it (`on_done`)."""
        state = self.frames.get(key)
        if state is None:
            return
        state.refs -= 1
        if state.refs <= 0:
            self._finish(key, state)

    def end(self, source: str, frames: int) -> int:
        """The source's decode worker ended after `frames` frames (at most what arrived; counted from
        seq 0): its end of stream follows its last frame to the outputs. Returns the frames it
        counts in this run."""
        flow = self.flows[source]
        if frames != flow.received:
            log.warning("source %s: end of stream after %s frames, %s received", source, frames, flow.received)
        flow.eos_frames = flow.received
        self._release(source)
        return flow.eos_frames - flow.first

    def requeue(self, stage: str, peer: Assignee) -> list[FrameKey]:
        """The frames a dead or lost worker of `stage` held go back to the front of its queue (an
        ordered stage: back to their gates, and its sources stick to another worker)."""
        lost = sorted(peer.inflight, key=lambda k: (k.seq, k.source), reverse=True)
        back = [key for key in lost if self.at(key, stage) is not None]
        for key in back:
            state = self.frames[key]
            was, state.held = self._bounds.is_ready(state), False
            self._bounds.moved(state, was)
        if stage in self.gates:
            for gate in self.gates[stage].values():
                if gate.peer is peer:
                    gate.peer = None
                    self.moved[stage] += 1
            for key in back:
                gate = self.gates[stage][key.source]
                gate.waiting[key.seq] = key
                gate.next_seq = min(gate.next_seq, key.seq)
                gate.eos_sent = False
        else:
            self.queues[stage].extendleft(back)  # reversed above, so the oldest ends up first
        return lost

    # --- dispatch ------------------------------------------------------------------------------

    def dispatch(
        self,
        workers: Callable[[str], Sequence[Assignee]],
        send_work: SendWork,
        send_end: SendEnd,
        now: float,
    ) -> None:
        """Hand queued frames to the workers of each stage with credits, and ends of stream."""
        for stage, queue in self.queues.items():
            if stage in self.gates:
                peers = workers(stage)
                # A source sticks to the worker it starts on: while a worker of the stage is still
                # starting, wait, or the ones up first would take every source (and keep them).
                pin = not any(peer.starting for peer in peers)
                self._dispatch_ordered(stage, [w for w in peers if w.available], pin, send_work, send_end, now)
            elif queue:
                self._dispatch_queue(queue, [w for w in workers(stage) if w.available], send_work, send_end, now)

    def _dispatch_queue(
        self, queue: deque[QueueItem], peers: list[Assignee], send_work: SendWork, send_end: SendEnd, now: float
    ) -> None:
        while queue:
            head = queue[0]
            if isinstance(head, EndOfStream):
                if not peers:
                    return
                queue.popleft()
                for peer in peers:
                    send_end(peer, head.source)
                continue
            candidates = [peer for peer in peers if peer.credits > 0]
            if not candidates:
                return
            peer = min(candidates, key=lambda p: len(p.inflight))
            queue.popleft()
            state = self.frames.get(head)
            if state is None:
                continue
            if not self._send(peer, head, state, send_work, now):
                queue.appendleft(head)
                return

    def _dispatch_ordered(
        self, stage: str, peers: list[Assignee], pin: bool, send_work: SendWork, send_end: SendEnd, now: float
    ) -> None:
        gates = self.gates[stage]
        for source, gate in gates.items():
            if gate.peer is not None and not gate.peer.available:
                gate.peer = None  # gone (requeue() moves its frames); the next frame picks another
            while True:
                while gate.next_seq in gate.skipped:
                    gate.skipped.discard(gate.next_seq)
                    gate.next_seq += 1
                key = gate.waiting.get(gate.next_seq)
                if key is None:
                    break
                peer = gate.peer or (self._pick(gates, peers) if pin else None)
                if peer is None or peer.credits <= 0:
                    break
                state = self.frames.get(key)
                if state is not None and not self._send(peer, key, state, send_work, now):
                    break
                gate.peer = peer
                del gate.waiting[gate.next_seq]
                gate.next_seq += 1
            flow = self.flows.get(source)
            if flow is not None and flow.eos_frames is not None and gate.next_seq >= flow.eos_frames:
                if gate.peer is not None and not gate.eos_sent:
                    gate.eos_sent = True  # its worker lets go of the source's state
                    send_end(gate.peer, source)

    @staticmethod
    def _pick(gates: Mapping[str, _Gate], peers: Sequence[Assignee]) -> Assignee | None:
        """The worker a source starts on: the one with the fewest sources, then the least busy."""
        if not peers:
            return None
        load = {id(peer): 0 for peer in peers}
        for gate in gates.values():
            if gate.peer is not None and id(gate.peer) in load:
                load[id(gate.peer)] += 1
        return min(peers, key=lambda p: (load[id(p)], len(p.inflight)))

    # --- inside --------------------------------------------------------------------------------

    def _advance(self, key: FrameKey) -> None:
        state = self.frames[key]
        if state.stage_pos < len(self.stages):
            stage = self.stages[state.stage_pos]
            if stage in self.gates:
                self.gates[stage][key.source].waiting[key.seq] = key
            else:
                self.queues[stage].append(key)
            return
        self.flows[key.source].reorder[key.seq] = key
        self._release(key.source)

    def _skip_after(self, key: FrameKey, pos: int) -> None:
        """The frame leaves the middle stages at `pos`: the ordered stages after it step over it."""
        for stage in self.ordered:
            if self.stages.index(stage) > pos:
                self.gates[stage][key.source].skipped.add(key.seq)

    def _release(self, source: str) -> None:
        """Queue finished frames for the outputs in seq order; then the end of stream, once."""
        flow = self.flows[source]
        while flow.next_out in flow.reorder:
            key = flow.reorder.pop(flow.next_out)
            flow.next_out += 1
            if key is None:
                continue
            state = self.frames[key]
            state.refs = len(self.outputs)
            for name in self.outputs:
                self.queues[name].append(key)
            if not self.outputs:
                self._finish(key, state)
        if flow.eos_frames is not None and not flow.eos_queued and flow.next_out >= flow.eos_frames:
            flow.eos_queued = True
            for name in self.outputs:
                self.queues[name].append(EndOfStream(source))

    def _finish(self, key: FrameKey, state: FrameState) -> None:
        del self.frames[key]
        if self._on_done is not None:
            self._on_done(key, state)

    def _send(self, peer: Assignee, key: FrameKey, state: FrameState, work: SendWork, now: float) -> bool:
        if not work(peer, key, state):
            return False
        was, state.held = self._bounds.is_ready(state), True
        self._bounds.moved(state, was)
        peer.credits -= 1
        peer.inflight[key] = now
        return True
