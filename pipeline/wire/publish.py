"""The public ZeroMQ output: `[topic = source_id, header JSON (UTF-8), optional image bytes, arrays...]`.

`pub` fans out to any number of subscribers; a subscriber that falls behind its high-water mark
loses messages. ZeroMQ drops them for that subscriber alone and tells the sender nothing (a PUB
socket never raises `Again`), so the publisher cannot count them. Instead each message carries
`msg`, its number on its topic (0, 1, 2, ... over frames, events and the end of stream): a
subscriber counts what it lost from the gaps (framewire.client does). `push` delivers to one of the
connected pullers and applies backpressure: `send` waits until a peer can take the message,
checking `should_stop` so a stopping daemon never hangs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import zmq

from framewire.pipeline.wire import curve
from framewire.pipeline.errors import FramewireError

log = logging.getLogger(__name__)


class Publisher:
    def __init__(
        self,
        endpoint: str,
        mode: str = "pub",
        hwm: int = 1000,
        *,
        curve_secret_key: str | None = None,
        curve_clients_dir: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.mode = mode
        self.hwm = hwm
        self.curve_secret_key = curve_secret_key
        self.curve_clients_dir = curve_clients_dir
        self._auth: Any = None
        self.sent = 0
        self.dropped = 0
        """push: messages given up on because the daemon was stopping while no peer took them."""
        self._numbers: dict[str, int] = {}
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None

    def open(self) -> None:
        self._ctx = zmq.Context()
        kind = zmq.PUB if self.mode == "pub" else zmq.PUSH
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.SNDHWM, self.hwm)
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

    def send(
        self,
        topic: str,
        header: dict[str, Any],
        image: bytes | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        arrays: Sequence[Any] = (),
    ) -> bool:
        """Send one message, numbered on its topic (`msg`); False when push gave up on it (stopping).
        `arrays`: raw buffers sent after the image (the header describes them)."""
        assert self._sock is not None, "open() was not called"
        number = self._numbers.get(topic, 0)
        self._numbers[topic] = number + 1
        parts: list[Any] = [topic.encode(), json.dumps({**header, "msg": number}, separators=(",", ":")).encode()]
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
