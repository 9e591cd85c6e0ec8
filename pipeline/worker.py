"""The loop every stage worker process runs, and the decode (source) worker.

A worker connects a DEALER socket to the supervisor's hub, says READY with the number of frames it
may hold (its credits), and then handles what the hub sends: WORK (one frame: exactly one RESULT or
FAILED goes back, which is also the credit coming back), STREAM (a source's info, before its first
frame), EOS (a source ended: flush and answer CLOSED) and STOP. Everything that talks to the
hardware (sessions, encoders, sockets) is created here, inside the spawned process.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from pipeline import messages as msg
from pipeline import remote
from pipeline.errors import FramewireError, one_line
from pipeline.frame import (
    Frame,
    FrameSource,
    LiveFrameSource,
    PendingPixels,
    SourceInterrupted,
    Stage,
    StageContext,
)
from pipeline.framepool import FramePool, PoolCache, PoolLayout

log = logging.getLogger(__name__)

POLL_MS = 200


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a spawned worker needs; picklable (the factory is a module-level callable)."""

    stage: str
    index: int
    generation: int
    endpoint: str
    credits: int
    factory: Callable[[], Any]
    log_level: int = logging.WARNING
    source_id: str | None = None
    source_options: dict[str, Any] = field(default_factory=dict)
    label: str | None = None
    supervisor_pid: int = field(default_factory=os.getpid)
    remote: remote.RemoteLink | None = None
    """Set for a worker on another host (the `worker` command): it connects over tcp://, takes its
    frames inline instead of from the pool, and pings the hub (pipeline.remote)."""

    @property
    def identity(self) -> bytes:
        if self.remote is not None:
            return self.remote.identity or remote.worker_identity(self.stage, self.index)
        return f"{self.stage}.{self.index}.{self.generation}".encode()

    @property
    def title(self) -> str:
        return f"framewire: {self.label or f'{self.stage}[{self.index}]'}"


def _setup_process(spec: WorkerSpec) -> None:
    try:
        import setproctitle

        setproctitle.setproctitle(spec.title)
    except ImportError:  # optional: ps shows python instead
        pass
    # Ctrl-C reaches the whole process group; only the supervisor decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    logging.basicConfig(
        level=spec.log_level, format=f"%(asctime)s {spec.stage}[{spec.index}] %(levelname)s %(message)s"
    )


def _connect(spec: WorkerSpec) -> tuple[zmq.Context, zmq.Socket, zmq.Socket | None]:
    """The DEALER to the hub, connected; for a remote worker also a monitor of its handshakes."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, spec.identity)
    sock.setsockopt(zmq.LINGER, 2000)
    # Credits bound what is in flight; the marks only matter when the hub is gone, and then a
    # worker must not queue without end.
    sock.setsockopt(zmq.SNDHWM, 10000)
    sock.setsockopt(zmq.RCVHWM, 10000)
    if spec.remote is not None:
        link = remote.RemoteLink(spec.identity, spec.remote.server_key, spec.remote.client_key)
        return ctx, sock, remote.connect_worker(ctx, sock, spec.endpoint, link)
    sock.connect(spec.endpoint)
    return ctx, sock, None


_on_blocked: Callable[[], bool] | None = None
"""A remote worker's hub link (`_HubLink.blocked`): called when a send to the hub times out; True
to try again, False to drop the message. None (local workers, start-up): dropped."""


def _send(sock: zmq.Socket, header: dict[str, Any], tensors: dict[str, np.ndarray] | None = None) -> None:
    frames = msg.encode(header, tensors)
    while True:
        try:
            msg.send(sock, frames)
            return
        except zmq.Again:  # only a remote worker's socket has a send timeout: no connection to send on
            if _on_blocked is None or not _on_blocked():
                return


class _ParentWatch:
    """Notices that the supervisor is gone, so an orphaned worker exits instead of waiting forever.

    It watches the supervisor's pid, not the parent's: a worker started by a fork server is that
    server's child, and the server may outlive a supervisor killed without cleanup.
    """

    def __init__(self, supervisor_pid: int | None = None) -> None:
        self.pid = supervisor_pid or os.getppid()

    stopping = False
    """Set by a remote worker's SIGTERM: it leaves at the next message."""

    def gone(self) -> bool:
        # A killed supervisor stays a zombie until its own parent reaps it: that counts as gone.
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return True
        return state in (b"Z", b"X")


