"""A Python client of framewire's `zmq` output: typed records, end of stream, losses, reconnects.

    from framewire import Client

    with Client("tcp://127.0.0.1:5560") as client:
        for message in client.messages(until_eos=True):
            print(message)

It reads the public wire format (README, "The ZeroMQ output"): `[topic, header JSON, JPEG?,
arrays...]` (the JPEG when the header has `image`, then one part per entry of its `arrays`). Each
message becomes a `FrameRecord` (a frame's results), an `EndOfStream` (a source ended) or a
`SegmentClosed` (a video_file output closed a segment) or a `ClipClosed` (a recording output closed
an event clip). A `pub` output drops what a slow subscriber
cannot take without telling anyone; the client counts those losses from the gaps in each topic's
message numbers (`lost`, `lost_by_source`), and the messages it missed before its first one of a
stream (`missed_at_start`: a stream's numbers start at 0, or at the header's `msg_start`); a `pub`
output with `wait_subscribers` holds its first frame until the subscribers are in. ZeroMQ reconnects
by itself (every 20 to 100 ms) after the daemon restarts or the network drops; heartbeats notice a
dead peer. With `server_key` the link is CurveZMQ (`client_key`: this client's secret certificate,
or a fresh pair).
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import zmq

from framewire.pipeline.wire import curve
from framewire.pipeline.wire.linkwatch import LinkWatch
from framewire.pipeline.errors import FramewireError, UsageError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FrameRecord:
    """One frame's results: what a JSONL line holds, plus the composited frame as JPEG when the
    output sends it (`jpeg: true`), decoded to a BGR array by `image()` or on arrival."""

    source: str
    seq: int
    pts: int
    time: float
    width: int
    height: int
    results: dict[str, Any]
    latency_ms: dict[str, float]
    error: str | None = None
    jpeg: bytes | None = None
    arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    """The binary parts the header's `arrays` describes: a secondary model's embeddings, by name."""
    pixels: np.ndarray | None = field(default=None, repr=False, compare=False)
    header: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON header as it came, every key included."""

    def image(self) -> np.ndarray | None:
        """The composited frame as an HxWx3 BGR uint8 array (None without a JPEG part)."""
        if self.pixels is not None:
            return self.pixels
        return decode_jpeg(self.jpeg) if self.jpeg is not None else None


@dataclass(frozen=True)
class EndOfStream:
    """A source ended: its last frame came before this."""

    source: str
    header: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class SegmentClosed:
    """A video_file output closed a segment of a source's recording (`segment_s`)."""

    source: str
    output: str
    path: str
    index: int
    start: str
    frames: int
    duration_s: float
    bytes: int
    deleted: tuple[str, ...] = ()
    header: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class ClipClosed:
    """A recording output closed an event clip (docs: Recordings): its file, its span on the source's
    timeline, and the ids of its events in the output's history."""

    source: str
    output: str
    path: str
    start_s: float
    end_s: float
    frames: int
    bytes: int
    events: tuple[int, ...] = ()
    annotated: bool = False
    deleted: tuple[str, ...] = ()
    url: str | None = None
    """Where the daemon's HTTP server serves the clip (`GET /clips/<id>`); None where HTTP is off."""
    header: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


Message = FrameRecord | EndOfStream | SegmentClosed | ClipClosed


class ProtocolError(FramewireError, ValueError):
    """A message that does not follow framewire's wire format."""


class KeyRefused(FramewireError, ConnectionError):
    """The server refused this client's CurveZMQ key: ZeroMQ does not try again, nothing will come."""


def decode_jpeg(data: bytes) -> np.ndarray:
    """A JPEG part as an HxWx3 BGR uint8 array.

    Args:
        data: the JPEG's bytes (a `zmq` output's image part).

    Returns:
        The decoded picture.

    Raises:
        ProtocolError: `data` is not a JPEG.
    """
    import cv2  # only a client that wants pixels needs OpenCV loaded

    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise ProtocolError(f"the image part ({len(data)} bytes) is not a JPEG")
    return np.asarray(image)


