"""The hub: one job's loop, its dispatch and each frame's path, given its workers and an observer.

It is the ZeroMQ guide's load-balancing broker. Every worker connects a DEALER to one ROUTER here and
asks for work by announcing credits; the hub sends a worker a frame only when it has a credit, remembers
which frames each worker holds, and when a worker dies hands those frames to the next worker of the same
stage after restarting it. Frames stay in the shared-memory pool: a message carries a slot index, small
tensors and the frame's header.

The rooms around it, in this package: routing (which worker gets a frame next, each source's order and
end of stream), inputs (the sources, their decode workers, pools and slots), shares and live_frames (the
live layout), lifecycle (the worker processes, watched and restarted), swap (a model's new version),
events (the outputs' announcements), header (what the hub reads of a message). What it counts goes to a
`HubObserver` (the metrics); how a job is started, stopped and reported is pipeline.run's business.
docs/architecture.md draws a frame's path through them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np
import zmq

from framewire.pipeline.errors import JobFailed
from framewire.pipeline.frame import IMAGE, shown_region
from framewire.pipeline.hub.events import Events
from framewire.pipeline.hub.header import FrameKey, ReadyHeader, ResultHeader
from framewire.pipeline.hub.inputs import Inputs
from framewire.pipeline.hub.live_frames import LiveFrames
from framewire.pipeline.hub.shares import LiveLayout
from framewire.pipeline.hub.lifecycle import Lifecycle, StartProcess, exit_text
from framewire.pipeline.hub.observer import FrameTap, HubObserver
from framewire.pipeline.hub.peers import DecodeWorker, Roster, ShareWorker, StageWorker
from framewire.pipeline.hub.routing import FrameState, Router
from framewire.pipeline.hub.swap import Swaps
from framewire.pipeline.hub.source_settings import SourceSettings
from framewire.pipeline.plan import Plan, Report
from framewire.pipeline.wire import messages as msg

log = logging.getLogger(__name__)

_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
TICK_MS = 50
END_WAIT_S = 2.0
"""How long the hub waits for the EOS of a decode worker that exited cleanly (`_await_end`)."""
_FROM_SHARE = frozenset({msg.LIVE, msg.SHARE, msg.STREAM, msg.EOS, msg.STATS})
"""What a live-layout worker sends for a source of its share (a STATS without a source: its counters)."""
Progress = Callable[[int, int | None], None]
"""Called with the frames done so far and the job's total, when every source says it."""