def worker_main(spec: WorkerSpec) -> None:
    """Entry point of a stage worker process (preprocess, infer, postprocess, composite, output)."""
    _setup_process(spec)
    ctx, sock, monitor = _connect(spec)
    stage_log = logging.getLogger(f"framewire.{spec.stage}")
    pools = PoolCache()
    context = StageContext(spec.stage, spec.index, stage_log)
    try:
        stage: Stage = spec.factory()
        stage.start(context)
    except BaseException as exc:  # start-up failures stop the worker loudly
        code = getattr(exc, "exit_code", 1)
        log.debug("start-up failed", exc_info=True)
        if spec.remote is not None:  # nobody else sees this host's log
            log.error("%s worker cannot start: %s", spec.stage, one_line(exc))
        _send(sock, {"type": msg.FATAL, "error": one_line(exc), "exit": code})
        if monitor is not None:
            monitor.close(linger=0)
        sock.close(linger=2000)
        ctx.term()
        os._exit(3)
    ready: dict[str, Any] = {"type": msg.READY, "stage": spec.stage, "index": spec.index, "credits": spec.credits}
    describe = getattr(stage, "describe", None)
    if callable(describe):  # e.g. the execution provider an infer worker ended up with
        ready.update(describe())
    # The slot regions the stage touches: the hub sends a remote worker these with each frame.
    ready["reads"], ready["writes"] = list(_regions(stage, "reads")), list(_regions(stage, "writes"))
    watch: _ParentWatch
    if monitor is not None:
        global _on_blocked
        ready["inline"] = True
        watch = _HubLink(sock, monitor, ready, spec.supervisor_pid)
        _on_blocked = watch.blocked
    else:
        watch = _ParentWatch(spec.supervisor_pid)
    _send(sock, ready)
    try:
        _serve(sock, stage, pools, context.streams, watch, spec)
    finally:
        try:
            stage.stop()
        finally:
            if isinstance(watch, _HubLink):
                if watch.stopping:
                    _send(sock, {"type": msg.BYE})
                watch.close()
            pools.close()
            sock.close(linger=2000)
            ctx.term()


def _regions(stage: Any, which: str) -> tuple[str, ...]:
    return tuple(str(name) for name in getattr(stage, which, ()) or ())


class _HubLink(_ParentWatch):
    """A remote worker's view of the hub: pings it while idle, registers again (READY) when the hub
    does not know it (restarted, or it declared this worker lost), and leaves on SIGTERM."""

    def __init__(self, sock: zmq.Socket, monitor: zmq.Socket, ready: dict[str, Any], parent_pid: int) -> None:
        super().__init__(parent_pid)
        self.sock = sock
        self.ready = ready
        self.pinged = time.monotonic()
        self.heard = time.monotonic()
        self.silent_logged = False
        self.handshake_logged = False
        self.monitor = monitor
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def gone(self) -> bool:
        self._check_handshake()
        now = time.monotonic()
        if now - self.pinged >= remote.PING_INTERVAL_S:
            self.pinged = now
            _send(self.sock, {"type": msg.PING})
        if now - self.heard > remote.HUB_SILENT_S and not self.silent_logged:
            self.silent_logged = True
            log.warning("the hub has not answered for %.0f s; waiting for it (reconnecting)", now - self.heard)
        return self.stopping or super().gone()

    def blocked(self) -> bool:
        """A send found no connection to the hub: after a refused CurveZMQ handshake ZeroMQ keeps
        none (exit 1, said once), otherwise it is reconnecting. Retry unless stopping."""
        self._check_handshake()
        if self.stopping or super().gone():
            return False
        now = time.monotonic()
        if now - self.heard > remote.HUB_SILENT_S and not self.silent_logged:
            self.silent_logged = True
            log.warning("the hub has not answered for %.0f s; waiting for it (reconnecting)", now - self.heard)
        return True

    def _check_handshake(self) -> None:
        from zmq.utils.monitor import recv_monitor_message

        while self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)
            if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                log.error(
                    "the hub refused this worker's key (its public certificate must be in the hub's "
                    "transport.curve_clients folder)"
                )
                raise SystemExit(1)
            if not self.handshake_logged:
                self.handshake_logged = True
                log.warning(
                    "the CurveZMQ handshake with the hub failed; retrying (is --server-key the hub's "
                    "public certificate, and does the hub listen with CurveZMQ?)"
                )

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(linger=0)

    def hear(self, header: dict[str, Any]) -> None:
        self.heard = time.monotonic()
        if self.silent_logged:
            self.silent_logged = False
            log.warning("the hub answers again")
        if header["type"] == msg.PONG and header.get("known") is False:
            log.warning("the hub does not know this worker (it restarted?): registering again")
            _send(self.sock, self.ready)


