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
import multiprocessing
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

from pipeline import messages as msg
from pipeline.framepool import FramePool, PoolLayout
from pipeline.worker import WorkerSpec, source_main, worker_main

log = logging.getLogger(__name__)

TICK_MS = 50
RESTART_WINDOW_S = 60.0

Key = tuple[str, int]


@dataclass(frozen=True)
class SourcePlan:
    source_id: str
    factory: Callable[[], Any]
    options: dict[str, Any]
    expected_frames: int | None = None


@dataclass(frozen=True)
class Plan:
    """The job, as processes: built by the layer that knows models (stages.plan), run here."""

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
    preload: tuple[str, ...] = ()
    """Modules every worker imports, imported once in the fork server that starts them."""


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
    inflight: dict[Key, None] = field(default_factory=dict)
    finished: bool = False

    @property
    def identity(self) -> bytes:
        return self.spec.identity


@dataclass
class _FrameState:
    header: dict[str, Any]
    tensors: dict[str, np.ndarray]
    stage_pos: int = 0
    refs: int = 0


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
    reorder: dict[int, Key] = field(default_factory=dict)
    ungranted: list[int] = field(default_factory=list)
    closed: set[str] = field(default_factory=set)
    done_frames: int = 0
    failed: int = 0
    dropped: int = 0
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.eos_frames is not None and self.eos_queued


def worker_context(preload: tuple[str, ...] = ()) -> Any:
    """How workers start: forked from a fork server, or spawned where there is none.

    The fork server is a fresh process, started once, that imports `preload` and nothing else: it
    never holds a ZeroMQ or CUDA context, a session or a thread of ours, so a worker forked from it
    inherits none (the reason workers are not forked from the supervisor), yet starts in
    milliseconds instead of importing numpy, OpenCV, PyAV and ONNX Runtime again, and shares those
    pages with its siblings (docs/benchmarks.md, "Memory" and start-up).
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    if preload:
        context.set_forkserver_preload(list(preload))  # takes effect when the server starts
    return context


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
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._ipc_dir = ""
        self._owns_ipc_dir = False

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
            self._loop()
        except JobFailed as exc:
            self._report.exit_code = exc.exit_code
            self._report.error = str(exc)
        finally:
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

    def _spawn_all(self) -> None:
        for name, count, factory in self.plan.middle:
            self._by_stage[name] = []
            for index in range(count):
                self._spawn(name, index, 0, factory, worker_main, credits=self.plan.stage_credits.get(name))
        for index, (name, factory) in enumerate(self.plan.outputs):
            self._by_stage[name] = []
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
        next_check = 0.0
        while not self._all_done():
            self._check_stop()
            events = dict(poller.poll(TICK_MS))
            if self._sock in events:
                self._receive_all()
            # Once a tick, not once a message: asking every process whether it lives costs a
            # system call each, which at hundreds of frames a second was a fifth of the hub's time.
            now = time.monotonic()
            if now >= next_check:
                next_check = now + TICK_MS / 1000.0
                self._check_workers()
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
            log.warning("dropped a bad message from %r: %s", identity, exc)
            return
        if worker is None:
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
        for source in self._sources.values():  # an output learns the streams before their frames
            if source.info is not None and worker.stage in self._output_names:
                self._send(worker, {"type": msg.STREAM, "source": source.plan.source_id, "info": source.info})
        self._grant_when_ready()

    def _on_stream(self, worker: _Worker, header: dict[str, Any], _: dict[str, np.ndarray]) -> None:
        source = self._sources[worker.spec.source_id or ""]
        info = dict(header.get("info") or {})
        source.info = info
        regions = self.plan.slot_layout(source.plan.source_id, info)
        name = f"framewire-{os.getpid()}-{len([s for s in self._sources.values() if s.pool])}-{source.plan.source_id}"
        layout = PoolLayout.plan(name[:200], self.plan.slots_per_source, regions)
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
        if source is not None:
            source.dropped += int(header.get("dropped", 0))

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
        header.pop("type", None)
        header.pop("stage", None)
        state.header = header
        state.tensors = dict(tensors)
        state.stage_pos += 1
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

    def _release_in_order(self, source: _Source) -> None:
        """Hand frames to the outputs in sequence order; then end of stream, once."""
        while source.next_out in source.reorder:
            key = source.reorder.pop(source.next_out)
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
        slot = int(state.header.get("slot", -1))
        if source.worker is not None and not source.worker.finished and slot >= 0:
            self._send(source.worker, {"type": msg.GRANT, "slots": [slot]})
        if self.progress is not None:
            self.progress(sum(s.done_frames for s in self._sources.values()), self._expected_total())

    def _expected_total(self) -> int | None:
        total = 0
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
                if self._send(worker, header, state.tensors):
                    worker.credits -= 1
                    worker.inflight[key] = None
                else:
                    queue.appendleft(key)
                    break

    def _send(self, worker: _Worker, header: dict[str, Any], tensors: Mapping[str, np.ndarray] | None = None) -> bool:
        assert self._sock is not None
        try:
            self._sock.send_multipart([worker.identity, *msg.encode(header, dict(tensors or {}))], copy=False)
            return True
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:  # not connected yet, or gone: its death is handled
                return False
            raise

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

    def _on_death(self, worker: _Worker) -> None:
        how = _exit_text(worker.process.exitcode)
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
        queue = self._queues[worker.stage]
        lost = sorted(worker.inflight, key=lambda k: (k[1], k[0]), reverse=True)
        for key in lost:
            if key in self._frames and self._at_stage(self._frames[key], worker.stage):
                queue.appendleft(key)
        log.warning(
            "%s died (%s); restarting it, %d frame(s) it held go to the next worker",
            worker.spec.title,
            how,
            len(lost),
        )
        self._spawn(
            worker.stage,
            worker.index,
            worker.generation + 1,
            worker.spec.factory,
            worker_main,
            credits=worker.spec.credits,
            label=worker.spec.label,
        )

    # --- stopping ------------------------------------------------------------------------------

    def _check_stop(self) -> None:
        if not self._stop_requested:
            return
        if self._stop_deadline is None:
            self._report.stopped = True
            self._stop_deadline = time.monotonic() + self.plan.shutdown_timeout_s
            log.warning("stopping: no new frames; draining the ones in flight")
            for source in self._sources.values():
                if source.worker is not None and not source.worker.finished:
                    self._send(source.worker, {"type": msg.STOP})
        elif self._stop_requested > 1 or time.monotonic() > self._stop_deadline:
            raise JobFailed("stopped before every frame in flight was done", 1)

    def _all_done(self) -> bool:
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
        if self._owns_ipc_dir:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)

    def _summarise(self) -> None:
        report = self._report
        for source_id, source in self._sources.items():
            report.frames[source_id] = source.done_frames
            report.failed[source_id] = source.failed
            report.dropped[source_id] = source.dropped
            if source.error:
                report.source_errors[source_id] = source.error
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


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