class Hub:
    """One job's hub, built whole: its ROUTER bound, no worker started yet (the runner starts them:
    `lifecycle`, `inputs`). Raises JobFailed when it cannot bind."""

    def __init__(
        self,
        plan: Plan,
        endpoint: str,
        observer: HubObserver,
        report: Report,
        *,
        start: StartProcess,
        stopping: Callable[[], bool],
        progress: Progress | None = None,
    ) -> None:
        """`report` gathers the counts of sources that retire while the job runs; `stopping()` says
        whether a stop was asked for (a `keep_running` job ends only then)."""
        self.plan = plan
        self.endpoint = endpoint
        self.observer = observer
        self.report = report
        self.stopping = stopping
        self.progress = progress
        self.done_total = 0
        self.ctx = zmq.Context()
        self.sock = _router(self.ctx, endpoint)
        self.roster = Roster({name: [] for name in plan.stage_names + plan.output_names})
        self.router = Router(
            plan.stage_names,
            plan.output_names,
            ordered=[s.name for s in plan.middle if s.ordered],
            sheds=[s.name for s in plan.middle if s.sheds],
            on_done=self._frame_done,
        )
        self.lifecycle = Lifecycle(plan, endpoint, self._send, self.roster, start)
        decodes = next((s for s in plan.middle if s.decodes_sources), None)
        self.live = LiveLayout(decodes, self.roster) if decodes is not None else None  # stages.layout: live
        self.inputs = Inputs(plan, self.router, self.lifecycle, self.live)
        self.shared = LiveFrames(self.live, self.inputs, plan, observer, self._from_decode) if self.live else None
        self.events = Events(observer, self.roster, plan, self.known_sources)
        self.swaps = Swaps(plan, self.lifecycle, self.roster, self.router)  # a model's new version: hub.swap
        # Each source's settings changed at run time, sent to the workers (CONFIGURE).
        self.settings = SourceSettings(self.roster, plan.stage_names, plan.settings.initial if plan.settings else {})
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self._next_tick = 0.0
        self.tap: FrameTap | None = None
        """Shown each finished frame before its slot goes back (the console's previews); None: off."""
        self.frame_hook = plan.frame_hook
        """Told of each finished frame, with every stage's and output's span (`tracing:`); None: off."""

    # --- the loop ------------------------------------------------------------------------------

    def run(self, each_turn: Callable[[], None], each_tick: Callable[[], None]) -> None:
        """Turn until every source is done; JobFailed when the job cannot go on. `each_turn` and
        `each_tick` are the runner's (its stop and drain; the operator's commands)."""
        while not self.all_done():
            each_turn()
            if self.turn():
                each_tick()

    def turn(self) -> bool:
        """Wait for messages up to a tick, take them, hand out work; True when it was time for the
        tick's checks too (deaths, hangs, restarts, retired sources, the observer's gauges)."""
        events = dict(self.poller.poll(TICK_MS))
        if self.sock in events:
            self.receive_all()
        # Once a tick, not once a message: asking every process whether it lives costs a system
        # call each, which at hundreds of frames a second was a fifth of the hub's time.
        now = time.monotonic()
        ticked = now >= self._next_tick
        if ticked:
            self._next_tick = now + TICK_MS / 1000.0
            self._tick(now)
        self.router.dispatch(self.roster.of, self._send_work, self._send_end, time.monotonic())
        self.inputs.drop_waiting(self.router.trim())
        return ticked

    def all_done(self) -> bool:
        """Every source ended and every output closed it (a `keep_running` job: and a stop was asked)."""
        if self.plan.http is not None and self.plan.http.keep_running and not self.stopping():
            return False
        return all(self.inputs.finished(record) for record in self.inputs.sources.values())

    def _tick(self, now: float) -> None:
        for peer in self.lifecycle.kill_stalled(now):
            self.observer.on_worker_stalled(peer.stage)
        self._check_workers()
        self.lifecycle.restart_due(now)
        self.swaps.step(now)
        self.inputs.retire_finished(self.report, self._drop_pool)
        pids = {w.spec.title.removeprefix("framewire: "): w.process.pid for w in self.lifecycle.processes.values()}
        self.observer.on_tick(self.router, self.roster, self.inputs, pids)

    def receive_all(self) -> None:
        sock = self.sock
        for _ in range(1000):
            # Asked, not tried: an empty socket's zmq.Again is an exception made and caught at the
            # end of every turn (5-8 us against 2.5 for the question).
            if not cast(int, sock.getsockopt(_EVENTS)) & _POLLIN:
                return
            try:
                parts = msg.receive(sock, zmq.NOBLOCK, prefix=1)
            except zmq.Again:
                return
            self._handle(parts)

    def _handle(self, parts: list[Any]) -> None:
        """A message from a worker: a decode worker's to the inputs, a stage worker's here."""
        identity = parts[0]
        try:
            header, tensors = msg.decode(parts[1:])
            worker = self.lifecycle.get(identity)
            if worker is None:
                self.observer.on_bad_message("unknown_peer")
                log.debug("message from an unknown or retired worker %r", identity)
            elif isinstance(worker, DecodeWorker):
                self._from_decode(worker, header, tensors)
            else:
                worker.heard = time.monotonic()
                self._from_stage(worker, header["type"], header, tensors)
        except msg.WireError as exc:
            self.observer.on_bad_message(msg.bad_message_reason(str(exc)))
            log.warning("dropped a bad message from %r: %s", identity, exc)

    def _from_decode(self, worker: DecodeWorker | ShareWorker, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        kind = header["type"]
        opened = self.inputs.handle(worker, kind, header, tensors)
        record = self.inputs.sources.get(worker.source_id)
        if kind == msg.STATS and record is not None:  # a live source lost or found again: announced
            self.events.source_state(record.source_id, record.online, record.info is not None)
        if opened is not None:  # an output learns a stream before its frames
            for peer in (p for name in self.plan.output_names for p in self.roster.of(name) if p.ready):
                peer.send({"type": msg.STREAM, "source": opened.source_id, "info": opened.info})

    def _from_stage(
        self, peer: StageWorker, kind: str, header: dict[str, Any], tensors: dict[str, np.ndarray]
    ) -> None:
        if self.shared is not None and peer.stage == self.shared.live.stage and kind in _FROM_SHARE:
            if kind != msg.STATS or "source" in header:
                self.shared.take(peer, kind, header, tensors)
                return
        if kind == msg.READY:
            self.on_ready(peer, ReadyHeader.read(header))
        elif kind == msg.RESULT:
            self.on_result(peer, ResultHeader.read(header), header, tensors)
        elif kind == msg.FAILED:
            self.on_failed(peer, FrameKey.of(header), str(header.get("error", "unknown error")))
        elif kind == msg.FATAL and self.swaps.on_fatal(peer, str(header.get("error", "unknown error"))):
            pass  # a swap's new worker could not start: the swap failed, the old workers go on
        elif kind == msg.FATAL:
            peer.finished = True
            raise JobFailed(str(header.get("error", f"{peer.spec.title} failed")), int(header.get("exit", 1)))
        elif kind == msg.CLOSED:
            self.on_closed(peer, str(header.get("source")))
        elif kind == msg.STATUS:
            self.on_status(peer, header)
        elif kind == msg.EVENT and peer.stage in self.router.outputs:
            self.on_event(peer, header.get("event"))
        elif kind == msg.STATS and peer.stage in self.router.outputs:
            self.events.on_counts(peer.stage, header.get("counters"))
        else:
            log.warning("unexpected %s message from %s", kind, peer.spec.title)

    # --- a stage worker's answers --------------------------------------------------------------

    def on_ready(self, peer: StageWorker, ready: ReadyHeader) -> None:
        peer.announce(ready.credits)
        if ready.provider is not None:
            self.observer.on_provider(peer.stage, peer.index, ready.provider)
        if self.shared is not None:
            self.shared.live.on_ready(peer, self.shared.running)
        if peer.stage in self.plan.output_names:  # an output learns the streams before their frames
            for record in self.inputs.sources.values():
                if record.info is not None:
                    peer.send({"type": msg.STREAM, "source": record.source_id, "info": record.info})
        self.settings.to_worker(peer)  # before any frame: a restarted worker too
        self._grant_when_ready()

    def on_result(
        self, peer: StageWorker, result: ResultHeader, header: dict[str, Any], tensors: dict[str, np.ndarray]
    ) -> None:
        key = result.key
        peer.give_back(key)
        if key not in self.router.frames:
            return
        if peer.stage in self.router.outputs:
            if self.frame_hook is not None:
                self._keep_spans(key, result.spans)
            self.router.written(key)
            return
        if self.router.at(key, peer.stage) is None:
            log.debug("late duplicate result for %s at %s", key, peer.stage)
            return
        if result.stale:  # past its max_staleness_ms before inference (pipeline.worker.stage)
            self.inputs.drop_stale(key)
            return
        header.pop("type", None)
        header.pop("stage", None)
        spec = self.plan.spec(peer.stage)
        for stage in spec.runs:
            self.observer.on_stage_done(key.source, stage, result.span(stage))
        if spec.feeds_tracks:
            self.observer.on_track_result(key.source, header.get("result"))
        self.router.done(key, peer.stage, header, dict(tensors))

    def on_failed(self, peer: StageWorker, key: FrameKey, error: str) -> None:
        peer.give_back(key)
        if key not in self.router.frames:
            return
        if peer.stage in self.router.outputs:
            raise JobFailed(f"output {peer.stage} failed on source {key.source} frame {key.seq}: {error}")
        if self.router.at(key, peer.stage) is None:
            return
        if not self.plan.skip_failed_frames:
            raise JobFailed(f"{peer.stage} failed on source {key.source} frame {key.seq}: {error}")
        self.inputs.sources[key.source].failed += 1
        self.observer.on_failed(key.source, peer.stage)
        self.router.fail(key, peer.stage, error)

    def on_closed(self, peer: StageWorker, source: str) -> None:
        """An output closed a source's files (a stage that keeps per-source state let go of it)."""
        record = self.inputs.sources.get(source)
        if record is not None and peer.stage in self.router.outputs:
            record.closed.add(peer.stage)

    def on_status(self, peer: StageWorker, header: dict[str, Any]) -> None:
        """A worker's backend stopped or started answering (readiness, metrics; a worker that waits
        for it is not hung), or sent the backend's own counters."""
        if "available" in header:
            down = None if header["available"] else str(header.get("reason") or "backend unavailable")
            if down is None or peer.backend_down is None:  # up (again, or at start), or newly down
                self.observer.on_backend(peer.stage, peer.index, down is None)
            peer.backend_down = down
        times = header.get("times")
        if isinstance(times, dict):
            self.observer.on_backend_times(peer.stage, str(header.get("model", "")), times)

    def on_event(self, peer: StageWorker, event: Any) -> None:
        """An output's announcement: logged, counted, and passed to every output (hub.events)."""
        self.events.on_event(peer.stage, event)

    def _frame_done(self, key: FrameKey, state: FrameState) -> None:
        """Every output wrote the frame: count it, and its slot goes back to its source."""
        record = self.inputs.sources[key.source]
        record.frame_done()
        decoded_at = state.head.decoded_at
        latency = time.time() - decoded_at if decoded_at is not None else None
        self.observer.on_done(key.source, latency)
        if latency is not None:
            record.output_late(key.seq, latency * 1000.0)
        if self.frame_hook is not None:
            self.frame_hook.frame_done(state.header)
        if self.tap is not None and record.pool is not None:
            shown = shown_region(state.header.get("meta"))  # as the outputs show it
            self.tap.frame_done(key.source, record.pool, state.slot, frozenset({IMAGE, shown}))
        record.give_slot(state.slot)
        self.done_total += 1
        if self.progress is not None:
            self.progress(self.done_total, self.inputs.expected_total(sum(self.report.frames.values())))

    def _keep_spans(self, key: FrameKey, spans: Mapping[str, Any]) -> None:
        """An output's span (its members' when fused) joins the frame's `ts` for `frame_hook`."""
        timings = self.router.frames[key].header.setdefault("ts", {})
        if isinstance(timings, dict):
            timings.update(spans)

    def _grant_when_ready(self) -> None:
        """Sources get their slots once every stage has a worker up: frames then never wait on a
        process start, and a zmq output has bound its socket before the first frame."""
        if not self.inputs.granting and all(self.roster.has_ready(n) for n in self.roster.by_stage):
            self.inputs.start_granting()

    def known_sources(self) -> set[str]:
        return set(self.inputs.sources) | set(self.inputs.ended)

    # --- sending -------------------------------------------------------------------------------

    def _send(self, identity: bytes, header: dict[str, Any], tensors: Mapping[str, np.ndarray] | None = None) -> bool:
        """To a worker; False when it is not connected (yet, or any more: its death is handled)."""
        try:
            msg.send(self.sock, msg.encode(header, dict(tensors or {})), prefix=(identity,))
            return True
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                return False
            raise

    @staticmethod
    def _send_work(peer: Any, key: FrameKey, state: FrameState) -> bool:
        header = dict(state.header)
        header["type"] = msg.WORK
        return bool(peer.send(header, state.tensors))

    @staticmethod
    def _send_end(peer: Any, source: str) -> None:
        peer.send({"type": msg.EOS, "source": source})

    def _drop_pool(self, source: str, pool: str) -> None:
        """A retired source's pool: every worker unmaps it."""
        for peer in self.roster.all():
            if peer.ready:
                peer.send({"type": msg.POOL, "source": source, "drop": pool})

    # --- deaths --------------------------------------------------------------------------------

    def _check_workers(self) -> None:
        for worker in self.lifecycle.exited():
            self.receive_all()  # what it sent before it ended counts
            if isinstance(worker, DecodeWorker) and worker.process.exitcode == 0:
                self._await_end(worker)
            if not self.lifecycle.forget(worker) or worker.finished:
                continue
            if isinstance(worker, DecodeWorker):
                self.inputs.on_death(worker, exit_text(worker.process.exitcode))
                continue
            how = worker.stalled or exit_text(worker.process.exitcode)
            if self.shared is not None and worker.stage == self.shared.live.stage:
                self.shared.lose(worker.index)
            if self.swaps.on_death(worker, how):  # a swap's worker: nothing restarts it
                self.router.requeue(worker.stage, worker)
                continue
            delay = self.lifecycle.schedule_restart(worker, how)
            self.observer.on_worker_restarted(worker.stage)
            lost = self.router.requeue(worker.stage, worker)  # its frames go to the next worker
            log.warning(
                "%s died (%s); restarting it in %.1f s, %d frame(s) it held go to the next worker",
                worker.spec.title, how, delay, len(lost),
            )

    def _await_end(self, worker: DecodeWorker) -> None:
        """A decode worker that exited cleanly sent its EOS first, but the EOS may still be on its way
        (this process's ZeroMQ I/O thread reads it after the worker is gone, later still when the
        cores are busy): wait for it, up to END_WAIT_S, before its exit counts as a death."""
        deadline = time.monotonic() + END_WAIT_S
        while not worker.finished and time.monotonic() < deadline:
            if self.sock.poll(TICK_MS):
                self.receive_all()

    # --- the end -------------------------------------------------------------------------------

    def stop_sources(self) -> None:
        """Every source stops reading; what is in flight goes on to the outputs."""
        for record in self.inputs.sources.values():
            self.inputs.stop(record)

    def close(self) -> None:
        """Stop the workers (bounded), unlink the pools, close the sockets; then the frame hook
        (which sends what it has left)."""
        self.lifecycle.stop_all()
        self.inputs.close_pools()
        self.sock.close(linger=0)
        self.ctx.term()
        if self.frame_hook is not None:
            self.frame_hook.close()

    def fold_into(self, report: Report) -> None:
        """The sources still listed and the restarts, into the job's report."""
        for record in self.inputs.sources.values():
            record.fold_into(report)
        report.restarts = dict(self.lifecycle.restarts)
        report.outputs = {name: dict(counts) for name, counts in self.events.counts.items()}


def _router(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    """The hub's ROUTER, bound: a send to a peer that is not connected fails (EHOSTUNREACH) instead of
    vanishing, and no high-water mark drops (credits bound what is in flight)."""
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    try:
        sock.bind(endpoint)
    except zmq.ZMQError as exc:
        sock.close(linger=0)
        ctx.term()
        raise JobFailed(f"transport.ipc_dir: the hub cannot bind {endpoint}: {zmq.strerror(exc.errno or 0)}") from None
    return sock
