"""Frames pushed to framewire over ZeroMQ by another program: the socket and the message checks.

A `zmq+tcp://host:port` or `zmq+ipc:///path` source binds a PULL socket there; a producer connects
a PUSH socket and sends one multipart message per frame (the README's "ZeroMQ source" section):

    [header: UTF-8 JSON object, payload: bytes]
    header  = {"width": int, "height": int, "format": "bgr24" | "jpeg", "pts": int (optional)}
    payload = bgr24: width * height * 3 bytes, rows top to bottom, pixels B, G, R
              jpeg:  one JPEG image of exactly width x height

`pts` is the producer's timestamp in microseconds (strictly increasing; without it, the arrival
time is used). A one-part message `{"eos": true}` ends the source. Every message is checked before
anything is allocated for it: a bad one is dropped and counted by reason, never fatal.

With `curve_secret_key` the socket is a CurveZMQ server: traffic is encrypted and, with
`curve_clients`, only producers whose public certificate is in that folder may connect.

Model-free and OpenCV-free: this module yields the checked header and the payload bytes; turning
them into a BGR frame is `framewire.sources.zmq`'s job.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import zmq

from framewire.pipeline.wire import curve
from framewire.pipeline.errors import FramewireError, SourceError

log = logging.getLogger(__name__)

MAX_SIDE = 8192
MAX_HEADER_BYTES = 4096
MAX_PART_BYTES = 64 * 1024 * 1024
"""A message part larger than this makes ZeroMQ drop the producer's connection (ZMQ_MAXMSGSIZE)."""
FORMATS = ("bgr24", "jpeg")
REASONS = ("parts", "header", "size", "format", "pts", "payload")


class Rejected(ValueError):
    """A message that breaks the format: `reason` is one of REASONS (a bounded metrics label)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class PushedFrame:
    """One checked message: the pixels are still bytes (`format` says how to read them)."""

    width: int
    height: int
    format: Literal["bgr24", "jpeg"]
    pts: int | None
    data: bytes


EOS: Literal["eos"] = "eos"
"""What `parse` returns for a `{"eos": true}` message: the producer ended the stream."""


def parse_header(parts: Sequence[bytes]) -> dict[str, Any] | Literal["eos"]:
    """The checks every pushed message passes, frames and audio alike: one or two parts, a JSON
    object header of bounded size, and either `{"eos": true}` alone or a header and a payload.
    Returns the header, or EOS; raises Rejected naming what is wrong."""
    if not parts or len(parts) > 2:
        raise Rejected("parts", f"{len(parts)} parts, expected 2 (header, payload)")
    raw = parts[0]
    if len(raw) > MAX_HEADER_BYTES:
        raise Rejected("header", f"header of {len(raw)} bytes is over {MAX_HEADER_BYTES}")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise Rejected("header", "header is not UTF-8 JSON") from None
    if not isinstance(header, dict):
        raise Rejected("header", "header is not a JSON object")
    if header.get("eos") is True:
        if len(parts) != 1:
            raise Rejected("parts", "an eos message has no payload")
        return EOS
    if len(parts) != 2:
        raise Rejected("parts", f"{len(parts)} parts, expected 2 (header, payload)")
    return header


def parse(parts: Sequence[bytes]) -> PushedFrame | Literal["eos"]:
    """Check one message; raises Rejected naming what is wrong."""
    header = parse_header(parts)
    if header == EOS:
        return EOS
    width, height = header.get("width"), header.get("height")
    for name, value in (("width", width), ("height", height)):
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SIDE:
            raise Rejected("size", f"{name} must be an integer in 1..{MAX_SIDE}, got {_short(value)}")
    assert isinstance(width, int) and isinstance(height, int)
    fmt = header.get("format")
    if fmt not in FORMATS:
        raise Rejected("format", f"format must be one of {', '.join(FORMATS)}, got {_short(fmt)}")
    pts = header.get("pts")
    if pts is not None and (not isinstance(pts, int) or isinstance(pts, bool) or not 0 <= pts < 2**62):
        raise Rejected("pts", f"pts must be a non-negative integer (microseconds), got {_short(pts)}")
    data = parts[1]
    if fmt == "bgr24" and len(data) != width * height * 3:
        expected = width * height * 3
        raise Rejected("size", f"{len(data)} bytes for {width}x{height} bgr24 ({expected} expected)")
    if fmt == "jpeg":
        found = jpeg_size(data)
        if found is None:
            raise Rejected("payload", "not a JPEG image")
        if found != (width, height):
            raise Rejected("size", f"the JPEG is {found[0]}x{found[1]}, the header says {width}x{height}")
    return PushedFrame(width, height, fmt, pts, data)


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header, read without decoding; None if there is none.

    Checked before decoding so that a small file claiming a huge picture is refused cheaply.
    """
    if data[:2] != b"\xff\xd8":
        return None
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # no length
            at += 2
            continue
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        if length < 2:
            return None
        # SOF0..SOF15, except DHT (C4), JPG (C8) and DAC (CC).
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if at + 9 > len(data):
                return None
            height = int.from_bytes(data[at + 5 : at + 7], "big")
            width = int.from_bytes(data[at + 7 : at + 9], "big")
            return width, height
        if marker == 0xDA:  # start of scan before any frame header
            return None
        at += 2 + length
    return None


