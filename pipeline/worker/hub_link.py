"""A worker's side of its link to the hub: who it is, its socket, and how it knows the hub is there.

Every worker process (stage, output, decode; local or on another host) is started from a
`WorkerSpec`, connects one DEALER socket to the hub (`HubConnection`) and watches that the
supervisor still lives (`SupervisorWatch`). A worker on another host has more to do (`RemoteWatch`):
it pings the hub while idle, registers again when the hub does not know it, says so when the hub
refuses its CurveZMQ key, and leaves cleanly on SIGTERM.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from framewire.pipeline import logs

from framewire.pipeline.wire import remote
from framewire.pipeline.plan import SourceOptions
from framewire.pipeline.wire import messages as msg
from framewire.pipeline.wire.framepool import sweep_orphans

log = logging.getLogger(__name__)


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
    log_format: str = "text"
    """text or json (pipeline.logs)."""
    source_id: str | None = None
    source_options: SourceOptions = field(default_factory=SourceOptions)
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


def setup_process(spec: WorkerSpec) -> None:
    """Process title, signals and logging of a freshly started worker."""
    try:
        import setproctitle

        setproctitle.setproctitle(spec.title)
    except ImportError:  # optional: ps shows python instead
        pass
    # Ctrl-C, systemd and `kill -TERM -PGID` signal the whole process group; only the supervisor
    # decides how to stop (a remote worker's RemoteWatch takes SIGTERM back: it leaves with BYE).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    logs.configure(spec.log_level, spec.log_format, f"{spec.stage}[{spec.index}]")


class HubConnection:
    """The worker's DEALER to the hub: send a message, receive one (checked), close."""

    def __init__(self, ctx: zmq.Context, sock: zmq.Socket, monitor: zmq.Socket | None = None) -> None:
        self.ctx = ctx
        self.sock = sock
        self.monitor = monitor
        """A remote worker's monitor of failed CurveZMQ handshakes."""
        self.on_blocked: Callable[[], bool] | None = None
        """Asked when a send to the hub times out (only a remote worker's socket has a timeout): True
        to try again, False to drop the message. None: dropped."""

    @classmethod
    def open(cls, spec: WorkerSpec) -> HubConnection:
        """The DEALER of the worker `spec` describes, connected to the hub."""
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, spec.identity)
        sock.setsockopt(zmq.LINGER, 2000)
        # Credits bound what is in flight; the marks only matter when the hub is gone, and then a
        # worker must not queue without end.
        sock.setsockopt(zmq.SNDHWM, 10000)
        sock.setsockopt(zmq.RCVHWM, 10000)
        if spec.remote is None:
            sock.connect(spec.endpoint)
            return cls(ctx, sock)
        link = remote.RemoteLink(spec.identity, spec.remote.server_key, spec.remote.client_key)
        return cls(ctx, sock, remote.connect_worker(ctx, sock, spec.endpoint, link))

    def send(self, header: dict[str, Any], tensors: dict[str, np.ndarray] | None = None) -> None:
        frames = msg.encode(header, tensors)
        while True:
            try:
                msg.send(self.sock, frames)
                return
            except zmq.Again:  # no connection to send on (a remote worker's send timed out)
                if self.on_blocked is None or not self.on_blocked():
                    return

    def poll(self, timeout_ms: int) -> bool:
        return bool(self.sock.poll(timeout_ms))

    def receive(self) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
        """The next message (call after `poll`); None when it broke the wire format (logged)."""
        parts = self.sock.recv_multipart(copy=False)
        try:
            return msg.decode(parts)
        except msg.WireError as exc:
            log.warning("dropped a bad message from the hub: %s", exc)
            return None

    def close(self, linger_ms: int = 2000) -> None:
        if self.monitor is not None:
            self.sock.disable_monitor()
            self.monitor.close(linger=0)
            self.monitor = None
        self.sock.close(linger=linger_ms)
        self.ctx.term()


class SupervisorWatch:
    """Notices that the supervisor is gone, so an orphaned worker exits instead of waiting forever.

    It watches the supervisor's pid, not the parent's: a worker started by a fork server is that
    server's child, and the server may outlive a supervisor killed without cleanup. The worker that
    notices first also removes the job's frame pools and audio rings from /dev/shm (`sweep`), which
    a killed supervisor could not: tens of MB each, otherwise held until the next daemon starts.
    """

    CHECK_S = 0.05
    """How long a supervisor seen alive is not looked at again."""

    def __init__(self, supervisor_pid: int | None = None, *, sweep: bool = True) -> None:
        self.pid = supervisor_pid or os.getppid()
        self.sweep = sweep
        """Remove the gone supervisor's shared memory (a worker on another host has none of it)."""
        self.stopping = False
        """Set by a remote worker's SIGTERM: it leaves at the next message."""
        self._alive_until = 0.0

    def gone(self) -> bool:
        # The decode loop asks once a frame; reading /proc each time was a third of its own Python
        # time (bench budget's profile, docs/benchmarks.md). A supervisor seen alive is taken as
        # alive for CHECK_S more: an orphan still leaves, at most that much later.
        now = time.monotonic()
        if now < self._alive_until:
            return False
        # A killed supervisor stays a zombie until its own parent reaps it: that counts as gone.
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            state = b"X"
        if state not in (b"Z", b"X"):
            self._alive_until = now + self.CHECK_S
            return False
        if self.sweep:
            self.sweep = False
            removed = sweep_orphans(owner_pid=self.pid)
            if removed:
                log.warning("supervisor %d is gone: removed its %d shared-memory segment(s)", self.pid, len(removed))
        return True

    def hear(self, header: dict[str, Any]) -> None:
        """A message came from the hub."""
        return None


class RemoteWatch(SupervisorWatch):
    """A remote worker's view of the hub: pings it while idle, registers again (READY) when the hub
    does not know it (restarted, or it declared this worker lost), and leaves on SIGTERM."""

    def __init__(self, conn: HubConnection, ready: dict[str, Any], supervisor_pid: int) -> None:
        super().__init__(supervisor_pid, sweep=False)
        assert conn.monitor is not None
        self.conn = conn
        self.monitor = conn.monitor
        self.ready = ready
        self.pinged = time.monotonic()
        self.heard = time.monotonic()
        self.silent_logged = False
        self.handshake_logged = False
        conn.on_blocked = self.blocked
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def gone(self) -> bool:
        self._check_handshake()
        now = time.monotonic()
        if now - self.pinged >= remote.PING_INTERVAL_S:
            self.pinged = now
            self.conn.send({"type": msg.PING})
        self._say_if_silent(now)
        return self.stopping or super().gone()

    def blocked(self) -> bool:
        """A send found no connection to the hub: after a refused CurveZMQ handshake ZeroMQ keeps
        none (exit 1, said once), otherwise it is reconnecting. Retry unless stopping."""
        self._check_handshake()
        if self.stopping or super().gone():
            return False
        self._say_if_silent(time.monotonic())
        return True

    def _say_if_silent(self, now: float) -> None:
        if now - self.heard > remote.HUB_SILENT_S and not self.silent_logged:
            self.silent_logged = True
            log.warning("the hub has not answered for %.0f s; waiting for it (reconnecting)", now - self.heard)

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

    def hear(self, header: dict[str, Any]) -> None:
        self.heard = time.monotonic()
        if self.silent_logged:
            self.silent_logged = False
            log.warning("the hub answers again")
        if header["type"] == msg.PONG and header.get("known") is False:
            log.warning("the hub does not know this worker (it restarted?): registering again")
            self.conn.send(self.ready)