def _serve(
    sock: zmq.Socket,
    stage: Stage,
    pools: PoolCache,
    streams: dict[str, dict[str, Any]],
    watch: _ParentWatch,
    spec: WorkerSpec,
) -> None:
    batch_limit = int(getattr(stage, "max_batch", 1) or 1) if hasattr(stage, "process_batch") else 1
    delay_s = float(getattr(stage, "max_delay_ms", 0.0) or 0.0) / 1000.0
    backlog: deque[tuple[dict[str, Any], dict[str, np.ndarray]]] = deque()
    link = watch if isinstance(watch, _HubLink) else None
    while True:
        if watch.stopping:
            return
        if backlog:
            header, tensors = backlog.popleft()
        else:
            if not sock.poll(POLL_MS):
                if watch.gone():
                    log.warning("supervisor is gone; exiting")
                    return
                continue
            received = _receive(sock)
            if received is None:
                continue
            header, tensors = received
        kind = header["type"]
        if link is not None:
            link.hear(header)
        if kind == msg.WORK and batch_limit > 1:
            batch = [(header, tensors)]
            _collect(sock, batch, backlog, batch_limit, delay_s)
            _work_batch(sock, stage, pools, batch, spec)
        elif kind == msg.WORK:
            _work(sock, stage, pools, header, tensors, spec)
        elif kind == msg.STREAM:
            streams[str(header["source"])] = dict(header["info"])
        elif kind == msg.POOL and header.get("drop"):  # a retired source's pool: unmap it
            pools.drop(str(header["drop"]))
            streams.pop(str(header.get("source")), None)
        elif kind == msg.EOS:
            source = str(header["source"])
            for _ in stage.flush(source):
                pass
            _send(sock, {"type": msg.CLOSED, "source": source})
        elif kind == msg.STOP:
            if header.get("error"):  # the hub refused a remote worker
                log.error("the hub refused this worker: %s", header["error"])
                raise SystemExit(2)
            return


def _receive(sock: zmq.Socket) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    parts = sock.recv_multipart(copy=False)
    try:
        return msg.decode(parts)
    except msg.WireError as exc:
        log.warning("dropped a bad message from the hub: %s", exc)
        return None


def _collect(
    sock: zmq.Socket,
    batch: list[tuple[dict[str, Any], dict[str, np.ndarray]]],
    backlog: deque[tuple[dict[str, Any], dict[str, np.ndarray]]],
    limit: int,
    delay_s: float,
) -> None:
    """Dynamic batching: add waiting WORK to `batch` until it is full or `delay_s` has passed since
    its first frame. Other messages keep their order in `backlog`, after the batch."""
    while backlog and len(batch) < limit and backlog[0][0]["type"] == msg.WORK:
        batch.append(backlog.popleft())
    if backlog:
        return
    deadline = time.monotonic() + delay_s
    while len(batch) < limit:
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        if not sock.poll(remaining_ms):
            return
        received = _receive(sock)
        if received is None:
            continue
        if received[0]["type"] != msg.WORK:
            backlog.append(received)  # e.g. EOS: it must not overtake the frames before it
            return
        batch.append(received)


