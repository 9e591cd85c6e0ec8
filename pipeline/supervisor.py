"""The supervisor: starts the stage processes, routes every frame between them, and recovers.

It is the ZeroMQ guide's load-balancing broker. Every worker connects a DEALER to one ROUTER here
and asks for work by announcing credits; the hub sends a worker a frame only when it has a credit,
remembers which frames each worker holds, and when a worker dies hands those frames to the next
worker of the same stage after restarting it. Frames themselves stay in the shared-memory pool: a
message carries a slot index, small tensors and the frame's header.

Each frame goes: decode -> the middle stages (preprocess, infer, postprocess, composite, each with
one or more workers) -> the per-source reorder buffer -> every output. A slot goes back to its
source once every output is done with the frame, so the number of slots bounds everything in
flight (the credits of the decode stage). End of stream travels in order behind a source's last
frame; each output closes that source's files and answers CLOSED.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import numpy as np
import zmq

from pipeline import curve
from pipeline import messages as msg
from pipeline import remote
from pipeline.control import Command, ControlServer
from pipeline.errors import ConfigError, FramewireError
from pipeline.forkserver import worker_context
from pipeline.framepool import FramePool, PoolLayout, pool_name, sweep_orphans
from pipeline.metrics import Labels, Metrics
from pipeline.worker import WorkerSpec, source_main, worker_main

log = logging.getLogger(__name__)

TICK_MS = 50
RESTART_WINDOW_S = 60.0
OVER_BUDGET_LOG_S = 10.0
"""A source over its latency budget is logged at once, then at most this often (with the count)."""

Key = tuple[str, int]


@dataclass(frozen=True)
class SourcePlan:
    source_id: str
    factory: Callable[[], Any]
    options: dict[str, Any]
    expected_frames: int | None = None


@dataclass(frozen=True)
class HttpSettings:
    """Where /metrics, /healthz and the control API listen (see pipeline.control)."""

    host: str = "127.0.0.1"
    port: int = 8700
    token: str | None = None
    keep_running: bool = False
    """Stay up when every source has ended, waiting for sources added through the control API."""


@dataclass(frozen=True)
class Plan:
    """The job, as processes: built by the layer that knows models (app.plan), run here."""

    middle: tuple[tuple[str, int, Callable[[], Any]], ...]
    """(stage name, workers, stage factory) in order: preprocess, infer, postprocess, composite."""
    outputs: tuple[tuple[str, Callable[[], Any]], ...]
    """(output name, stage factory): one process each, every frame goes to all of them."""
    sources: tuple[SourcePlan, ...]
    slot_layout: Callable[[str, Mapping[str, Any]], dict[str, tuple[tuple[int, ...], str]]]
    """Regions of a slot for a source, from its stream info: {"image": ((h, w, 3), "uint8"), ...}."""
    slots_per_source: int = 16
    credits_per_worker: int = 2
    stage_credits: Mapping[str, int] = field(default_factory=dict)
    """Credits for the workers of one stage, where they differ (a batching infer stage)."""
    restartable: frozenset[str] = frozenset({"preprocess", "infer", "postprocess", "composite"})
    max_restarts: int = 5
    shutdown_timeout_s: float = 10.0
    skip_failed_frames: bool = True
    ipc_dir: str | None = None
    log_level: int = logging.WARNING
    http: HttpSettings | None = None
    make_source: Callable[[Mapping[str, Any]], SourcePlan] | None = None
    """Builds a source added at run time from its config (raises ConfigError)."""
    restart_backoff_s: tuple[float, float] = (0.1, 5.0)
    stall_timeout_s: float | None = None
    """A local worker holding a frame this long is taken as hung and killed (then restarted); None: never."""
    """First and longest delay before a dead worker is started again; doubles each time."""
    preload: tuple[str, ...] = ()
    """Modules every worker imports, imported once in the fork server that starts them."""
    members: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The stages a fused stage runs in its process (stages.fused): {"infer": ("preprocess",
    "infer", ...)}; each stamps its own span, and the metrics count each."""
    remote: remote.RemoteSettings | None = None
    """A tcp:// listener for workers on other hosts (the `worker` command); None: local only."""


@dataclass
class Report:
    """How a job ended."""

    exit_code: int = 0
    error: str | None = None
    frames: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    source_errors: dict[str, str] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    reconnects: dict[str, int] = field(default_factory=dict)
    stale: dict[str, int] = field(default_factory=dict)
    """Frames dropped because they reached inference after the source's max_staleness_ms (also in
    `dropped`, which counts every drop)."""
    offline_s: dict[str, float] = field(default_factory=dict)
    """Seconds live sources spent reconnecting, in gaps that ended."""
    rejected: dict[str, dict[str, int]] = field(default_factory=dict)
    """Bad messages a ZeroMQ source dropped, by reason."""
    over_budget: dict[str, int] = field(default_factory=dict)
    """Frames output later than their source's latency_budget_ms (sources with a budget only)."""
    elapsed_s: float = 0.0
    stopped: bool = False


@dataclass
class _Worker:
    stage: str
    index: int
    generation: int
    process: Any
    spec: WorkerSpec
    credits: int = 0
    ready: bool = False
    inflight: dict[Key, float] = field(default_factory=dict)
    """The frames it holds, with when each was sent (monotonic)."""
    stalled: str | None = None
    """Why the hub killed it as hung, for the death's message."""
    finished: bool = False
    route: bytes | None = None
    """A remote worker's routing id on the tcp:// listener; None for a local worker."""
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    last_seen: float = 0.0

    @property
    def identity(self) -> bytes:
        return self.route if self.route is not None else self.spec.identity


@dataclass
class _FrameState:
    header: dict[str, Any]
    tensors: dict[str, np.ndarray]
    stage_pos: int = 0
    refs: int = 0
    written: frozenset[str] = frozenset({"image"})
    """The slot regions written so far (decode writes the image): what a remote reader may get."""


@dataclass
class _Source:
    plan: SourcePlan
    worker: _Worker | None = None
    info: dict[str, Any] | None = None
    pool: FramePool | None = None
    received: int = 0
    eos_frames: int | None = None
    eos_queued: bool = False
    next_out: int = 0
    reorder: dict[int, Key | None] = field(default_factory=dict)
    """Frames done with the middle stages, by seq; None: dropped as stale, nothing to output."""
    ungranted: list[int] = field(default_factory=list)
    stopping: bool = False
    closed: set[str] = field(default_factory=set)
    done_frames: int = 0
    failed: int = 0
    dropped: int = 0
    error: str | None = None
    # Live sources: decode's STATS (increments) and the stale drops counted here.
    stale: int = 0
    reconnects: int = 0
    offline_s: float = 0.0
    online: bool = True
    corrupt: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    over_budget: int = 0
    over_budget_logged: tuple[float, int] | None = None
    """When the last over-budget warning went out (monotonic) and the count it gave."""

    @property
    def finished(self) -> bool:
        return self.eos_frames is not None and self.eos_queued