class ZmqReceiver:
    """The PULL socket of one ZeroMQ source, created in the process that reads it.

    `receive(timeout_ms)` returns the next valid frame, EOS, or None when nothing valid came in
    time; what it rejected is in `rejected` (reason -> count).
    """

    def __init__(
        self,
        source_id: str,
        endpoint: str,
        *,
        hwm: int = 4,
        max_part_bytes: int = MAX_PART_BYTES,
        curve_secret_key: str | None = None,
        curve_clients_dir: str | None = None,
        parser: Callable[[Sequence[bytes]], Any] | None = None,
    ) -> None:
        """`parser` checks each message (default: a frame, `parse`; the audio input passes its own)."""
        self.source_id = source_id
        self.parser = parser or parse
        self.endpoint = endpoint
        self.hwm = hwm
        self.max_part_bytes = max_part_bytes
        self.curve_secret_key = curve_secret_key
        self.curve_clients_dir = curve_clients_dir
        self.rejected: Counter[str] = Counter()
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._auth: Any = None

    def open(self) -> None:
        """Bind the socket; SourceError when it cannot (e.g. the address is in use)."""
        self.close()
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PULL)
        sock.setsockopt(zmq.LINGER, 0)
        # A few frames queue at most: the drop policies work on fresh frames, not a backlog.
        sock.setsockopt(zmq.RCVHWM, self.hwm)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_part_bytes)
        try:
            if self.curve_secret_key:  # only producers whose public key is in the folder get in
                self._auth = curve.serve(
                    ctx, sock, self.curve_secret_key, self.curve_clients_dir, f"source {self.source_id}"
                )
            sock.bind(self.endpoint)
        except (zmq.ZMQError, FramewireError) as exc:
            sock.close(linger=0)
            if self._auth is not None:
                self._auth.stop()
                self._auth = None
            ctx.term()
            if isinstance(exc, FramewireError):
                raise SourceError(str(exc)) from None
            where = f"source {self.source_id}: cannot bind {self.endpoint}"
            raise SourceError(f"{where}: {exc.strerror}") from None
        self._ctx, self._sock = ctx, sock

    def receive(self, timeout_ms: int) -> Any:
        """The next valid message within `timeout_ms`; bad ones on the way are counted and skipped."""
        sock = self._sock
        if sock is None:
            raise RuntimeError(f"source {self.source_id}: the ZeroMQ socket is not open")
        wait = timeout_ms
        while sock.poll(wait):
            wait = 0
            parts = sock.recv_multipart()
            try:
                return self.parser(parts)
            except Rejected as bad:
                self.reject(bad.reason, str(bad))
        return None

    def reject(self, reason: str, detail: str) -> None:
        """Count a bad message; the first of each reason is logged, the rest only counted."""
        self.rejected[reason] += 1
        level = logging.WARNING if self.rejected[reason] == 1 else logging.DEBUG
        log.log(
            level, "source %s: dropped a bad message (%s); further ones are only counted", self.source_id, detail
        )

    def close(self) -> None:
        curve.close(self._ctx, self._sock, self._auth, linger=0)
        self._ctx, self._sock, self._auth = None, None, None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