def _work(
    sock: zmq.Socket,
    stage: Stage,
    pools: PoolCache,
    header: dict[str, Any],
    tensors: dict[str, np.ndarray],
    spec: WorkerSpec,
) -> None:
    ident = {"source": header.get("source"), "seq": header.get("seq"), "stage": spec.stage}
    if _stale(header, spec):
        _reply_stale(sock, header, spec)
        return
    try:
        frame = _frame(header, tensors, pools, stage, spec)
        started = time.time()
        outs = list(stage.process(frame))
        if len(outs) > 1:
            raise RuntimeError(f"stage {spec.stage} returned {len(outs)} frames for one")
        out = outs[0] if outs else frame
        out.timings.setdefault(spec.stage, [started, time.time()])  # a fused stage stamps its own
        _reply(sock, out, spec, with_tensors=bool(outs), writes=_regions(stage, "writes"))
    except Exception as exc:
        _failed(sock, ident, exc)


def _work_batch(
    sock: zmq.Socket,
    stage: Any,
    pools: PoolCache,
    batch: list[tuple[dict[str, Any], dict[str, np.ndarray]]],
    spec: WorkerSpec,
) -> None:
    """Run `stage.process_batch` on several frames at once; one RESULT (or FAILED) per frame."""
    frames: list[Frame] = []
    for header, tensors in batch:
        ident = {"source": header.get("source"), "seq": header.get("seq"), "stage": spec.stage}
        if _stale(header, spec):
            _reply_stale(sock, header, spec)
            continue
        try:
            frames.append(_frame(header, tensors, pools, stage, spec))
        except Exception as exc:
            _failed(sock, ident, exc)
    if not frames:
        return
    started = time.time()
    try:
        outs = list(stage.process_batch(frames))
        if len(outs) != len(frames):
            raise RuntimeError(f"stage {spec.stage} returned {len(outs)} frames for {len(frames)}")
    except Exception as exc:
        for frame in frames:
            _failed(sock, {"source": frame.source_id, "seq": frame.seq, "stage": spec.stage}, exc)
        return
    finished = time.time()
    writes = _regions(stage, "writes")
    for out in outs:
        out.timings.setdefault(spec.stage, [started, finished])
        out.meta["batch"] = len(frames)
        _reply(sock, out, spec, with_tensors=True, writes=writes)


def _frame(
    header: dict[str, Any], tensors: dict[str, np.ndarray], pools: PoolCache, stage: Any, spec: WorkerSpec
) -> Frame:
    """The frame a WORK describes: on the pool here, or, on another host, on the regions that came
    inline (checked against the pool's layout) and fresh buffers for those the stage writes."""
    if spec.remote is None:
        return Frame.from_wire(header, tensors, pools)
    plain, regions = remote.split_regions(tensors)
    frame = Frame.from_wire(header, plain, None)
    # A fused stage's members also pass regions between them (`scratch`): buffers here, never sent back.
    writable = _regions(stage, "writes") + _regions(stage, "scratch")
    frame.inline = remote.inline_regions(header, regions, _regions(stage, "reads"), writable)
    return frame


def _reply(
    sock: zmq.Socket, frame: Frame, spec: WorkerSpec, *, with_tensors: bool, writes: tuple[str, ...] = ()
) -> None:
    reply = frame.to_header()
    reply.update(type=msg.RESULT, stage=spec.stage)
    tensors = frame.tensors if with_tensors else None
    if frame.inline is not None:  # a remote worker: the regions it wrote go back to the hub's pool
        tensors = dict(tensors or {})
        for name in writes:
            if name in frame.inline:
                tensors[remote.REGION_PREFIX + name] = frame.inline[name]
    _send(sock, reply, tensors)


STALE_BEFORE = frozenset({"preprocess", "infer"})
"""The stages that skip a frame past its deadline: up to inference, where the time would be spent."""


def _stale(header: dict[str, Any], spec: WorkerSpec) -> bool:
    deadline = header.get("deadline")
    return spec.stage in STALE_BEFORE and isinstance(deadline, int | float) and time.time() > deadline


def _reply_stale(sock: zmq.Socket, header: dict[str, Any], spec: WorkerSpec) -> None:
    """The frame is too old to be worth inferring: say so, without tensors; the hub drops it."""
    log.debug("%s: source %s seq %s is stale; skipped", spec.stage, header.get("source"), header.get("seq"))
    _send(sock, {"type": msg.RESULT, "stage": spec.stage, "source": header.get("source"),
                 "seq": header.get("seq"), "stale": True})