def parse(parts: Sequence[bytes], *, decode_images: bool = False) -> Message:
    """One multipart message of a `zmq` output as a typed record.

    Args:
        parts: the message's frames as received: topic, header JSON, then the JPEG and arrays it announces.
        decode_images: decode the JPEG now (`FrameRecord.pixels`) rather than in `FrameRecord.image()`.

    Returns:
        A `FrameRecord`, `EndOfStream` or `SegmentClosed`.

    Raises:
        ProtocolError: the message does not follow framewire's wire format (named in one line).
    """
    if len(parts) < 2:
        raise ProtocolError(f"a message of {len(parts)} part(s), expected the topic and a header")
    try:
        header = json.loads(parts[1])
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"the header is not JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("source"), str):
        raise ProtocolError("the header is not a JSON object with a source")
    try:
        jpeg, arrays = _binary(header, parts[2:])
        return _typed(header, jpeg, arrays, decode_images)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"source {header['source']}: bad message: {type(exc).__name__}: {exc}") from None


def _binary(header: dict[str, Any], parts: Sequence[bytes]) -> tuple[bytes | None, dict[str, np.ndarray]]:
    """The JPEG (when the header announces `image`) and the arrays its `arrays` describes, checked."""
    rest = list(parts)
    jpeg = rest.pop(0) if header.get("image") and rest else None
    described = header.get("arrays") or []
    if len(described) != len(rest):
        raise ValueError(f"{len(rest)} binary part(s) for {len(described)} array(s)")
    arrays: dict[str, np.ndarray] = {}
    for desc, data in zip(described, rest, strict=True):
        dtype, shape = np.dtype(str(desc["dtype"])), tuple(int(d) for d in desc["shape"])
        if dtype.hasobject or int(np.prod(shape)) * dtype.itemsize != len(data):
            raise ValueError(f"array {desc['name']!r}: {len(data)} bytes for {dtype} {list(shape)}")
        arrays[str(desc["name"])] = np.frombuffer(data, dtype).reshape(shape)
    return jpeg, arrays


def _typed(header: dict[str, Any], jpeg: bytes | None, arrays: dict[str, np.ndarray], decode_images: bool) -> Message:
    source = header["source"]
    if header.get("eos"):
        return EndOfStream(source, header)
    if header.get("event") == "segment":
        return SegmentClosed(
            source, str(header["output"]), str(header["path"]), int(header["index"]), str(header["start"]),
            int(header["frames"]), float(header["duration_s"]), int(header["bytes"]),
            tuple(str(p) for p in header.get("deleted") or ()), header,
        )  # fmt: skip
    if header.get("event") == "clip":
        return ClipClosed(
            source, str(header["output"]), str(header["path"]),
            float(header["start_s"]), float(header["end_s"]),
            int(header["frames"]), int(header["bytes"]), tuple(int(e) for e in header.get("events") or ()),
            bool(header.get("annotated")), tuple(str(p) for p in header.get("deleted") or ()),
            str(header["url"]) if header.get("url") else None, header,
        )  # fmt: skip
    return FrameRecord(
        source=source, seq=int(header["seq"]), pts=int(header["pts"]), time=float(header["time"]),
        width=int(header["width"]), height=int(header["height"]), results=dict(header.get("results") or {}),
        latency_ms=dict(header.get("latency_ms") or {}), error=header.get("error"), jpeg=jpeg, arrays=arrays,
        pixels=decode_jpeg(jpeg) if (decode_images and jpeg is not None) else None, header=header,
    )  # fmt: skip


