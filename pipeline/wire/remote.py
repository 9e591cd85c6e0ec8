"""Workers on other hosts: what crosses a tcp:// link to the hub, and how it is checked.

A remote worker cannot map the frame pool (it is shared memory on the hub's host), so its frames
travel inline: its READY says `inline: true` and names the slot regions its stage reads and writes;
each WORK then carries the read regions as tensors named `region:NAME`, and the RESULT carries the
written ones back, which the hub checks against the pool's layout and copies into the slot. A
local worker's messages are unchanged (slot references only).

Everything a remote peer sends is untrusted: READY and RESULT are checked here (stage, credits,
region names, shapes and dtypes, the header fields a stage may change) and a bad message raises
`WireError`, which the hub counts and drops. The hub, an authenticated CurveZMQ server, is trusted
by the worker as much as the local hub is.

Liveness: the worker sends PING when idle (every PING_INTERVAL_S); the hub answers PONG, with
`known: false` when it does not know the worker (it was restarted, or declared the worker lost),
and the worker then sends READY again. The hub declares a remote worker lost when it has heard
nothing from it for `timeout_s` and hands the frames it held to other workers.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq

from framewire.pipeline.wire import curve
from framewire.pipeline.wire import messages as msg
from framewire.pipeline.wire.framepool import FramePool, PoolLayout

log = logging.getLogger(__name__)

REGION_PREFIX = "region:"
PING_INTERVAL_S = 1.0
HUB_SILENT_S = 5.0
"""A worker that has heard nothing from the hub this long says so in its log (once)."""
SEND_TIMEOUT_MS = 500
"""A remote worker's send with no connection to the hub waits this long before it checks why."""
MAX_CREDITS = 64
MAX_REGIONS = 8
MAX_IDENTITY = 200

# Header fields a remote stage may change on a frame; everything else stays the hub's own (the
# slot, the pool, the source, seq and timestamps other stages wrote).
_MAY_CHANGE = ("meta", "result", "error")


@dataclass(frozen=True)
class RemoteLink:
    """How a worker on another host reaches the hub: its identity and CurveZMQ keys."""

    identity: bytes
    server_key: str | None = None
    """The hub's public certificate (`keys` makes it); None: plain text (loopback, or allowed)."""
    client_key: str | None = None
    """This worker's secret certificate; its public half must be in the hub's curve_clients."""


@dataclass(frozen=True)
class RemoteSettings:
    """The hub's tcp:// listener for workers on other hosts (config `transport.listen`, ...)."""

    listen: str
    curve_secret_key: str | None = None
    curve_clients: str | None = None
    timeout_s: float = 10.0
    """A remote worker silent this long (no result, no ping) is lost: its frames go to others."""
    wait_s: float | None = None
    """A remote-only stage with no worker for this long fails the job; None: wait for ever."""
    remote_only: frozenset[str] = frozenset()
    """Stages (and outputs) with no local worker: they run only in `worker` commands."""


def open_listener(settings: RemoteSettings) -> tuple[zmq.Context, zmq.Socket, Any]:
    """The hub's ROUTER for remote workers, bound, with CurveZMQ when a key is set. Its own
    context: the ZAP handler then never sees the local ipc:// socket."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.LINGER, 1000)  # a STOP at the end must still reach the workers
    # Credits bound what a well-behaved peer has in flight; the marks bound a misbehaving one.
    sock.setsockopt(zmq.SNDHWM, 1000)
    sock.setsockopt(zmq.RCVHWM, 1000)
    sock.setsockopt(zmq.MAXMSGSIZE, msg.MAX_TENSOR_BYTES + msg.MAX_HEADER_BYTES)
    _heartbeats(sock)
    auth = None
    try:
        if settings.curve_secret_key:
            auth = curve.serve(
                ctx, sock, settings.curve_secret_key, settings.curve_clients, f"transport.listen {settings.listen}"
            )
        sock.bind(settings.listen)
    except BaseException:
        sock.close(linger=0)
        if auth is not None:
            auth.stop()
        ctx.term()
        raise
    return ctx, sock, auth


def connect_worker(ctx: zmq.Context, sock: zmq.Socket, endpoint: str, link: RemoteLink) -> zmq.Socket:
    """Set a remote worker's DEALER up (identity, heartbeats, reconnects, CurveZMQ) and connect.

    Returns a monitor of its failed handshakes: a refused CurveZMQ key is otherwise silent (and
    ZeroMQ does not retry it), so the worker reads the monitor to say so instead of waiting."""
    sock.setsockopt(zmq.IDENTITY, link.identity)
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
    # A DEALER with no connection blocks a send for ever, and after a refused CurveZMQ handshake
    # ZeroMQ keeps none: a send gives up after this, so the worker can look at the monitor.
    sock.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
    _heartbeats(sock)
    if link.server_key:
        curve.connect_as_client(sock, link.server_key, link.client_key, "worker")
    monitor = sock.get_monitor_socket(
        zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    )
    sock.connect(endpoint)
    return monitor


def _heartbeats(sock: zmq.Socket) -> None:
    # ZMTP heartbeats: a peer that vanished without closing its connection (a pulled cable, a
    # killed host) is disconnected within seconds, so the DEALER reconnects and the ROUTER stops
    # queueing for it. The application's PING/PONG on top says whether the hub knows the worker.
    sock.setsockopt(zmq.HEARTBEAT_IVL, 1000)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 5000)
    sock.setsockopt(zmq.HEARTBEAT_TTL, 6000)


def worker_identity(stage: str, index: int) -> bytes:
    """`stage@host:pid.index`: unique per process, readable in the hub's log."""
    return f"{stage}@{socket.gethostname()}:{os.getpid()}.{index}".encode()[:MAX_IDENTITY]


