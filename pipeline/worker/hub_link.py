"""A worker's side of its link to the hub: who it is, its socket, and how it knows the hub is there.

Every worker process (stage, output, decode) is started from a `WorkerSpec`, connects one DEALER
socket to the hub (`HubConnection`) and watches that the supervisor still lives (`SupervisorWatch`).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from framewire.pipeline import logs
from framewire.pipeline.worker import heap
from framewire.pipeline.plan import SourceOptions, SourcePlan
from framewire.pipeline.wire import messages as msg
from framewire.pipeline.wire.shm import sweep_orphans

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
    init: Callable[[], None] | None = None
    """Run first thing in the worker (the plan's `worker_init`: e.g. OpenCV's thread pool off)."""
    skips_stale: bool = False
    """Its stage skips frames past their deadline (`StageSpec.skips_stale`)."""
    decodes_sources: bool = False
    """It reads the live sources the hub shares out to it itself (the live layout: worker.live_loop)."""
    live_sources: tuple[SourcePlan, ...] = ()
    """With `decodes_sources`: the config's live sources, one of which a SHARE names by id."""
    make_source: Callable[[Mapping[str, Any]], SourcePlan] | None = None
    """With `decodes_sources`: builds a source added at run time from the config item a SHARE carries."""

    @property
    def identity(self) -> bytes:
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
    # decides how to stop.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    logs.configure(spec.log_level, spec.log_format, f"{spec.stage}[{spec.index}]")
    heap.keep_freed_memory()  # no page faults for each frame's temporaries
    if spec.init is not None:
        spec.init()


class HubConnection:
    """The worker's DEALER to the hub: send a message, receive one (checked), close."""

    def __init__(self, ctx: zmq.Context, sock: zmq.Socket) -> None:
        self.ctx = ctx
        self.sock = sock
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)

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
        sock.connect(spec.endpoint)
        return cls(ctx, sock)

    def send(self, header: dict[str, Any], tensors: dict[str, np.ndarray] | None = None) -> None:
        msg.send(self.sock, msg.encode(header, tensors))

    def poll(self, timeout_ms: int) -> bool:
        return bool(self._poller.poll(timeout_ms))  # a kept Poller: `Socket.poll` makes one a call

    def receive(self) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
        """The next message (call after `poll`); None when it broke the wire format (logged)."""
        parts = msg.receive(self.sock)
        try:
            return msg.decode(parts)
        except msg.WireError as exc:
            log.warning("dropped a bad message from the hub: %s", exc)
            return None

    def close(self, linger_ms: int = 2000) -> None:
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

    def __init__(self, supervisor_pid: int | None = None) -> None:
        self.pid = supervisor_pid or os.getppid()
        self.sweep = True
        """The gone supervisor's shared memory is still to be removed (once)."""
        self._alive_until = 0.0

    def gone(self) -> bool:
        # The decode loop asks once a frame; reading /proc each time was a third of its own Python
        # time (bench budget's profile, docs/results/history.md). A supervisor seen alive is taken as
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
                log.warning(
                    "supervisor %d is gone: removed its %d shared-memory segment(s)", self.pid, len(removed)
                )
        return True
