"""The supervisor: runs one job, from its plan to its report, and stops it cleanly.

It is the ZeroMQ guide's load-balancing broker. Every worker connects a DEALER to one ROUTER here
(the hub) and asks for work by announcing credits; the hub sends a worker a frame only when it has
a credit, remembers which frames each worker holds, and when a worker dies hands those frames to
the next worker of the same stage after restarting it. Frames stay in the shared-memory pool: a
message carries a slot index, small tensors and the frame's header.

This module keeps the run loop, the answers of the stage workers and the stop; the rooms around it:
- pipeline.routing: which worker gets a frame next, each source's order and end of stream;
- pipeline.inputs: the sources, their decode workers, pools and slots;
- pipeline.lifecycle: starting, watching and restarting the worker processes;
- pipeline.remote_hub: workers on other hosts; pipeline.operations: HTTP, the control API, health;
- pipeline.telemetry: the metrics; pipeline.events: the outputs' announcements (closed segments).
docs/architecture.md draws a frame's path through them.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import zmq

from framewire.pipeline.wire import messages as msg
from framewire.pipeline.names import TRACK
from framewire.pipeline.ops import telemetry, track_counts
from framewire.pipeline.errors import JobFailed
from framewire.pipeline.hub.events import Events
from framewire.pipeline.wire.framepool import sweep_orphans
from framewire.pipeline.hub.inputs import Inputs
from framewire.pipeline.plan import Plan, Report
from framewire.pipeline.hub.lifecycle import Lifecycle, exit_text
from framewire.pipeline.hub.metrics import Metrics
from framewire.pipeline.ops.service import Health, Operations
from framewire.pipeline.hub.peers import DecodeWorker, LocalPeer, Peer, RemotePeer, Roster
from framewire.pipeline.hub.remote_hub import RemoteHub
from framewire.pipeline.hub.routing import FrameKey, FrameState, Router

log = logging.getLogger(__name__)

TICK_MS = 50


class Supervisor:
    """Runs one job to its end (or until stopped) and says how it went."""

    def __init__(self, plan: Plan, progress: Callable[[int, int | None], None] | None = None) -> None:
        self.plan = plan
        self.progress = progress
        self.metrics = telemetry.declare(Metrics(process=plan.http is not None))
        self._gauges = telemetry.Gauges(self.metrics)
        self._processes = telemetry.WorkerProcesses()
        self.metrics.collect_also(self._processes.collect)
        self._roster = Roster({name: [] for name in plan.stage_names + plan.output_names})
        self._health = Health(plan, self._roster, lambda: bool(self._stop_requested))
        self._events = Events(self.metrics, self._roster, plan, self._known_sources)
        self._router = Router(plan.stage_names, plan.output_names, ordered=plan.ordered, on_done=self._frame_done)
        self._report = Report()
        self._stop_requested = 0
        self._stop_deadline: float | None = None
        self._done_total = 0
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._ipc_dir = ""
        self._owns_ipc_dir = False
        self._lifecycle: Lifecycle | None = None
        self._inputs: Inputs | None = None
        self._remote: RemoteHub | None = None
        self._ops: Operations | None = None

    # --- public --------------------------------------------------------------------------------

    def request_stop(self, *_: Any) -> None:
        """Stop reading the sources and drain what is in flight; a second request stops hard."""
        self._stop_requested += 1

    def run(self) -> Report:
        started = time.monotonic()
        old_handlers = _install_signals(self.request_stop)
        try:
            lifecycle, inputs = self._open()
            self._spawn_all(lifecycle, inputs)
            self._start_http(inputs)
            self._loop(lifecycle, inputs)
        except JobFailed as exc:
            self._report.exit_code = exc.exit_code
            self._report.error = str(exc)
        finally:
            if self._ops is not None:
                self._ops.stop()
            self._shutdown()
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
            self._report.elapsed_s = time.monotonic() - started
        self._summarise()
        return self._report

    def health(self) -> dict[str, Any]:
        """Live: the hub loop turns. Ready: every stage has a worker and it is not stopping (pipeline.operations)."""
        return self._health()

    # --- set-up --------------------------------------------------------------------------------

    def _open(self) -> tuple[Lifecycle, Inputs]:
        orphans = sweep_orphans()
        if orphans:
            log.warning("removed %d frame pool(s) left in /dev/shm by a daemon that was killed", len(orphans))
        if self.plan.ipc_dir:
            self._ipc_dir = self.plan.ipc_dir
            os.makedirs(self._ipc_dir, exist_ok=True)
        else:
            self._ipc_dir = tempfile.mkdtemp(prefix="framewire-")
            self._owns_ipc_dir = True
        self._ctx = zmq.Context()
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        self.endpoint = f"ipc://{self._ipc_dir}/hub-{os.getpid()}.sock"
        sock.bind(self.endpoint)
        self._sock = sock
        self._lifecycle = Lifecycle(self.plan, self.endpoint, self._send, self._roster)
        self._inputs = Inputs(self.plan, self._router, self._lifecycle)
        self._health.inputs = self._inputs
        if self.plan.remote is not None:
            self._remote = RemoteHub(self.plan, self._router, self._inputs, self._roster, self.metrics, self)
        return self._lifecycle, self._inputs

    def _spawn_all(self, lifecycle: Lifecycle, inputs: Inputs) -> None:
        remote_only = self.plan.remote.remote_only if self.plan.remote is not None else frozenset()
        for name, count, factory in self.plan.middle:
            for index in range(0 if name in remote_only else count):
                lifecycle.start_stage(name, index, factory)
        for index, (name, factory) in enumerate(self.plan.outputs):
            if name not in remote_only:
                lifecycle.start_stage(name, 0, factory, label=f"output[{index}]")
        for source in self.plan.sources:
            inputs.add(source)

    def _start_http(self, inputs: Inputs) -> None:
        if self.plan.http is not None:
            self._ops = Operations(self.plan, self.metrics, self._health, inputs, self.request_stop, self._forget)
            self.http_url = self._ops.url

    def _forget(self, source_id: str) -> None:
        """A removed source's metric series go (it keeps its final counts until then)."""
        self._gauges.forget(source_id)
        self.metrics.forget("source", source_id)

    def _known_sources(self) -> set[str]:
        return set(self._inputs.sources) | set(self._inputs.ended) if self._inputs is not None else set()

    # --- the loop ------------------------------------------------------------------------------

    def _loop(self, lifecycle: Lifecycle, inputs: Inputs) -> None:
        assert self._sock is not None
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        if self._remote is not None:
            poller.register(self._remote.sock, zmq.POLLIN)
        next_check = 0.0
        while not self._all_done(inputs):
            self._health.tick()
            self._check_stop(inputs)
            events = dict(poller.poll(TICK_MS))
            if self._sock in events:
                self._receive_all()
            if self._remote is not None and self._remote.sock in events:
                self._remote.receive_all()
            # Once a tick, not once a message: asking every process whether it lives costs a
            # system call each, which at hundreds of frames a second was a fifth of the hub's time.
            now = time.monotonic()
            if now >= next_check:
                next_check = now + TICK_MS / 1000.0
                self._tick(now, lifecycle, inputs)
            self._router.dispatch(self._roster.of, self._send_work, self._send_end, time.monotonic())

    def _tick(self, now: float, lifecycle: Lifecycle, inputs: Inputs) -> None:
        for peer in lifecycle.kill_stalled(now):
            self.metrics.inc("framewire_worker_stalls_total", stage=peer.stage)
        self._check_workers(lifecycle, inputs)
        if self._remote is not None:
            self._remote.check(now, self._all_done(inputs))
        lifecycle.restart_due(now)
        if self._ops is not None:
            self._ops.run_queued()
        inputs.retire_finished(self._report, self._drop_pool)
        self._gauges.update(self._router, self._roster, inputs)
        self._processes.update({w.spec.title.removeprefix("framewire: "): w.process.pid for w in lifecycle.processes.values()})

    def _receive_all(self) -> None:
        assert self._sock is not None
        for _ in range(1000):
            try:
                parts = self._sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self._handle(parts)

    def _handle(self, parts: list[Any]) -> None:
        """A message from a local worker: a decode worker's to the inputs, a stage worker's here."""
        assert self._lifecycle is not None and self._inputs is not None
        identity = parts[0].bytes
        try:
            header, tensors = msg.decode(parts[1:])
        except msg.WireError as exc:
            self.metrics.inc("framewire_bad_messages_total", reason=msg.bad_message_reason(str(exc)))
            log.warning("dropped a bad message from %r: %s", identity, exc)
            return
        worker = self._lifecycle.get(identity)
        kind = header["type"]
        if worker is None:
            self.metrics.inc("framewire_bad_messages_total", reason="unknown_peer")
            log.debug("message from an unknown or retired worker %r", identity)
        elif isinstance(worker, DecodeWorker):
            opened = self._inputs.handle(worker, kind, header, tensors)
            if opened is not None:  # an output learns a stream before its frames
                for peer in (p for name in self.plan.output_names for p in self._roster.of(name) if p.ready):
                    peer.send({"type": msg.STREAM, "source": opened.source_id, "info": opened.info})
        else:
            self._from_stage(worker, kind, header, tensors)

    def _from_stage(self, peer: LocalPeer, kind: str, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        if kind == msg.READY:
            self.on_ready(peer, header)
        elif kind == msg.RESULT:
            self.on_result(peer, FrameKey.of(header), header, tensors)
        elif kind == msg.FAILED:
            self.on_failed(peer, FrameKey.of(header), str(header.get("error", "unknown error")))
        elif kind == msg.FATAL:
            peer.finished = True
            raise JobFailed(str(header.get("error", f"{peer.spec.title} failed")), int(header.get("exit", 1)))
        elif kind == msg.CLOSED:
            self.on_closed(peer, str(header.get("source")))
        elif kind == msg.EVENT and peer.stage in self._router.outputs:
            self.on_event(peer, header.get("event"))
        else:
            log.warning("unexpected %s message from %s", kind, peer.spec.title)

    # --- a stage worker's answers, local or remote (pipeline.remote_hub.FramePath) --------------

    def on_ready(self, peer: Peer, header: dict[str, Any]) -> None:
        assert self._inputs is not None
        writes = None if isinstance(peer, RemotePeer) else frozenset(header.get("writes") or ())
        peer.announce(int(header.get("credits", 1)), writes)
        provider = header.get("provider")
        if isinstance(provider, str):
            self.metrics.set("framewire_provider_info", 1, stage=peer.stage, index=peer.index, provider=provider)
        if peer.stage in self.plan.output_names:  # an output learns the streams before their frames
            for record in self._inputs.sources.values():
                if record.info is not None:
                    peer.send({"type": msg.STREAM, "source": record.source_id, "info": record.info})
        self._grant_when_ready()

    def on_result(self, peer: Peer, key: FrameKey, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        assert self._inputs is not None
        peer.give_back(key)
        if key not in self._router.frames:
            return
        if peer.stage in self._router.outputs:
            self._router.written(key)
            return
        if self._router.at(key, peer.stage) is None:
            log.debug("late duplicate result for %s at %s", key, peer.stage)
            return
        if header.get("stale"):  # past its max_staleness_ms before inference (pipeline.stage_worker)
            self._inputs.drop_stale(key)
            return
        header.pop("type", None)
        header.pop("stage", None)
        spans = header.get("ts") or {}
        for stage in self.plan.members.get(peer.stage, (peer.stage,)):
            self.metrics.inc("framewire_frames_total", source=key.source, stage=stage)
            span = spans.get(stage)
            if span:
                self.metrics.observe("framewire_stage_latency_seconds", span[1] - span[0], stage=stage)
        if TRACK in self.plan.members.get(peer.stage, (peer.stage,)):  # once a frame, in order
            track_counts.count(self.metrics, key.source, header.get("result"))
        self._router.done(key, peer.stage, header, dict(tensors), peer.writes)

    def on_failed(self, peer: Peer, key: FrameKey, error: str) -> None:
        assert self._inputs is not None
        peer.give_back(key)
        if key not in self._router.frames:
            return
        if peer.stage in self._router.outputs:
            raise JobFailed(f"output {peer.stage} failed on source {key.source} frame {key.seq}: {error}")
        if self._router.at(key, peer.stage) is None:
            return
        if not self.plan.skip_failed_frames:
            raise JobFailed(f"{peer.stage} failed on source {key.source} frame {key.seq}: {error}")
        self._inputs.sources[key.source].failed += 1
        self.metrics.inc("framewire_failed_frames_total", source=key.source, stage=peer.stage)
        self._router.fail(key, peer.stage, error)

    def on_closed(self, peer: Peer, source: str) -> None:
        """An output closed a source's files (a stage that keeps per-source state let go of it)."""
        assert self._inputs is not None
        record = self._inputs.sources.get(source)
        if record is not None and peer.stage in self._router.outputs:
            record.closed.add(peer.stage)

    def on_event(self, peer: Peer, event: Any) -> None:
        """An output's announcement: logged, counted, and passed to every output (pipeline.events)."""
        self._events.on_event(peer.stage, event)

    def requeue(self, peer: Peer) -> list[FrameKey]:
        """The frames a dead or lost worker held go to the next worker of its stage."""
        return self._router.requeue(peer.stage, peer)

    def _frame_done(self, key: FrameKey, state: FrameState) -> None:
        """Every output wrote the frame: count it, and its slot goes back to its source."""
        assert self._inputs is not None
        record = self._inputs.sources[key.source]
        record.done_frames += 1
        self.metrics.inc("framewire_frames_total", source=key.source, stage="output")
        decode = (state.header.get("ts") or {}).get("decode")
        if decode:
            latency = time.time() - decode[0]
            self.metrics.observe("framewire_end_to_end_latency_seconds", latency, source=key.source)
            record.output_late(key.seq, latency * 1000.0)
        record.give_slot(state.slot)
        self._done_total += 1
        if self.progress is not None:
            self.progress(self._done_total, self._inputs.expected_total(sum(self._report.frames.values())))

    def _grant_when_ready(self) -> None:
        """Sources get their slots once every stage has a worker up: frames then never wait on a
        process start, and a zmq output has bound its socket before the first frame."""
        assert self._inputs is not None
        if not self._inputs.granting and all(self._roster.has_ready(n) for n in self._roster.by_stage):
            self._inputs.start_granting()

    # --- sending -------------------------------------------------------------------------------

    def _send(self, identity: bytes, header: dict[str, Any], tensors: Mapping[str, np.ndarray] | None = None) -> bool:
        """To a local worker; False when it is not connected (yet, or any more: its death is handled)."""
        assert self._sock is not None
        try:
            msg.send(self._sock, msg.encode(header, dict(tensors or {})), prefix=(identity,))
            return True
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                return False
            raise

    def _send_work(self, peer: Any, key: FrameKey, state: FrameState) -> bool:
        header = dict(state.header)
        header["type"] = msg.WORK
        return bool(peer.send(header, peer.work(key, state)))

    @staticmethod
    def _send_end(peer: Any, source: str) -> None:
        peer.send({"type": msg.EOS, "source": source})

    def _drop_pool(self, source: str, pool: str) -> None:
        """A retired source's pool: every local worker unmaps it."""
        for peer in self._roster.all():
            if isinstance(peer, LocalPeer) and peer.ready:
                peer.send({"type": msg.POOL, "source": source, "drop": pool})

    # --- deaths --------------------------------------------------------------------------------

    def _check_workers(self, lifecycle: Lifecycle, inputs: Inputs) -> None:
        for worker in lifecycle.exited():
            self._receive_all()  # what it sent before it ended counts
            if not lifecycle.forget(worker) or worker.finished:
                continue
            if isinstance(worker, DecodeWorker):
                inputs.on_death(worker, exit_text(worker.process.exitcode))
                continue
            how = worker.stalled or exit_text(worker.process.exitcode)
            delay = lifecycle.schedule_restart(worker, how)
            self.metrics.inc("framewire_worker_restarts_total", stage=worker.stage)
            lost = self.requeue(worker)
            log.warning(
                "%s died (%s); restarting it in %.1f s, %d frame(s) it held go to the next worker",
                worker.spec.title, how, delay, len(lost),
            )

    # --- stopping ------------------------------------------------------------------------------

    def _check_stop(self, inputs: Inputs) -> None:
        if not self._stop_requested:
            return
        if self._stop_deadline is None:
            self._report.stopped = True
            self._stop_deadline = time.monotonic() + self.plan.shutdown_timeout_s
            log.warning("stopping: no new frames; draining the ones in flight")
            for record in inputs.sources.values():
                inputs.stop(record)
        elif self._stop_requested > 1 or time.monotonic() > self._stop_deadline:
            raise JobFailed("stopped before every frame in flight was done", 1)

    def _all_done(self, inputs: Inputs) -> bool:
        if self.plan.http is not None and self.plan.http.keep_running and not self._stop_requested:
            return False
        return all(inputs.finished(record) for record in inputs.sources.values())

    def _shutdown(self) -> None:
        if self._lifecycle is not None:
            self._lifecycle.stop_all()
        if self._remote is not None:
            self._remote.stop_all()
        if self._inputs is not None:
            self._inputs.close_pools()
        if self._sock is not None:
            self._sock.close(linger=0)
        if self._ctx is not None:
            self._ctx.term()
        if self._remote is not None:
            self._remote.close()
        if self._owns_ipc_dir:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)

    def _summarise(self) -> None:
        if self._inputs is not None:
            for record in self._inputs.sources.values():
                record.fold_into(self._report)
        if self._lifecycle is not None:
            self._report.restarts = dict(self._lifecycle.restarts)
        self._report.conclude()


def _install_signals(stop: Callable[[], None]) -> dict[int, Any]:
    """SIGINT and SIGTERM ask for a drain, then a hard stop; returns the handlers they replace."""
    old: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, lambda signum, frame: stop())
    except ValueError:  # not the main thread (tests): the caller uses request_stop
        pass
    return old