class Client:
    """Reads a framewire `zmq` output: `mode="sub"` for a pub output (optionally only some
    `topics`, source id prefixes), `mode="pull"` for a push output.

    Every wait is `timeout`, in seconds, for the next message: `receive(timeout=)`,
    `messages(timeout=)` and the `subscribe` command's `--timeout` mean the same thing.

    Attributes:
        endpoint: the endpoint connected to.
        lost: messages a pub output sent that this client never got: the gaps in each source's
            message numbers, and the messages of a stream before the first this client got.
        missed_at_start: the part of `lost` before this client's first message of a stream: it
            connected or subscribed after the stream started (a late joiner counts all it missed).
        lost_by_source: `lost` by source id.
        bad: messages skipped because they did not follow the wire format (each one logged).
        link: with `watch=True`, what the connection went through (`link.update()`).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        mode: Literal["sub", "pull"] = "sub",
        topics: Sequence[str] = ("",),
        server_key: str | None = None,
        client_key: str | None = None,
        decode_images: bool = False,
        hwm: int = 1000,
        reconnect_ms: tuple[int, int] = (20, 100),
        context: zmq.Context | None = None,
        watch: bool = False,
    ) -> None:
        """Connect (ZeroMQ connects in the background: the daemon may start later, or restart).

        Args:
            endpoint: the output's `endpoint`, e.g. `tcp://127.0.0.1:5560` or `ipc:///tmp/fw.sock`.
            mode: `sub` for a `pub` output, `pull` for a `push` output.
            topics: with `sub`, the source id prefixes to receive; `("",)`: every source.
            server_key: the output's CurveZMQ certificate file (the `.key` that `keys` made, or
                its `.key_secret`); None: a plain connection.
            client_key: with `server_key`, this client's `.key_secret` file; None: a fresh key
                pair (enough unless the output lists the clients it allows).
            decode_images: decode each frame's JPEG on arrival (`FrameRecord.pixels`) rather than
                when `FrameRecord.image()` is called.
            hwm: messages queued in this client before ZeroMQ drops (sub) or holds back (pull) more.
            reconnect_ms: the first and the longest wait between two reconnection tries, in ms.
            context: a ZeroMQ context to share; None: the client makes and ends its own.
            watch: follow the connection (`link`: connected, handshake, refused key), and raise
                `KeyRefused` from `receive` when the server refuses the key instead of waiting for ever.

        Raises:
            UsageError: a `mode` other than sub or pull, or an endpoint ZeroMQ refuses.
            FramewireError: a key file that cannot be read or holds no secret key.
        """
        if mode not in ("sub", "pull"):
            raise UsageError(f"mode must be sub or pull, got {mode!r}")
        self.endpoint = endpoint
        self.decode_images = decode_images
        self.lost = 0
        self.missed_at_start = 0
        self.lost_by_source: dict[str, int] = {}
        self.bad = 0
        self._next: dict[str, int] = {}
        self._own_context = context is None
        self._ctx = context or zmq.Context()
        self._sock = self._ctx.socket(zmq.SUB if mode == "sub" else zmq.PULL)
        self.link: LinkWatch | None = None
        try:
            self._configure(mode, topics, server_key, client_key, hwm, reconnect_ms)
            self.link = LinkWatch(self._sock) if watch else None  # before connect: no event missed
            self._sock.connect(endpoint)
        except zmq.ZMQError as exc:
            self.close()
            raise UsageError(f"endpoint {endpoint}: {exc}") from None
        except FramewireError:
            self.close()
            raise

    def _configure(
        self, mode: str, topics: Sequence[str], server_key: str | None, client_key: str | None,
        hwm: int, reconnect_ms: tuple[int, int],
    ) -> None:  # fmt: skip
        sock = self._sock
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, hwm)
        # Retries stay fast (a client started before the daemon catches its first frames: a pub output
        # sends its first frame a moment after it binds) and back off only to 0.1 s; heartbeats drop
        # a connection whose peer went silent, so it is made again.
        sock.setsockopt(zmq.RECONNECT_IVL, reconnect_ms[0])
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, reconnect_ms[1])
        sock.setsockopt(zmq.HEARTBEAT_IVL, 2000)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 10000)
        if server_key:  # before connect: a connection keeps the mechanism it starts with
            curve.connect_as_client(sock, server_key, client_key, "curve key")
        if mode == "sub":
            for topic in topics:
                sock.setsockopt_string(zmq.SUBSCRIBE, topic)

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message. One that does not follow the wire format is skipped (counted in `bad`).

        Args:
            timeout: the longest wait for it, in seconds; None: for ever.

        Returns:
            A `FrameRecord`, `EndOfStream` or `SegmentClosed`; None when `timeout` passed first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            if not self._poll(wait):
                return None
            parts = self._sock.recv_multipart()
            try:
                message = parse(parts, decode_images=self.decode_images)
            except ProtocolError as exc:
                self.bad += 1
                log.warning("skipped a message from %s: %s", self.endpoint, exc)
                continue
            self._count(message)
            return message

    def _poll(self, wait_ms: int) -> bool:
        """Whether a message came within `wait_ms` (-1: no limit). With a link watch its events are
        read meanwhile, and a refused key raises at once."""
        if self.link is None:
            return bool(self._sock.poll(wait_ms))
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self.link.monitor, zmq.POLLIN)
        deadline = None if wait_ms < 0 else time.monotonic() + wait_ms / 1000
        while True:
            left = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            ready = dict(poller.poll(left))
            if self.link.update().refused:
                raise KeyRefused(f"{self.endpoint}: the server refused our CurveZMQ key")
            if self._sock in ready:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def messages(
        self,
        *,
        until_eos: bool = False,
        timeout: float | None = None,
        count: int | None = None,
        idle_timeout: float | None = None,
    ) -> Iterator[Message]:
        """Messages as they come, until one of the ends asked for.

        Args:
            until_eos: end once every source seen so far has sent its `EndOfStream` (which is
                yielded too).
            timeout: end after this many seconds without a message; None: wait for ever.
            count: end after this many messages; None: no limit.
            idle_timeout: the old name of `timeout`, deprecated.

        Returns:
            An iterator of `FrameRecord`, `EndOfStream` and `SegmentClosed`, in the order received.

        Raises:
            UsageError: both `timeout` and `idle_timeout` given.
        """
        if idle_timeout is not None:
            if timeout is not None:
                raise UsageError("Client.messages: give timeout, not both it and idle_timeout (its old name)")
            warnings.warn("Client.messages(idle_timeout=) is now timeout=", DeprecationWarning, stacklevel=2)
            timeout = idle_timeout
        return self._messages(until_eos, timeout, count)

    def _messages(self, until_eos: bool, timeout: float | None, count: int | None) -> Iterator[Message]:
        seen: set[str] = set()
        ended: set[str] = set()
        received = 0
        while count is None or received < count:
            message = self.receive(timeout)
            if message is None:
                return
            received += 1
            seen.add(message.source)
            if isinstance(message, EndOfStream):
                ended.add(message.source)
            yield message
            if until_eos and ended >= seen:
                return

    def __iter__(self) -> Iterator[Message]:
        """`messages()`: every message, for ever (until `close()`)."""
        return self.messages()

    def _count(self, message: Message) -> None:
        number = message.header.get("msg")
        if not isinstance(number, int):
            return
        start = message.header.get("msg_start", 0)
        expected = self._next.get(message.source)
        # The first message of the topic, or a number below the expected one (the daemon restarted and
        # numbers from 0 again): what came before it in its stream was missed at the start.
        if expected is None or number < expected:
            missed = number - start if isinstance(start, int) and 0 <= start <= number else 0
            self.missed_at_start += missed
        else:
            missed = number - expected
        if missed:
            self.lost += missed
            self.lost_by_source[message.source] = self.lost_by_source.get(message.source, 0) + missed
        self._next[message.source] = number + 1

    def close(self) -> None:
        """Close the socket (and the context the client made); what is queued is dropped."""
        if self.link is not None:
            self.link.close()
        self._sock.close(linger=0)
        if self._own_context:
            self._ctx.term()

    def __enter__(self) -> Client:
        """The client itself; leaving the `with` block closes it."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