def _failed(sock: zmq.Socket, ident: dict[str, Any], exc: BaseException) -> None:
    log.error("%s failed on source %s seq %s: %s", ident["stage"], ident["source"], ident["seq"], one_line(exc))
    log.debug("%s", traceback.format_exc())
    _send(sock, {"type": msg.FAILED, **ident, "error": one_line(exc)})


# --- the decode worker ---------------------------------------------------------------------------


def source_main(spec: WorkerSpec) -> None:
    """Entry point of a decode process: one per source, filling the slots the hub grants."""
    _setup_process(spec)
    ctx, sock, _ = _connect(spec)
    source_id = spec.source_id or "?"
    opts = spec.source_options
    watch = _ParentWatch(spec.supervisor_pid)
    reader: FrameSource | None = None
    sent = 0
    error: str | None = None
    grants = _Grants()
    try:
        reader = spec.factory()
        stats = _SourceStats(source_id, reader)
        if isinstance(reader, LiveFrameSource):  # it waits on the network: it must hear a STOP
            reader.set_interrupt(functools.partial(_interrupted, sock, grants, watch, stats))
        info = reader.open()
        _send(sock, {"type": msg.STREAM, "source": source_id, "info": info})
        sent, error = _pump(sock, reader, source_id, opts, watch, grants, stats)
    except SourceInterrupted:
        log.info("source %s: stopped before it connected", source_id)
    except BaseException as exc:
        error = one_line(exc)
        log.debug("source %s failed", source_id, exc_info=True)
    finally:
        if reader is not None:
            try:
                reader.close()
            except Exception:
                log.debug("closing source %s failed", source_id, exc_info=True)
    eos: dict[str, Any] = {"type": msg.EOS, "source": source_id, "frames": sent}
    if error:
        eos["error"] = error
    _send(sock, eos)
    sock.close(linger=5000)
    ctx.term()


class _Grants:
    """Slots the hub has granted this source, and the pool they live in."""

    def __init__(self) -> None:
        self.free: deque[int] = deque()
        self.pool: FramePool | None = None
        self.pool_wire: dict[str, Any] | None = None
        self.stop = False

    def take(self, header: dict[str, Any]) -> None:
        kind = header["type"]
        if kind == msg.POOL:
            self.pool_wire = dict(header["pool"])
            self.pool = FramePool.attach(PoolLayout.from_wire(self.pool_wire))
        elif kind == msg.GRANT:
            self.free.extend(int(s) for s in header["slots"])
        elif kind == msg.STOP:
            self.stop = True

    def drain(self, sock: zmq.Socket, timeout_ms: int) -> None:
        """Take every message waiting, waiting up to `timeout_ms` for the first."""
        wait = timeout_ms
        while sock.poll(wait):
            try:
                header, _ = msg.decode(sock.recv_multipart())
            except msg.WireError as exc:
                log.warning("dropped a bad message from the hub: %s", exc)
                continue
            self.take(header)
            wait = 0


class _SourceStats:
    """A live source's running totals (`stats()`), sent to the hub as STATS messages that carry
    what changed: counts as increments, `online` as it is now; at most every STATS_INTERVAL_S."""

    def __init__(self, source_id: str, reader: Any) -> None:
        self.source_id = source_id
        self.read: Callable[[], dict[str, Any]] | None = getattr(reader, "stats", None)
        self.sent: dict[str, Any] = {}
        self.at = 0.0

    def send(self, sock: zmq.Socket, *, force: bool = False) -> None:
        if self.read is None:
            return
        now = time.monotonic()
        if not force and now - self.at < STATS_INTERVAL_S:
            return
        self.at = now
        current = {k: dict(v) if isinstance(v, dict) else v for k, v in self.read().items()}
        changes = _changes(current, self.sent)
        if changes:
            self.sent = current
            _send(sock, {"type": msg.STATS, "source": self.source_id, **changes})


STATS_INTERVAL_S = 0.25


