"""uvicorn's HTTP/1.1 protocol (h11) with the three things the API needs that uvicorn does not do.

- A request it cannot parse (a bad request line or Content-Length) is answered in JSON like every
  other error, `{"error": "..."}` naming what h11 refused, instead of uvicorn's plain text.
- A lingering close (RFC 9112, section 9.6): when an answer closes the connection while the client
  is still sending a body the server will not read (413, 411), the server shuts its side for writing
  and drops what still comes, up to DISCARD_BYTES for DISCARD_S, before it closes. Closing at once
  on unread data makes the kernel reset the connection, and a client still sending (urllib,
  requests) would lose the answer to the reset before reading it.
- TCP_NODELAY on each connection: uvicorn writes an answer's headers and its body apart, and with
  Nagle's algorithm on, the body of a small answer waits for the client's delayed ACK: measured
  here, 42-49 ms for every `GET /livez` after the first on a kept-alive connection, 1 ms without.

All three hook into uvicorn's `H11Protocol` (pinned in the locks); tests/unit/pipeline/test_control_http.py
holds them on a real socket.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

DISCARD_BYTES = 64 * 1024 * 1024
DISCARD_S = 2.0


class _Lingering:
    """The connection's transport, whose `close` lingers while the client may still be sending."""

    def __init__(self, transport: asyncio.Transport, protocol: JsonH11Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self.lingering = False

    def close(self) -> None:
        if self.lingering or self._transport.is_closing():
            return
        if self._protocol.conn.their_state is not h11.SEND_BODY or not self._transport.can_write_eof():
            self._transport.close()
            return
        self.lingering = True
        self._transport.write_eof()  # sent after what is buffered: the client reads a whole answer
        if not self._transport.is_reading():  # paused by uvicorn's flow control: the rest must flow
            self._transport.resume_reading()
        asyncio.get_event_loop().call_later(DISCARD_S, self._transport.close)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class JsonH11Protocol(H11Protocol):
    """One connection: uvicorn's h11 protocol, JSON for unparseable requests, a lingering close."""

    _parse_error: str = ""
    _discarded = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = False  # uvicorn logs each request wherever the root logger has a handler

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._lingering = _Lingering(transport, self)
        super().connection_made(self._lingering)  # type: ignore[arg-type]
        receive = self.conn.next_event

        def next_event() -> Any:
            try:
                return receive()
            except h11.RemoteProtocolError as exc:
                self._parse_error = str(exc).split(": bytearray(")[0]  # not the raw bytes again
                raise

        self.conn.next_event = next_event  # type: ignore[method-assign]

    def data_received(self, data: bytes) -> None:
        if self._lingering.lingering:  # the rest of a body nobody reads
            self._discarded += len(data)
            if self._discarded > DISCARD_BYTES:
                self._lingering._transport.close()
            return
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        body = json.dumps({"error": f"not an HTTP request this server can read: {self._parse_error or msg}"})
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        try:
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                          h11.Data(data=body.encode()), h11.EndOfMessage()):  # fmt: skip
                self.transport.write(self.conn.send(event))
        except h11.LocalProtocolError:  # an answer had started already: nothing more can be said
            pass
        self.transport.close()