# --- checks on what a remote worker sends --------------------------------------------------------


@dataclass(frozen=True)
class Joining:
    """A checked READY from a remote worker."""

    stage: str
    credits: int
    reads: frozenset[str]
    writes: frozenset[str]


def check_ready(header: Mapping[str, Any], stages: Iterable[str]) -> Joining:
    stage = header.get("stage")
    known = list(stages)
    if not isinstance(stage, str) or stage not in known:
        raise msg.WireError(f"stage {_short(stage)} is not one of this job's stages ({', '.join(known)})")
    credits = header.get("credits")
    if not isinstance(credits, int) or isinstance(credits, bool) or not 1 <= credits <= MAX_CREDITS:
        raise msg.WireError(f"credits must be an integer in 1..{MAX_CREDITS}, got {_short(credits)}")
    if header.get("inline") is not True:
        raise msg.WireError("a worker on a tcp:// link must take its frames inline (inline: true)")
    return Joining(stage, credits, _names(header.get("reads")), _names(header.get("writes")))


def _names(value: Any) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or len(value) > MAX_REGIONS or not all(isinstance(v, str) for v in value):
        raise msg.WireError(f"regions must be a list of names, got {_short(value)}")
    return frozenset(value)


def region_tensors(pool: FramePool, slot: int, names: Iterable[str]) -> dict[str, np.ndarray]:
    """The slot regions a remote worker reads, as inline tensors (views: no copy here)."""
    return {REGION_PREFIX + name: pool.view(slot, name) for name in names if pool.has(name)}


def split_regions(tensors: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(model tensors, slot regions by name) from a message's tensors."""
    plain: dict[str, np.ndarray] = {}
    regions: dict[str, np.ndarray] = {}
    for name, array in tensors.items():
        if name.startswith(REGION_PREFIX):
            regions[name[len(REGION_PREFIX) :]] = array
        else:
            plain[name] = array
    return plain, regions


def check_regions(regions: Mapping[str, np.ndarray], layout: PoolLayout, allowed: Iterable[str]) -> None:
    """Each region is one the peer may send and has exactly the pool layout's shape and dtype."""
    allowed = set(allowed)
    shapes = {r.name: (r.shape, r.dtype) for r in layout.regions}
    for name, array in regions.items():
        if name not in allowed or name not in shapes:
            raise msg.WireError(f"tensor region {_short(name)} is not one this stage may send")
        shape, dtype = shapes[name]
        if tuple(array.shape) != shape or array.dtype.name != dtype:
            raise msg.WireError(
                f"tensor region {name!r} is {array.dtype.name}{list(array.shape)}, the pool holds {dtype}{list(shape)}"
            )


def accept_result(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    tensors: Mapping[str, np.ndarray],
    layout: PoolLayout,
    writes: Iterable[str],
    stage: str,
    members: Iterable[str] = (),
) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A remote RESULT, checked: (the frame's header, its tensors, the regions to copy into the
    slot). The header is the hub's own with only what a stage may change taken from `new`: its
    `meta`, `result`, `error`, and its own span in `ts`, or, for a fused stage, its members'."""
    plain, regions = split_regions(tensors)
    check_regions(regions, layout, writes)
    header = dict(old)
    for key in _MAY_CHANGE:
        if key not in new:
            continue
        value = new[key]
        if key in ("meta", "result") and not (value is None or isinstance(value, dict)):
            raise msg.WireError(f"header {key} must be a map")
        if key == "error" and not (value is None or isinstance(value, str)):
            raise msg.WireError("header error must be a string")
        header[key] = value
    spans: Mapping[str, Any] = new["ts"] if isinstance(new.get("ts"), dict) else {}
    timings = dict(old.get("ts") or {})
    for name in dict.fromkeys([stage, *members]):
        span = spans.get(name)
        if span is None:
            continue
        if not (
            isinstance(span, list)
            and len(span) == 2
            and all(isinstance(t, int | float) and not isinstance(t, bool) for t in span)
        ):
            raise msg.WireError(f"header ts.{name} must be [start, end]")
        timings[name] = [float(span[0]), float(span[1])]
    header["ts"] = timings
    return header, plain, regions


def inline_regions(
    header: Mapping[str, Any], regions: dict[str, np.ndarray], reads: Iterable[str], writes: Iterable[str]
) -> dict[str, np.ndarray]:
    """A remote worker's regions for one frame: the ones received (checked against the layout the
    hub sent), plus a fresh zeroed buffer for each region the stage writes. A received region is
    read-only unless the stage also writes it, then it is copied once to be writable."""
    try:
        layout = PoolLayout.from_wire(header["pool"])
    except (KeyError, TypeError, ValueError) as exc:
        raise msg.WireError(f"a WORK without a valid pool layout: {type(exc).__name__}") from None
    writes = set(writes)
    check_regions(regions, layout, set(reads) | writes)
    out = dict(regions)
    for region in layout.regions:
        if region.name not in writes:
            continue
        if region.name in out:
            if not out[region.name].flags.writeable:
                out[region.name] = out[region.name].copy()
        else:
            out[region.name] = np.zeros(region.shape, dtype=region.dtype)
    return out


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
