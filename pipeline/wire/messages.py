"""The internal wire format between the supervisor's hub and the stage workers.

A message is multipart: `[header, *buffers]`. The header is a msgpack map with a version, a `type`
and, for frames, the source, sequence number, timestamps, the frame-pool slot and descriptors
(`name, dtype, shape`) of the inline tensors carried by the buffers that follow. Nothing is ever
unpickled: a peer can send bytes, never code. Every decoded header is checked against the schema
below, and a bad one raises `WireError`, which the receiver counts and drops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgpack
import numpy as np
import zmq

WIRE_VERSION = 1

# Messages a worker sends the hub.
READY = "ready"  # a worker started: {stage, index, credits}
RESULT = "result"  # a frame is done at this stage; the frame's (possibly new) header and tensors
FAILED = "failed"  # a frame failed at this stage: {error}
FATAL = "fatal"  # a worker cannot start or go on: {error, exit}
STREAM = "stream"  # a source opened: {info}
FRAME = "frame"  # a source wrote a frame into a slot
EOS = "eos"  # a source ended: {frames, error?}
CLOSED = "closed"  # an output closed its files for a source
STATS = "stats"  # counters from a worker: {dropped: n, ...}
STATUS = "status"  # a worker's backend answers or not, and the backend's own counters: {available, reason?, times?}
EVENT = "event"  # an output's announcement (a closed video segment): {event}; the hub passes it to every output
LIVE = "live"  # the live layout: a frame its worker read from its own share of the sources, through its stage
# Messages the hub sends a worker.
WORK = "work"  # process this frame
POOL = "pool"  # a source's frame pool exists: {pool}
GRANT = "grant"  # a source may fill these slots: {slots}
STOP = "stop"  # stop: a source stops reading; other workers finish and exit
CONFIGURE = "configure"  # a source's settings changed at run time: {source, settings} (the whole of them)
SHARE = "share"  # the live layout: a source joins a worker's share {add, item?} or leaves it {drop}; its answer {released}

TYPES = frozenset(
    {READY, RESULT, FAILED, FATAL, STREAM, FRAME, EOS, CLOSED, STATS, EVENT, WORK, POOL, GRANT, STOP, STATUS, LIVE, SHARE,
     CONFIGURE}
)

DTYPES = frozenset({"uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32", "float64", "bool"})
# Looked up once: `dtype.name` and `np.dtype(name)` cost microseconds a tensor, and a YuNet result
# carries twelve tensors through four encodes and decodes per frame.
_NUMPY_DTYPES = {name: np.dtype(name) for name in DTYPES}
_NAMES = {dtype: name for name, dtype in _NUMPY_DTYPES.items()}
MAX_DIMS = 8
MAX_TENSOR_BYTES = 256 * 1024 * 1024
MAX_HEADER_BYTES = 1024 * 1024


class WireError(ValueError):
    """A message that does not follow the wire format; it is dropped and counted, never fatal."""


def encode(header: Mapping[str, Any], tensors: Mapping[str, np.ndarray] | None = None) -> list[Any]:
    """Header plus inline tensors as frames for `send` (or `send_multipart`)."""
    head = dict(header)
    head["v"] = WIRE_VERSION
    buffers: list[Any] = []
    if tensors:
        descs = []
        for name, array in tensors.items():
            array = np.ascontiguousarray(array)
            descs.append([name, _NAMES.get(array.dtype) or array.dtype.name, list(array.shape)])
            buffers.append(array.data.cast("B") if array.size else b"")
        head["tensors"] = descs
    else:
        head.pop("tensors", None)
    return [msgpack.packb(head, use_bin_type=True), *buffers]


ZERO_COPY_BYTES = 1 << 16
"""Buffers from this size on are sent without a copy. Below it a copy is cheaper: pyzmq tracks every
zero-copy frame until ZeroMQ lets go of it, which cost 20 us more per message of a few hundred
bytes (measured on the 2-core development machine: 50 against 30 us a send and receive)."""


_MORE = int(zmq.SNDMORE)
"""A plain int: pyzmq's `send_multipart` ORs its flag enums for every part, which took half of its
time (2.5-3.6 against 5.4-9.2 us a three-part send, measured on the 2-core development machine)."""
_RCVMORE = int(zmq.RCVMORE)


def send(sock: Any, parts: Sequence[Any], prefix: Sequence[bytes] = ()) -> None:
    """Send `encode`'s frames (after `prefix`, e.g. a ROUTER's peer identity), copying them unless
    one is large; one message, each frame but the last with SNDMORE."""
    copy = all(len(part) < ZERO_COPY_BYTES for part in parts[1:])
    frames = [*prefix, *parts]
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        sock.send(frame, _MORE if index < last else 0, copy=copy)


def receive(sock: Any, flags: int = 0, *, prefix: int = 0) -> list[Any]:
    """A message's frames off `sock`: the `prefix` frames (a ROUTER's peer identity) and the header
    as bytes, the tensors' buffers as `zmq.Frame`s, not copied. A header is small, and copying it
    costs less than a `zmq.Frame` made for it (3-5 us a message less than `recv_multipart(copy=False)`)."""
    parts = [sock.recv(flags)]
    copied = prefix + 1
    while sock.getsockopt(_RCVMORE):
        parts.append(sock.recv(copy=len(parts) < copied))
    return parts


def decode(frames: Sequence[Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Parse and check `[header, *buffers]`; tensors are zero-copy views on the received buffers."""
    if not frames:
        raise WireError("empty message")
    raw = _bytes(frames[0])
    if len(raw) > MAX_HEADER_BYTES:
        raise WireError(f"header of {len(raw)} bytes is over {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise WireError(f"header is not msgpack: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise WireError("header is not a map")
    if header.get("v") != WIRE_VERSION:
        raise WireError(f"unsupported wire version {header.get('v')!r}")
    kind = header.get("type")
    if kind not in TYPES:
        raise WireError(f"unknown message type {kind!r}")
    for key, typ in (("source", str), ("seq", int), ("slot", int)):
        if key in header and not isinstance(header[key], typ):
            raise WireError(f"{key} must be {typ.__name__}")
    descs = header.pop("tensors", None) or []
    if not isinstance(descs, list) or len(descs) != len(frames) - 1:
        raise WireError(f"{len(frames) - 1} buffers for {len(descs) if isinstance(descs, list) else '?'} tensors")
    tensors: dict[str, np.ndarray] = {}
    for desc, buf in zip(descs, frames[1:], strict=True):
        name, array = _tensor(desc, buf)
        tensors[name] = array
    return header, tensors


def _tensor(desc: Any, buf: Any) -> tuple[str, np.ndarray]:
    if not (isinstance(desc, list) and len(desc) == 3):
        raise WireError("tensor descriptor must be [name, dtype, shape]")
    name, dtype, shape = desc
    if not isinstance(name, str) or not name:
        raise WireError("tensor name must be a non-empty string")
    if dtype not in DTYPES:
        raise WireError(f"tensor {name!r}: dtype {dtype!r} is not allowed")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMS
        or not all(isinstance(d, int) and 0 <= d <= MAX_TENSOR_BYTES for d in shape)
    ):
        raise WireError(f"tensor {name!r}: bad shape {shape!r}")
    count = 1
    for d in shape:
        count *= d
    numpy_dtype = _NUMPY_DTYPES[dtype]
    nbytes = count * numpy_dtype.itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise WireError(f"tensor {name!r}: {nbytes} bytes is over the limit")
    data = buf.buffer if hasattr(buf, "buffer") else buf
    if len(memoryview(data)) != nbytes:
        raise WireError(f"tensor {name!r}: {len(memoryview(data))} bytes for shape {shape} {dtype}")
    return name, np.frombuffer(data, dtype=numpy_dtype).reshape(shape)


def _bytes(frame: Any) -> bytes:
    if isinstance(frame, bytes):
        return frame
    if hasattr(frame, "bytes"):
        return frame.bytes  # zmq.Frame
    return bytes(frame)


def bad_message_reason(error: str) -> str:
    """A short, bounded label for a wire error (no values: label sets must stay small)."""
    for word in ("msgpack", "version", "type", "tensor", "buffers", "header", "empty"):
        if word in error:
            return word
    return "other"
