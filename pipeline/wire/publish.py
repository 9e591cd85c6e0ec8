"""The public ZeroMQ output: `[topic = source_id, header JSON (UTF-8), optional image bytes, arrays...]`.

`pub` fans out to any number of subscribers; a subscriber that falls behind its high-water mark
loses messages. ZeroMQ drops them for that subscriber alone and tells the sender nothing (a PUB
socket never raises `Again`), so the publisher cannot count them. Instead each message carries
`msg`, its number on its topic (0, 1, 2, ... over frames, events and the end of stream): a
subscriber counts what it lost from the gaps (framewire.client does). `push` delivers to one of the
connected pullers and applies backpressure: `send` waits until a peer can take the message,
checking `should_stop` so a stopping daemon never hangs.

A subscriber that connects as the job starts can miss its first messages: its subscription travels
to the publisher after the connection, and a PUB socket drops what nobody has subscribed to yet.
With `wait_subscribers=N` the socket is an XPUB, which hands the publisher every subscription and
unsubscription (XPUB_VERBOSER: repeated ones too); `wait_for_subscribers` then waits, bounded, until
N subscriptions are in before the first message goes out. A message that starts a source's stream
on a topic whose numbers did not start there (the source id was used before) carries `msg_start`,
the `msg` of that stream's first message, so a subscriber can count what it missed at the start.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import zmq

from framewire.pipeline.wire import curve
from framewire.pipeline.errors import FramewireError

log = logging.getLogger(__name__)


class Publisher:
    """The `zmq` output's socket: `open`, then `send(topic, record)` per frame, then `close`."""

    def __init__(
        self,
        endpoint: str,
        mode: str = "pub",
        hwm: int = 1000,
        *,
        curve_secret_key: str | None = None,
        curve_clients_dir: str | None = None,
        wait_subscribers: int = 0,
        wait_timeout_s: float = 10.0,
    ) -> None:
        self.endpoint = endpoint
        self.mode = mode
        self.hwm = hwm
        self.wait_subscribers = wait_subscribers if mode == "pub" else 0
        self.wait_timeout_s = wait_timeout_s
        self.subscriptions = 0
        """pub with wait_subscribers: subscriptions in, less unsubscriptions (one per subscriber and topic)."""
        self.curve_secret_key = curve_secret_key
        self.curve_clients_dir = curve_clients_dir
        self._auth: Any = None
        self.sent = 0
        self.dropped = 0
        """push: messages given up on because the daemon was stopping while no peer took them."""
        self._numbers: dict[str, int] = {}
        self._starts: dict[str, int] = {}
        """Per topic, the `msg` its current stream started at (when not 0)."""
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None

    def open(self) -> None:
        self._ctx = zmq.Context()
        kind = zmq.PUSH if self.mode != "pub" else zmq.XPUB if self.wait_subscribers else zmq.PUB
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.SNDHWM, self.hwm)
        if kind == zmq.XPUB:  # every (un)subscription comes up, not only a topic's first and last
            sock.setsockopt(zmq.XPUB_VERBOSER, 1)
        sock.setsockopt(zmq.LINGER, 2000)
        if self.curve_secret_key:
            self._secure(sock)
        try:
            sock.bind(self.endpoint)
        except zmq.ZMQError as exc:
            sock.close(linger=0)
            raise FramewireError(f"zmq output {self.endpoint}: cannot bind: {exc}") from None
        self._sock = sock
        log.info("zmq output: %s on %s", self.mode, self.endpoint)

    def _secure(self, sock: zmq.Socket) -> None:
        """CurveZMQ: encrypt with the server's key pair; with a clients folder, only the public keys
        in it may connect (a ZAP handler checks each one)."""
        assert self.curve_secret_key is not None and self._ctx is not None
        self._auth = curve.serve(
            self._ctx, sock, self.curve_secret_key, self.curve_clients_dir, f"zmq output {self.endpoint}"
        )

    def wait_for_subscribers(self) -> bool:
        """pub with wait_subscribers: wait until that many subscriptions are in, at most
        `wait_timeout_s` (then one warning, and the output sends anyway); True when they came."""
        if not self.wait_subscribers or self.subscriptions >= self.wait_subscribers:
            return True
        log.info("zmq output %s: waiting for %d subscriber(s), up to %.1f s",
                 self.endpoint, self.wait_subscribers, self.wait_timeout_s)  # fmt: skip
        deadline = time.monotonic() + self.wait_timeout_s
        while self.subscriptions < self.wait_subscribers:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                log.warning("zmq output %s: %d of %d subscriber(s) after %.1f s; sending anyway",
                            self.endpoint, self.subscriptions, self.wait_subscribers, self.wait_timeout_s)  # fmt: skip
                return False
            self.count_subscriptions(math.ceil(left_s * 1000))
        return True

    def count_subscriptions(self, timeout_ms: int = 0) -> int:
        """With wait_subscribers: take in the (un)subscriptions the XPUB socket received (byte 1 or 0,
        then the topic), waiting up to `timeout_ms` for the first; read on every send too, or they
        would pile up. The subscriptions in, less those gone (a subscriber that left takes its own off)."""
        sock = self._sock
        assert sock is not None, "open() was not called"
        if not self.wait_subscribers:
            return self.subscriptions
        while sock.poll(timeout_ms, zmq.POLLIN):
            event = sock.recv()
            if event[:1] == b"\x01":
                self.subscriptions += 1
            elif event[:1] == b"\x00":
                self.subscriptions = max(0, self.subscriptions - 1)
            timeout_ms = 0
        return self.subscriptions

    def send(
        self,
        topic: str,
        header: dict[str, Any],
        image: bytes | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        arrays: Sequence[Any] = (),
        *,
        starts_stream: bool = False,
    ) -> bool:
        """Send one message, numbered on its topic (`msg`); False when push gave up on it (stopping).
        `arrays`: raw buffers sent after the image (the header describes them). `starts_stream`: the
        first message of a source's stream (its first frame), whose `msg` the stream's messages carry
        as `msg_start` when it is not 0."""
        assert self._sock is not None, "open() was not called"
        if self.wait_subscribers:
            self.count_subscriptions()
        number = self._numbers.get(topic, 0)
        self._numbers[topic] = number + 1
        if starts_stream:
            self._starts[topic] = number
        numbered = {**header, "msg": number}
        if self._starts.get(topic):
            numbered["msg_start"] = self._starts[topic]
        parts: list[Any] = [topic.encode(), json.dumps(numbered, separators=(",", ":")).encode()]
        if image is not None:
            parts.append(image)
        parts.extend(arrays)
        if self.mode == "pub":  # never blocks: a subscriber behind by hwm messages loses this one
            self._sock.send_multipart(parts)
            self.sent += 1
            return True
        while True:  # push: wait for a peer, a tenth of a second at a time
            if self._sock.poll(100, zmq.POLLOUT):
                self._sock.send_multipart(parts)
                self.sent += 1
                return True
            if should_stop():
                self.dropped += 1
                return False

    def close(self) -> None:
        curve.close(self._ctx, self._sock, self._auth)
        self._ctx, self._sock, self._auth = None, None, None