def _changes(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in now.items():
        old = before.get(key)
        if isinstance(value, bool):
            if value != old:
                out[key] = value
        elif isinstance(value, int | float):
            step = value - (old or 0)
            if step:
                out[key] = step
        elif isinstance(value, dict):
            old = old or {}
            steps = {k: v - old.get(k, 0) for k, v in value.items() if v != old.get(k, 0)}
            if steps:
                out[key] = steps
    return out


def _interrupted(sock: zmq.Socket, grants: _Grants, watch: _ParentWatch, stats: _SourceStats) -> bool:
    """What a live source asks while it waits: has the hub said STOP (or gone)? Grants that arrive
    meanwhile are kept, and the source's counters go out (it may be offline for a while)."""
    grants.drain(sock, 0)
    stats.send(sock)
    return grants.stop or watch.gone()


def _pump(
    sock: zmq.Socket,
    reader: FrameSource,
    source_id: str,
    opts: dict[str, Any],
    watch: _ParentWatch,
    grants: _Grants | None = None,
    stats: _SourceStats | None = None,
) -> tuple[int, str | None]:
    policy = opts.get("policy", "block")
    realtime = bool(opts.get("realtime", False))
    max_frames = opts.get("max_frames")
    staleness_ms = opts.get("max_staleness_ms") if policy != "block" else None
    grants = grants or _Grants()
    stats = stats or _SourceStats(source_id, reader)
    while grants.pool is None and not grants.stop:
        grants.drain(sock, POLL_MS)
        if watch.gone():
            return 0, "supervisor is gone"
    seq = 0
    dropped = 0
    clock_start: float | None = None
    first_time = 0.0
    pending: tuple[np.ndarray | PendingPixels, int, float, float] | None = None
    frames = iter(reader.frames())
    while not grants.stop:
        if max_frames is not None and seq >= max_frames:
            break
        if watch.gone():
            return seq, "supervisor is gone"
        try:
            image, pts, time_s = next(frames)
        except StopIteration:
            break
        decoded_at = time.time()
        if realtime:
            if clock_start is None:
                clock_start, first_time = time.monotonic(), time_s
            delay = clock_start + (time_s - first_time) - time.monotonic()
            if delay > 0:
                time.sleep(delay)
                # Read ahead of its time, the frame is due now, as a live source would deliver it:
                # its latency starts here, not while it waited for its turn.
                decoded_at = time.time()
        if policy == "block":
            grants.drain(sock, 0)  # a STOP must be heard even while free slots are at hand
            while not grants.free and not grants.stop:
                grants.drain(sock, POLL_MS)
                if watch.gone():
                    return seq, "supervisor is gone"
            if grants.stop:
                break
            pending = (image, pts, time_s, decoded_at)
        else:
            grants.drain(sock, 0)
            if pending is not None and policy == "drop_oldest":
                dropped += 1
                pending = (image, pts, time_s, decoded_at)
            elif pending is not None:  # drop_newest: keep what waits
                dropped += 1
            else:
                pending = (image, pts, time_s, decoded_at)
            if not grants.free:
                continue
        assert pending is not None and grants.pool is not None
        image, pts, time_s, decoded_at = pending
        pending = None
        slot = grants.free.popleft()
        target = grants.pool.view(slot, "image")
        if target.shape != image.shape:
            raise FramewireError(
                f"source {source_id}: frame {seq} is {image.shape[1]}x{image.shape[0]}, "
                f"the stream started at {target.shape[1]}x{target.shape[0]}"
            )
        if isinstance(image, np.ndarray):
            np.copyto(target, image)
        else:
            image.write_into(target)  # converted straight into the slot: written once, not copied
        header = {
            "type": msg.FRAME,
            "source": source_id,
            "seq": seq,
            "pts": int(pts),
            "time": float(time_s),
            "w": int(image.shape[1]),
            "h": int(image.shape[0]),
            "slot": slot,
            "pool": grants.pool_wire,
            "ts": {"decode": [decoded_at, time.time()]},
        }
        if staleness_ms:
            header["deadline"] = decoded_at + float(staleness_ms) / 1000.0
        if dropped:
            header["dropped"] = dropped
            dropped = 0
        _send(sock, header)
        seq += 1
        stats.send(sock)
    if pending is not None:  # read, never sent: it counts as dropped like the others
        dropped += 1
    if dropped:
        _send(sock, {"type": msg.STATS, "source": source_id, "dropped": dropped})
    stats.send(sock, force=True)
    return seq, None