class JobFailed(Exception):
    """Ends the hub loop: the job cannot go on (a fatal worker, an output died)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Supervisor:
    """Runs one job to its end (or until stopped) and says how it went."""

    def __init__(self, plan: Plan, progress: Callable[[int, int | None], None] | None = None) -> None:
        self.plan = plan
        self.progress = progress
        self._mp = worker_context(plan.preload)
        self._stage_names = [name for name, _, _ in plan.middle]
        self._output_names = [name for name, _ in plan.outputs]
        self._workers: dict[bytes, _Worker] = {}
        self._by_stage: dict[str, list[_Worker]] = {}
        self._queues: dict[str, deque[Any]] = {n: deque() for n in self._stage_names + self._output_names}
        self._frames: dict[Key, _FrameState] = {}
        self._sources = {s.source_id: _Source(s) for s in plan.sources}
        self._restarts: dict[str, list[float]] = {}
        self._report = Report()
        self._stop_requested = 0
        self._stop_deadline: float | None = None
        self._bad_messages = 0
        self._started = False
        self._next_index = len(plan.sources)
        self._done_total = 0
        self._pools_made = 0
        self._pending_restarts: list[tuple[float, _Worker]] = []
        self._last_tick = time.monotonic()
        self._rates_at = time.monotonic()
        self._rate_marks: dict[tuple[str, str], float] = {}
        self._control: ControlServer | None = None
        self.metrics = _declare_metrics(Metrics())
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._ipc_dir = ""
        self._owns_ipc_dir = False
        # Workers on other hosts (plan.remote): their own socket, by routing id.
        self._remote: dict[bytes, _Worker] = {}
        self._remote_ctx: zmq.Context | None = None
        self._remote_sock: zmq.Socket | None = None
        self._remote_auth: Any = None
        self._remote_joined = 0
        self._missing_since: dict[str, float] = {}

    # --- public --------------------------------------------------------------------------------

    def request_stop(self, *_: Any) -> None:
        """Stop reading the sources and drain what is in flight; a second request stops hard."""
        self._stop_requested += 1

    def run(self) -> Report:
        started = time.monotonic()
        old_handlers = self._install_signals()
        try:
            self._open()
            self._spawn_all()
            self._start_http()
            self._loop()
        except JobFailed as exc:
            self._report.exit_code = exc.exit_code
            self._report.error = str(exc)
        finally:
            if self._control is not None:
                self._control.stop()
            self._shutdown()
            self._restore_signals(old_handlers)
            self._report.elapsed_s = time.monotonic() - started
        self._summarise()
        return self._report

    # --- set-up --------------------------------------------------------------------------------

    def _install_signals(self) -> dict[int, Any]:
        old: dict[int, Any] = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                old[sig] = signal.signal(sig, self._on_signal)
        except ValueError:  # not the main thread (tests): the caller uses request_stop
            pass
        return old

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop()

    @staticmethod
    def _restore_signals(old: dict[int, Any]) -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)

    def _open(self) -> None:
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
        if self.plan.remote is not None:
            try:
                self._remote_ctx, self._remote_sock, self._remote_auth = remote.open_listener(self.plan.remote)
            except FramewireError as exc:
                raise JobFailed(str(exc), exc.exit_code) from None
            except zmq.ZMQError as exc:
                raise JobFailed(f"transport.listen: cannot listen on {self.plan.remote.listen}: {exc}") from None
            log.info("listening for remote workers on %s", self.plan.remote.listen)

    def _spawn_all(self) -> None:
        remote_only = self.plan.remote.remote_only if self.plan.remote is not None else frozenset()
        for name, count, factory in self.plan.middle:
            self._by_stage[name] = []
            for index in range(0 if name in remote_only else count):
                self._spawn(name, index, 0, factory, worker_main, credits=self.plan.stage_credits.get(name))
        for index, (name, factory) in enumerate(self.plan.outputs):
            self._by_stage[name] = []
            if name in remote_only:
                continue
            self._spawn(
                name,
                0,
                0,
                factory,
                worker_main,
                credits=max(4, self.plan.credits_per_worker),
                label=f"output[{index}]",
            )
        for index, source in enumerate(self.plan.sources):
            worker = self._spawn(
                "decode",
                index,
                0,
                source.factory,
                source_main,
                source_id=source.source_id,
                options=source.options,
            )
            self._sources[source.source_id].worker = worker

    def _spawn(
        self,
        stage: str,
        index: int,
        generation: int,
        factory: Callable[[], Any],
        target: Callable[[WorkerSpec], None],
        *,
        credits: int | None = None,
        source_id: str | None = None,
        options: dict[str, Any] | None = None,
        label: str | None = None,
    ) -> _Worker:
        spec = WorkerSpec(
            stage=stage,
            index=index,
            generation=generation,
            endpoint=self.endpoint,
            credits=credits or self.plan.credits_per_worker,
            factory=factory,
            log_level=self.plan.log_level,
            source_id=source_id,
            source_options=options or {},
            label=label,
        )
        process = self._mp.Process(target=target, args=(spec,), name=spec.title, daemon=True)
        process.start()
        worker = _Worker(stage, index, generation, process, spec)
        self._workers[spec.identity] = worker
        if stage != "decode":
            stage_list = self._by_stage.setdefault(stage, [])
            stage_list[:] = [w for w in stage_list if w.index != index] + [worker]
        log.debug("started %s (pid %s)", spec.title, process.pid)
        return worker

    # --- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        assert self._sock is not None
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        if self._remote_sock is not None:
            poller.register(self._remote_sock, zmq.POLLIN)
        next_check = 0.0
        while not self._all_done():
            self._last_tick = time.monotonic()
            self._check_stop()
            events = dict(poller.poll(TICK_MS))
            if self._sock in events:
                self._receive_all()
            if self._remote_sock is not None and self._remote_sock in events:
                self._receive_remote()
            # Once a tick, not once a message: asking every process whether it lives costs a
            # system call each, which at hundreds of frames a second was a fifth of the hub's time.
            now = time.monotonic()
            if now >= next_check:
                next_check = now + TICK_MS / 1000.0
                self._check_stalls(now)
                self._check_workers()
                if self._remote_sock is not None:
                    self._check_remote(now)
                self._restart_due()
                self._run_commands()
                self._retire_finished()
                self._update_gauges()
            self._dispatch()

    def _receive_all(self) -> None:
        assert self._sock is not None
        for _ in range(1000):
            try:
                parts = self._sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self._handle(parts)

    def _handle(self, parts: list[Any]) -> None:
        identity = parts[0].bytes
        worker = self._workers.get(identity)
        try:
            header, tensors = msg.decode(parts[1:])
        except msg.WireError as exc:
            self._bad_messages += 1
            self.metrics.inc("framewire_bad_messages_total", reason=_reason(str(exc)))
            log.warning("dropped a bad message from %r: %s", identity, exc)
            return
        if worker is None:
            self._bad_messages += 1
            self.metrics.inc("framewire_bad_messages_total", reason="unknown_peer")
            log.debug("message from an unknown or retired worker %r", identity)
            return
        kind = header["type"]
        handler = {
            msg.READY: self._on_ready,
            msg.RESULT: self._on_result,
            msg.FAILED: self._on_failed,
            msg.FATAL: self._on_fatal,
            msg.STREAM: self._on_stream,
            msg.FRAME: self._on_frame,
            msg.EOS: self._on_eos,
            msg.CLOSED: self._on_closed,
            msg.STATS: self._on_stats,
        }.get(kind)
        if handler is None:
            self._bad_messages += 1
            log.warning("unexpected %s message from %s", kind, worker.spec.title)
            return
        handler(worker, header, tensors)

    # --- messages from workers -----------------------------------------------------------------

    def _on_ready(self, worker: _Worker, header: dict[str, Any], _: dict[str, np.ndarray]) -> None:
        worker.ready = True
        worker.credits = max(1, int(header.get("credits", 1))) - len(worker.inflight)
        if worker.route is None:  # a remote worker's were checked when it joined
            worker.writes = frozenset(header.get("writes") or ())
        provider = header.get("provider")
        if isinstance(provider, str):
            self.metrics.set(
                "framewire_provider_info", 1, stage=worker.stage, index=worker.index, provider=provider
            )
        for source in self._sources.values():  # an output learns the streams before their frames
            if source.info is not None and worker.stage in self._output_names:
                self._send(worker, {"type": msg.STREAM, "source": source.plan.source_id, "info": source.info})
        self._grant_when_ready()

    def _on_stream(self, worker: _Worker, header: dict[str, Any], _: dict[str, np.ndarray]) -> None:
        source = self._sources[worker.spec.source_id or ""]
        info = dict(header.get("info") or {})
        source.info = info
        if source.stopping:
            self._send(worker, {"type": msg.STOP})
        regions = self.plan.slot_layout(source.plan.source_id, info)
        self._pools_made += 1
        name = pool_name(os.getpid(), self._pools_made, source.plan.source_id)
        layout = PoolLayout.plan(name, self.plan.slots_per_source, regions)
        source.pool = FramePool.create(layout)
        log.info(
            "source %s: %sx%s, pool of %d slots (%.1f MiB)",
            source.plan.source_id,
            info.get("width"),
            info.get("height"),
            layout.slots,
            layout.total_bytes / 2**20,
        )
        self._send(worker, {"type": msg.POOL, "source": source.plan.source_id, "pool": layout.to_wire()})
        source.ungranted = list(range(layout.slots))
        self._grant_when_ready()
        for name in self._output_names:
            for out in self._by_stage.get(name, []):
                if out.ready:
                    self._send(out, {"type": msg.STREAM, "source": source.plan.source_id, "info": info})

    def _grant_when_ready(self) -> None:
        """Sources get their slots once every stage has a worker up: frames then never wait on a
        process start, and a zmq output has bound its socket before the first frame."""
        if not self._started:
            names = self._stage_names + self._output_names
            if not all(any(w.ready for w in self._by_stage.get(n, [])) for n in names):
                return
            self._started = True
        for source in self._sources.values():
            if source.ungranted and source.worker is not None and not source.worker.finished:
                self._send(source.worker, {"type": msg.GRANT, "slots": source.ungranted})
                source.ungranted = []

    def _on_frame(self, worker: _Worker, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        source = self._sources[worker.spec.source_id or ""]
        seq = int(header["seq"])
        if seq != source.received:
            log.warning("source %s: frame seq %s, expected %s", source.plan.source_id, seq, source.received)
        source.received = seq + 1
        source.dropped += int(header.pop("dropped", 0))
        header.pop("type", None)
        key = (source.plan.source_id, seq)
        self._frames[key] = _FrameState(header, dict(tensors))
        self._advance(key)

    def _on_stats(self, worker: _Worker, header: dict[str, Any], _: dict[str, np.ndarray]) -> None:
        source = self._sources.get(str(header.get("source")))
        if source is None:
            return
        if source.stopping and source.info is None:  # a live source still connecting: tell it again
            self._send(worker, {"type": msg.STOP})
        try:
            source.dropped += int(header.get("dropped", 0))
            source.reconnects += int(header.get("reconnects", 0))
            source.offline_s += float(header.get("offline_s", 0.0))
            source.corrupt += int(header.get("corrupt", 0))
            if "online" in header:
                source.online = bool(header["online"])
            for reason, count in dict(header.get("rejected") or {}).items():
                source.rejected[str(reason)[:32]] = source.rejected.get(str(reason)[:32], 0) + int(count)
        except (TypeError, ValueError) as exc:
            log.warning("source %s: bad STATS message: %s", source.plan.source_id, exc)

    def _on_result(self, worker: _Worker, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        key = (str(header.get("source")), int(header.get("seq", -1)))
        self._credit_back(worker, key)
        state = self._frames.get(key)
        if state is None:
            return
        if worker.stage in self._output_names:
            self._output_done(key, state)
            return
        if not self._at_stage(state, worker.stage):
            log.debug("late duplicate result for %s at %s", key, worker.stage)
            return
        if header.get("stale"):  # past its max_staleness_ms before inference (pipeline.worker._stale)
            self._drop_stale(key, state)
            return
        header.pop("type", None)
        header.pop("stage", None)
        spans = header.get("ts") or {}
        for stage in self.plan.members.get(worker.stage, (worker.stage,)):
            self.metrics.inc("framewire_frames_total", source=key[0], stage=stage)
            span = spans.get(stage)
            if span:
                self.metrics.observe("framewire_stage_latency_seconds", span[1] - span[0], stage=stage)
        state.header = header
        state.tensors = dict(tensors)
        state.stage_pos += 1
        if worker.writes:
            state.written = state.written | worker.writes
        self._advance(key)

    def _on_failed(self, worker: _Worker, header: dict[str, Any], _: dict[str, np.ndarray]) -> None:
        key = (str(header.get("source")), int(header.get("seq", -1)))
        self._credit_back(worker, key)
        state = self._frames.get(key)
        error = str(header.get("error", "unknown error"))
        if state is None:
            return
        if worker.stage in self._output_names:
            raise JobFailed(f"output {worker.stage} failed on source {key[0]} frame {key[1]}: {error}")
        if not self._at_stage(state, worker.stage):
            return
        if not self.plan.skip_failed_frames:
            raise JobFailed(f"{worker.stage} failed on source {key[0]} frame {key[1]}: {error}")
        self._sources[key[0]].failed += 1
        self.metrics.inc("framewire_failed_frames_total", source=key[0], stage=worker.stage)
        state.header["error"] = f"{worker.stage}: {error}"
        state.header.pop("result", None)
        state.tensors = {}
        state.stage_pos = len(self._stage_names)  # straight on to the outputs, unprocessed
        self._advance(key)

    def _on_fatal(self, worker: _Worker, header: dict[str, Any], _: dict[str, np.ndarray]) -> None:
        worker.finished = True
        raise JobFailed(str(header.get("error", f"{worker.spec.title} failed")), int(header.get("exit", 1)))

    def _on_eos(self, worker: _Worker, header: dict[str, Any], _: dict[str, np.ndarray]) -> None:
        source = self._sources[worker.spec.source_id or ""]
        worker.finished = True
        if header.get("error"):
            source.error = str(header["error"])
            # Alone, the job's final error line says it; beside others, say it as it happens.
            level = logging.WARNING if len(self._sources) > 1 else logging.INFO
            log.log(level, "source %s ended with an error: %s", source.plan.source_id, source.error)
        source.eos_frames = int(header.get("frames", source.received))
        if source.eos_frames != source.received:
            log.warning(
                "source %s: end of stream after %s frames, %s received",
                source.plan.source_id,
                source.eos_frames,
                source.received,
            )
            source.eos_frames = source.received
        self._release_in_order(source)

    def _on_closed(self, worker: _Worker, header: dict[str, Any], _: dict[str, np.ndarray]) -> None:
        source = self._sources.get(str(header.get("source")))
        if source is not None:
            source.closed.add(worker.stage)

    # --- frame movement ------------------------------------------------------------------------

    def _at_stage(self, state: _FrameState, stage: str) -> bool:
        pos = state.stage_pos
        return pos < len(self._stage_names) and self._stage_names[pos] == stage

    def _advance(self, key: Key) -> None:
        state = self._frames[key]
        if state.stage_pos < len(self._stage_names):
            self._queues[self._stage_names[state.stage_pos]].append(key)
            return
        source = self._sources[key[0]]
        source.reorder[key[1]] = key
        self._release_in_order(source)

    def _drop_stale(self, key: Key, state: _FrameState) -> None:
        """A frame that reached inference too late (the source's `max_staleness_ms`): it is dropped,
        not passed on unprocessed, so no output shows it as if it had been processed (a video file
        of a live source simply has fewer frames). Its slot goes straight back to the source, the
        order buffer steps over its seq, and it counts as dropped, reason "stale"."""
        del self._frames[key]
        source = self._sources[key[0]]
        source.stale += 1
        slot = int(state.header.get("slot", -1))
        if source.worker is not None and not source.worker.finished and slot >= 0:
            self._send(source.worker, {"type": msg.GRANT, "slots": [slot]})
        source.reorder[key[1]] = None
        self._release_in_order(source)

    def _release_in_order(self, source: _Source) -> None:
        """Hand frames to the outputs in sequence order; then end of stream, once."""
        while source.next_out in source.reorder:
            key = source.reorder.pop(source.next_out)
            if key is None:  # dropped as stale: the outputs never see it
                source.next_out += 1
                continue
            state = self._frames[key]
            state.refs = len(self._output_names)
            for name in self._output_names:
                self._queues[name].append(key)
            source.next_out += 1
            if not self._output_names:
                self._output_done(key, state)
        if (
            source.eos_frames is not None
            and not source.eos_queued
            and source.next_out >= source.eos_frames
        ):
            source.eos_queued = True
            for name in self._output_names:
                self._queues[name].append(("eos", source.plan.source_id))

    def _output_done(self, key: Key, state: _FrameState) -> None:
        state.refs -= 1
        if state.refs > 0:
            return
        del self._frames[key]
        source = self._sources[key[0]]
        source.done_frames += 1
        self.metrics.inc("framewire_frames_total", source=key[0], stage="output")
        decode = (state.header.get("ts") or {}).get("decode")
        if decode:
            latency = time.time() - decode[0]
            self.metrics.observe("framewire_end_to_end_latency_seconds", latency, source=key[0])
            budget = source.plan.options.get("latency_budget_ms")
            if budget and latency * 1000.0 > budget:
                self._over_budget(source, key[1], latency * 1000.0, float(budget))
        slot = int(state.header.get("slot", -1))
        if source.worker is not None and not source.worker.finished and slot >= 0:
            self._send(source.worker, {"type": msg.GRANT, "slots": [slot]})
        self._done_total += 1
        if self.progress is not None:
            self.progress(self._done_total, self._expected_total())

    def _over_budget(self, source: _Source, seq: int, latency_ms: float, budget_ms: float) -> None:
        """Count a frame output after its source's latency budget; warn now and then, not per frame."""
        source.over_budget += 1
        now = time.monotonic()
        last = source.over_budget_logged
        if last is None or now - last[0] >= OVER_BUDGET_LOG_S:
            since = source.over_budget - (last[1] if last else 0)
            log.warning(
                "source %s: seq %d took %.0f ms end to end, over its latency budget of %g ms "
                "(%d frame(s) over since the last warning, %d in all)",
                source.plan.source_id, seq, latency_ms, budget_ms, since, source.over_budget,
            )
            source.over_budget_logged = (now, source.over_budget)

    def _expected_total(self) -> int | None:
        total = sum(self._report.frames.values())  # sources already retired
        for source in self._sources.values():
            counted = (source.info or {}).get("frame_count")
            if source.eos_frames is not None:
                total += source.eos_frames
            elif isinstance(counted, int) and counted > 0:
                limit = source.plan.options.get("max_frames")
                total += min(counted, limit) if limit else counted
            elif source.plan.expected_frames is not None:
                total += source.plan.expected_frames
            else:
                return None
        return total

    def _credit_back(self, worker: _Worker, key: Key) -> None:
        if key in worker.inflight:
            del worker.inflight[key]
            worker.credits += 1

    def _dispatch(self) -> None:
        for name, queue in self._queues.items():
            if not queue:
                continue
            workers = [w for w in self._by_stage.get(name, []) if w.ready and not w.finished]
            while queue:
                head = queue[0]
                if isinstance(head, tuple) and head and head[0] == "eos":
                    if not workers:
                        break
                    queue.popleft()
                    for w in workers:
                        self._send(w, {"type": msg.EOS, "source": head[1]})
                    continue
                candidates = [w for w in workers if w.credits > 0]
                if not candidates:
                    break
                worker = min(candidates, key=lambda w: len(w.inflight))
                key = queue.popleft()
                state = self._frames.get(key)
                if state is None:
                    continue
                header = dict(state.header)
                header["type"] = msg.WORK
                tensors = state.tensors if worker.route is None else self._inline(key, state, worker)
                if self._send(worker, header, tensors):
                    worker.credits -= 1
                    worker.inflight[key] = time.monotonic()
                else:
                    queue.appendleft(key)
                    break

    def _send(self, worker: _Worker, header: dict[str, Any], tensors: Mapping[str, np.ndarray] | None = None) -> bool:
        if worker.route is not None:
            return self._send_remote(worker.route, header, tensors)
        assert self._sock is not None
        try:
            msg.send(self._sock, msg.encode(header, dict(tensors or {})), prefix=(worker.identity,))
            return True
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:  # not connected yet, or gone: its death is handled
                return False
            raise

    # --- workers on other hosts (pipeline.remote) ------------------------------------------------

    def _receive_remote(self) -> None:
        assert self._remote_sock is not None
        for _ in range(1000):
            try:
                parts = self._remote_sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self._handle_remote(parts)

    def _bad(self, reason: str, who: bytes, error: str) -> None:
        self._bad_messages += 1
        self.metrics.inc("framewire_bad_messages_total", reason=reason)
        log.warning("dropped a bad message from remote %r: %s", who[:64], error)

    def _handle_remote(self, parts: list[Any]) -> None:
        """A message from a worker on another host: checked like any, and more (it is untrusted)."""
        route = parts[0].bytes
        try:
            header, tensors = msg.decode(parts[1:])
        except msg.WireError as exc:
            self._bad(_reason(str(exc)), route, str(exc))
            return
        kind = header["type"]
        worker = self._remote.get(route)
        if worker is None:
            if kind == msg.READY:
                self._join(route, header, parts[1])
            elif kind == msg.PING:  # restarted hub, or a worker declared lost: it should register
                self._send_remote(route, {"type": msg.PONG, "known": False})
            elif kind != msg.BYE:
                self._bad("unknown_peer", route, f"{kind} from a worker that has not joined")
            return
        worker.last_seen = time.monotonic()
        try:
            if kind == msg.PING:
                self._send_remote(route, {"type": msg.PONG, "known": True})
            elif kind == msg.READY:
                remote.check_ready(header, [worker.stage])
                self._on_ready(worker, header, {})
            elif kind == msg.RESULT:
                self._on_remote_result(worker, header, tensors)
            elif kind == msg.FAILED:
                if (str(header.get("source")), int(header.get("seq", -1))) in worker.inflight:
                    self._on_failed(worker, header, {})
            elif kind == msg.CLOSED and worker.stage in self._output_names:
                self._on_closed(worker, header, {})
            elif kind == msg.BYE:
                self._lose_remote(worker, "it left")
            elif kind == msg.FATAL:
                log.error("remote %s worker %s failed: %s", worker.stage, _peer(route), header.get("error"))
                self._lose_remote(worker, "it failed")
            else:
                self._bad("type", route, f"a remote worker may not send {kind}")
        except msg.WireError as exc:
            self._bad(_reason(str(exc)), route, str(exc))

    def _join(self, route: bytes, header: dict[str, Any], first: Any) -> None:
        try:
            joining = remote.check_ready(header, self._stage_names + self._output_names)
        except msg.WireError as exc:
            self._bad(_reason(str(exc)), route, str(exc))
            self._send_remote(route, {"type": msg.STOP, "error": str(exc)})
            return
        if joining.stage in self._output_names and self._by_stage.get(joining.stage):
            error = f"output {joining.stage} already has its worker (an output runs in one process)"
            log.warning("refused remote worker %s: %s", _peer(route), error)
            self._send_remote(route, {"type": msg.STOP, "error": error})
            return
        assert self.plan.remote is not None
        self._remote_joined += 1
        spec = WorkerSpec(
            stage=joining.stage,
            index=1000 + self._remote_joined,
            generation=0,
            endpoint=self.plan.remote.listen,
            credits=joining.credits,
            factory=_remote_only,
            label=f"remote {joining.stage} {_peer(route)}",
        )
        worker = _Worker(
            joining.stage,
            spec.index,
            0,
            None,
            spec,
            route=route,
            reads=joining.reads,
            writes=joining.writes,
            last_seen=time.monotonic(),
        )
        self._remote[route] = worker
        self._by_stage.setdefault(joining.stage, []).append(worker)
        if not isinstance(header.get("provider"), str) or len(header["provider"]) > 64:
            header.pop("provider", None)
        try:
            where = first.get("Peer-Address")
        except (zmq.ZMQError, AttributeError):
            where = "?"
        log.warning(
            "remote %s worker %s joined from %s (%d credits)", joining.stage, _peer(route), where, joining.credits
        )
        self._on_ready(worker, header, {})

    def _on_remote_result(self, worker: _Worker, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        key = (str(header.get("source")), int(header.get("seq", -1)))
        state = self._frames.get(key)
        source = self._sources.get(key[0])
        if state is None or source is None or key not in worker.inflight:
            self._credit_back(worker, key)  # late or duplicate: nothing to take from it
            return
        if self._at_stage(state, worker.stage) and header.get("stale") is not True:
            try:
                assert source.pool is not None
                merged, plain, regions = remote.accept_result(
                    state.header, header, tensors, source.pool.layout, worker.writes, worker.stage,
                    self.plan.members.get(worker.stage, ()),
                )
            except msg.WireError as exc:
                self._bad(_reason(str(exc)), worker.identity, str(exc))
                failed = {"source": key[0], "seq": key[1], "error": f"a bad result from a remote worker: {exc}"}
                self._on_failed(worker, failed, {})
                return
            slot = int(state.header["slot"])
            for name, array in regions.items():
                np.copyto(source.pool.view(slot, name), array)
            header, tensors = merged, plain
        self._on_result(worker, header, tensors)

    def _inline(self, key: Key, state: _FrameState, worker: _Worker) -> dict[str, np.ndarray]:
        """A frame's tensors plus the slot regions a remote worker reads (those written by now)."""
        source = self._sources.get(key[0])
        names = worker.reads & state.written
        if source is None or source.pool is None or not names:
            return state.tensors
        regions = remote.region_tensors(source.pool, int(state.header["slot"]), sorted(names))
        return {**state.tensors, **regions}

    def _send_remote(self, route: bytes, header: dict[str, Any], tensors: Mapping[str, np.ndarray] | None = None) -> bool:
        """Never blocks: a remote peer that does not read (its marks are full) is not waited for."""
        assert self._remote_sock is not None
        try:
            self._remote_sock.send_multipart([route, *msg.encode(header, dict(tensors or {}))], zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:  # disconnected: it reconnects, or times out
                return False
            raise

    def _check_remote(self, now: float) -> None:
        """Remote workers silent past the timeout are lost; a remote-only stage without a worker
        fails the job after `wait_s` (when set)."""
        settings = self.plan.remote
        assert settings is not None
        for worker in list(self._remote.values()):
            if now - worker.last_seen > settings.timeout_s:
                self._lose_remote(worker, f"silent for {now - worker.last_seen:.1f} s")
        for name in settings.remote_only:
            if any(w.ready for w in self._by_stage.get(name, [])):
                self._missing_since.pop(name, None)
                continue
            since = self._missing_since.setdefault(name, now)
            if settings.wait_s is not None and now - since > settings.wait_s and not self._all_done():
                raise JobFailed(
                    f"no {name} worker connected to {settings.listen} for {settings.wait_s:g} s "
                    f"(start one with `run_pipeline.py worker --stage {name}`; check its keys and the firewall)"
                )

    def _lose_remote(self, worker: _Worker, why: str) -> None:
        """A remote worker left, failed or went silent: the frames it held go to the next worker.
        Nobody restarts it; if it comes back it joins again as a new worker."""
        assert worker.route is not None
        self._remote.pop(worker.route, None)
        worker.finished = True
        worker.ready = False
        self._by_stage[worker.stage] = [w for w in self._by_stage.get(worker.stage, []) if w is not worker]
        self.metrics.inc("framewire_remote_workers_lost_total", stage=worker.stage)
        if worker.stage in self._output_names:
            raise JobFailed(f"remote output {worker.stage} ({_peer(worker.route)}) was lost: {why}")
        lost = self._requeue(worker)
        log.warning(
            "remote %s worker %s lost (%s); %d frame(s) it held go to the next worker",
            worker.stage,
            _peer(worker.route),
            why,
            len(lost),
        )

    def _close_remote(self) -> None:
        curve.close(self._remote_ctx, self._remote_sock, self._remote_auth, linger=1000)
        self._remote_ctx, self._remote_sock, self._remote_auth = None, None, None

    # --- deaths and restarts -------------------------------------------------------------------

    def _check_workers(self) -> None:
        for worker in list(self._workers.values()):
            if worker.process.is_alive():
                continue
            self._receive_all()  # what it sent before it ended counts
            if self._workers.get(worker.identity) is not worker:
                continue
            del self._workers[worker.identity]
            if worker.finished:
                continue
            self._on_death(worker)

    def _check_stalls(self, now: float) -> None:
        """Kill a local worker that has held a frame past `stall_timeout_s`: a stage stuck in a
        driver call or a deadlock never dies on its own. Its death then goes the usual way."""
        limit = self.plan.stall_timeout_s
        if limit is None:
            return
        for worker in self._workers.values():
            if worker.route is not None or worker.stalled or not worker.inflight:
                continue  # remote workers have their own timeout (remote_timeout_s)
            key, sent = min(worker.inflight.items(), key=lambda item: item[1])
            if now - sent <= limit:
                continue
            worker.stalled = (
                f"hung: held frame {key[1]} of source {key[0]} for {now - sent:.1f} s, over stages.stall_timeout_s"
            )
            log.error("%s %s; killing it", worker.spec.title.removeprefix("framewire: "), worker.stalled)
            self.metrics.inc("framewire_worker_stalls_total", stage=worker.stage)
            worker.process.kill()

    def _on_death(self, worker: _Worker) -> None:
        how = worker.stalled or _exit_text(worker.process.exitcode)
        if worker.stage == "decode":
            source = self._sources[worker.spec.source_id or ""]
            source.error = f"decode worker for source {source.plan.source_id} died ({how})"
            log.warning("%s", source.error)
            worker.finished = True
            source.eos_frames = source.received
            self._release_in_order(source)
            return
        if worker.stage not in self.plan.restartable:
            raise JobFailed(f"{worker.spec.title.removeprefix('framewire: ')} worker died ({how})")
        now = time.monotonic()
        recent = [t for t in self._restarts.get(worker.stage, []) if now - t < RESTART_WINDOW_S]
        if len(recent) >= self.plan.max_restarts:
            raise JobFailed(
                f"{worker.stage} workers keep dying ({len(recent) + 1} times in a minute, last {how})"
            )
        self._restarts[worker.stage] = recent + [now]
        self._report.restarts[worker.stage] = self._report.restarts.get(worker.stage, 0) + 1
        self.metrics.inc("framewire_worker_restarts_total", stage=worker.stage)
        first, longest = self.plan.restart_backoff_s
        delay = min(longest, first * 2 ** len(recent))
        lost = self._requeue(worker)
        log.warning(
            "%s died (%s); restarting it in %.1f s, %d frame(s) it held go to the next worker",
            worker.spec.title,
            how,
            delay,
            len(lost),
        )
        self._by_stage[worker.stage] = [w for w in self._by_stage.get(worker.stage, []) if w is not worker]
        self._pending_restarts.append((now + delay, worker))

    def _requeue(self, worker: _Worker) -> list[Key]:
        """The frames a dead or lost worker held go back to the front of its stage's queue."""
        queue = self._queues[worker.stage]
        lost = sorted(worker.inflight, key=lambda k: (k[1], k[0]), reverse=True)
        for key in lost:
            if key in self._frames and self._at_stage(self._frames[key], worker.stage):
                queue.appendleft(key)
        return lost

    def _restart_due(self) -> None:
        if not self._pending_restarts:
            return
        now = time.monotonic()
        due = [(t, w) for t, w in self._pending_restarts if t <= now]
        self._pending_restarts = [(t, w) for t, w in self._pending_restarts if t > now]
        for _, worker in due:
            self._spawn(
                worker.stage,
                worker.index,
                worker.generation + 1,
                worker.spec.factory,
                worker_main,
                credits=worker.spec.credits,
                label=worker.spec.label,
            )

    # --- http: metrics, health, control --------------------------------------------------------

    def _start_http(self) -> None:
        settings = self.plan.http
        if settings is None:
            return
        try:
            self._control = ControlServer(settings.host, settings.port, settings.token, self.metrics, self.health)
        except OSError as exc:
            raise JobFailed(f"http: cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}") from None
        self._control.start()
        self.http_url = self._control.url

    def health(self) -> dict[str, bool]:
        """Live: the hub loop turned in the last few seconds. Ready: every stage has a worker up
        (a stage that runs only on other hosts: one is connected now)."""
        live = time.monotonic() - self._last_tick < 5.0
        ready = live and self._started and not self._stop_requested
        if ready and self.plan.remote is not None:
            ready = all(any(w.ready for w in self._by_stage.get(n, [])) for n in self.plan.remote.remote_only)
        return {"live": live, "ready": ready}

    def _run_commands(self) -> None:
        if self._control is None:
            return
        while True:
            try:
                command = self._control.commands.get_nowait()
            except Exception:  # queue.Empty
                return
            try:
                self._command(command)
            except FramewireError as exc:
                command.answer(400, {"error": str(exc)})
            except Exception as exc:  # an API call must never take the daemon down
                log.exception("control command %s failed", command.action)
                command.answer(500, {"error": f"{type(exc).__name__}: {exc}"})

    def _command(self, command: Command) -> None:
        if command.action == "list":
            command.answer(200, {"sources": [self._describe(s) for s in self._sources.values()]})
        elif command.action == "add":
            self._add_source(command)
        elif command.action == "remove":
            source = self._sources.get(str(command.body))
            if source is None:
                command.answer(404, {"error": f"no source {command.body!r}"})
                return
            self._stop_source(source)
            command.answer(202, {"removing": source.plan.source_id})
        elif command.action in ("drain", "stop"):
            self.request_stop()
            if command.action == "stop":
                self.request_stop()
            command.answer(202, {command.action: True})
        else:
            command.answer(404, {"error": f"unknown command {command.action!r}"})

    def _add_source(self, command: Command) -> None:
        if self.plan.make_source is None:
            command.answer(501, {"error": "this job cannot add sources"})
            return
        if self._stop_requested:
            command.answer(409, {"error": "the daemon is stopping"})
            return
        if not isinstance(command.body, dict):
            raise ConfigError("the body must be a JSON object with the keys of a sources: item")
        source_plan = self.plan.make_source(command.body)
        if source_plan.source_id in self._sources:
            command.answer(409, {"error": f"source {source_plan.source_id!r} already exists"})
            return
        source = _Source(source_plan)
        self._sources[source_plan.source_id] = source
        index = self._next_index
        self._next_index += 1
        source.worker = self._spawn(
            "decode",
            index,
            0,
            source_plan.factory,
            source_main,
            source_id=source_plan.source_id,
            options=source_plan.options,
        )
        log.info("source %s added", source_plan.source_id)
        command.answer(201, self._describe(source))

    def _describe(self, source: _Source) -> dict[str, Any]:
        state = "running"
        if source.finished:
            state = "ended"
        elif source.eos_frames is not None:
            state = "draining"
        elif source.info is None:
            state = "opening"
        return {
            "id": source.plan.source_id,
            "state": state,
            "frames": source.done_frames,
            "dropped": source.dropped,
            "stale": source.stale,
            "over_budget": source.over_budget,
            "failed": source.failed,
            "reconnects": source.reconnects,
            "offline_s": round(source.offline_s, 3),
            "online": source.online,
            "error": source.error,
            "width": (source.info or {}).get("width"),
            "height": (source.info or {}).get("height"),
        }

    def _update_gauges(self) -> None:
        m = self.metrics
        depth: dict[Labels, float] = {(("stage", n),): float(len(q)) for n, q in self._queues.items()}
        m.replace("framewire_queue_depth", depth)
        held: dict[Labels, float] = {
            (("stage", n),): float(sum(len(w.inflight) for w in ws)) for n, ws in self._by_stage.items()
        }
        m.replace("framewire_frames_in_flight", held)
        used: dict[Labels, float] = {}
        slots: dict[Labels, float] = {}
        dropped: dict[Labels, float] = {}
        up: dict[Labels, float] = {}
        reconnects: dict[Labels, float] = {}
        offline: dict[Labels, float] = {}
        online: dict[Labels, float] = {}
        corrupt: dict[Labels, float] = {}
        rejected: dict[Labels, float] = {}
        over: dict[Labels, float] = {}
        for sid, source in self._sources.items():
            key = (("source", sid),)
            if source.pool is not None:
                slots[key] = float(source.pool.layout.slots)
                used[key] = float(sum(1 for k in self._frames if k[0] == sid))
            dropped[(("reason", "policy"), ("source", sid))] = float(source.dropped)
            dropped[(("reason", "stale"), ("source", sid))] = float(source.stale)
            up[key] = 0.0 if source.finished else 1.0
            reconnects[key] = float(source.reconnects)
            offline[key] = float(source.offline_s)
            online[key] = 1.0 if source.online and not source.finished else 0.0
            corrupt[key] = float(source.corrupt)
            if source.plan.options.get("latency_budget_ms"):
                over[key] = float(source.over_budget)
            for reason, count in source.rejected.items():
                rejected[(("reason", reason), ("source", sid))] = float(count)
        m.replace("framewire_pool_slots", slots)
        m.replace("framewire_pool_slots_used", used)
        m.replace("framewire_dropped_frames_total", dropped)
        m.replace("framewire_source_up", up)
        m.replace("framewire_reconnects_total", reconnects)
        m.replace("framewire_source_offline_seconds_total", offline)
        m.replace("framewire_source_online", online)
        m.replace("framewire_corrupt_frames_total", corrupt)
        m.replace("framewire_rejected_messages_total", rejected)
        m.replace("framewire_latency_over_budget_total", over)
        ready: dict[Labels, float] = {
            (("stage", n),): float(sum(1 for w in ws if w.ready)) for n, ws in self._by_stage.items()
        }
        m.replace("framewire_workers", ready)
        now = time.monotonic()
        if now - self._rates_at >= 1.0:
            fps = {}
            with m.lock:
                totals = dict(m._families["framewire_frames_total"].values)
            for labels_, total in totals.items():
                mark = self._rate_marks.get(labels_, total)  # type: ignore[arg-type]
                fps[labels_] = (total - mark) / (now - self._rates_at)
                self._rate_marks[labels_] = total  # type: ignore[index]
            m.replace("framewire_fps", fps)
            self._rates_at = now

    # --- stopping ------------------------------------------------------------------------------

    def _check_stop(self) -> None:
        if not self._stop_requested:
            return
        if self._stop_deadline is None:
            self._report.stopped = True
            self._stop_deadline = time.monotonic() + self.plan.shutdown_timeout_s
            log.warning("stopping: no new frames; draining the ones in flight")
            for source in self._sources.values():
                self._stop_source(source)
        elif self._stop_requested > 1 or time.monotonic() > self._stop_deadline:
            raise JobFailed("stopped before every frame in flight was done", 1)

    def _retire_finished(self) -> None:
        """A source whose outputs are all closed: unlink its pool, let the workers unmap it, keep
        only its counts. A daemon that adds and removes sources for weeks holds nothing of them."""
        outputs = set(self._output_names)
        for sid, source in list(self._sources.items()):
            if not source.finished or source.closed != outputs:
                continue
            if any(key[0] == sid for key in self._frames):
                continue
            self._fold_into_report(sid, source)
            if source.pool is not None:
                name = source.pool.layout.name
                source.pool.close()
                source.pool = None
                for worker in self._workers.values():
                    if worker.ready and worker.stage != "decode":
                        self._send(worker, {"type": msg.POOL, "source": sid, "drop": name})
            del self._sources[sid]
            for series in list(self._rate_marks):
                if ("source", sid) in series:
                    del self._rate_marks[series]

    def _fold_into_report(self, sid: str, source: _Source) -> None:
        report = self._report
        report.frames[sid] = source.done_frames
        report.failed[sid] = source.failed
        report.dropped[sid] = source.dropped + source.stale
        report.stale[sid] = source.stale
        report.reconnects[sid] = source.reconnects
        report.offline_s[sid] = round(source.offline_s, 3)
        if source.rejected:
            report.rejected[sid] = dict(source.rejected)
        if source.plan.options.get("latency_budget_ms"):
            report.over_budget[sid] = source.over_budget
        if source.error:
            report.source_errors[sid] = source.error

    def _stop_source(self, source: _Source) -> None:
        """Ask a source to stop reading. Remembered: a decode worker that has not connected yet
        cannot be sent anything, so it is told again when it first speaks (STREAM or EOS)."""
        source.stopping = True
        if source.worker is not None and not source.worker.finished:
            self._send(source.worker, {"type": msg.STOP})

    def _all_done(self) -> bool:
        if self.plan.http is not None and self.plan.http.keep_running and not self._stop_requested:
            return False
        if not self._sources:
            return True
        for source in self._sources.values():
            if not source.finished:
                return False
            if source.closed != set(self._output_names):
                return False
        return True

    def _shutdown(self) -> None:
        sock = self._sock
        if sock is not None:
            for worker in list(self._workers.values()):
                if worker.process.is_alive():
                    self._send(worker, {"type": msg.STOP})
        for worker in list(self._remote.values()):  # not our children: told, not waited for
            self._send(worker, {"type": msg.STOP})
        deadline = time.monotonic() + 5.0
        for worker in list(self._workers.values()):
            worker.process.join(max(0.0, deadline - time.monotonic()))
        for worker in list(self._workers.values()):
            if worker.process.is_alive():
                log.warning("%s did not stop; killing it", worker.spec.title)
                worker.process.kill()
                worker.process.join(2.0)
        for source in self._sources.values():
            if source.pool is not None:
                source.pool.close()
                source.pool = None
        if sock is not None:
            sock.close(linger=0)
        if self._ctx is not None:
            self._ctx.term()
        self._close_remote()
        if self._owns_ipc_dir:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)

    def _summarise(self) -> None:
        report = self._report
        for source_id, source in self._sources.items():
            self._fold_into_report(source_id, source)
        if report.exit_code == 0:
            if report.source_errors:
                report.exit_code = 1
                first, *others = report.source_errors
                report.error = report.source_errors[first]
                if others:
                    report.error += f" (sources {', '.join(others)} failed too: see the log)"
            elif any(report.failed.values()):
                report.exit_code = 1
                total = sum(report.failed.values())
                report.error = f"{total} frame(s) could not be processed and were passed on unprocessed"


def _remote_only() -> Any:
    raise RuntimeError("a remote worker is started by the `worker` command on its own host")


def _peer(route: bytes) -> str:
    return route[:64].decode("utf-8", "replace")


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _declare_metrics(metrics: Metrics) -> Metrics:
    for name, kind, text in (
        ("framewire_frames_total", "counter", "Frames that finished a stage, per source and stage."),
        ("framewire_fps", "gauge", "Frames per second over the last second, per source and stage."),
        ("framewire_stage_latency_seconds", "histogram", "Time a frame spends in a stage's process."),
        ("framewire_end_to_end_latency_seconds", "histogram", "From the start of decode to the outputs."),
        ("framewire_latency_over_budget_total", "counter", "Frames output later than their latency_budget_ms."),
        ("framewire_queue_depth", "gauge", "Frames waiting in the hub for a worker of the stage."),
        ("framewire_frames_in_flight", "gauge", "Frames held by the workers of a stage."),
        ("framewire_pool_slots", "gauge", "Frame-pool slots of a source."),
        ("framewire_pool_slots_used", "gauge", "Frame-pool slots of a source holding a frame."),
        ("framewire_dropped_frames_total", "counter", "Frames dropped, per source and reason."),
        ("framewire_failed_frames_total", "counter", "Frames a stage failed on, passed on unprocessed."),
        ("framewire_reconnects_total", "counter", "Times a live source reconnected."),
        ("framewire_source_offline_seconds_total", "counter", "Seconds a live source spent reconnecting."),
        ("framewire_source_online", "gauge", "1 while a live source is connected and read."),
        ("framewire_corrupt_frames_total", "counter", "Frames the decoder reported as corrupt, per source."),
        ("framewire_rejected_messages_total", "counter", "Messages a ZeroMQ source dropped, per reason."),
        ("framewire_worker_restarts_total", "counter", "Workers restarted after they died, per stage."),
        ("framewire_worker_stalls_total", "counter", "Workers killed as hung (a frame held past stages.stall_timeout_s)."),
        ("framewire_remote_workers_lost_total", "counter", "Remote workers that left, failed or went silent."),
        ("framewire_workers", "gauge", "Workers up, per stage."),
        ("framewire_source_up", "gauge", "1 while a source is being read."),
        ("framewire_bad_messages_total", "counter", "Messages dropped because they broke the wire format."),
        ("framewire_provider_info", "gauge", "The execution provider an infer worker uses."),
    ):
        metrics.declare(name, kind, text)
    return metrics


def _reason(error: str) -> str:
    """A short, bounded label for a wire error (no values: label sets must stay small)."""
    for word in ("msgpack", "version", "type", "tensor", "buffers", "header", "empty"):
        if word in error:
            return word
    return "other"

