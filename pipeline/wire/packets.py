"""A source's compressed packets, from its decode worker to the output that cuts event clips.

The decode worker demuxes every packet of its source; a `recording` output with clips keeps a
bounded ring of them per source (framewire.media.clips). They travel over one ipc:// socket per
such output: the output binds a PULL socket, each decode worker connects a PUSH socket and sends
without waiting. A packet is a few kilobytes (a 720p key frame some tens), so the hop costs a
message, not a frame's copy. When the output falls behind by `hwm` messages the decode worker
drops packets rather than wait (never a frame), and counts them.

Messages (multipart): `[b"streams", source, init]`: a connection's streams, as the init segment of
an MP4 file (its codec parameters; the next packets are of these streams); `[b"packet", source,
header, data]`: one packet, its header a msgpack map (`kind` video or audio, `pts`, `dts`,
`duration`, `tb`: [num, den], `key`, and `n`: the packet's number among those this decode worker
offered this output for the source, so the output counts the ones dropped on the way from the gaps).
Bytes only: the runtime knows no codec.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import msgpack
import zmq

log = logging.getLogger(__name__)

STREAMS = b"streams"
PACKET = b"packet"
HWM = 4000
"""Packets queued for the output before the decode worker drops them: at 25 fps with audio, about
a minute of the stream."""


def endpoint_for(folder: str) -> str:
    """The ipc:// endpoint of the output writing into `folder` (one a folder: config.recording): both
    sides compute it from the config alone, in the temporary folder, short enough for an ipc path."""
    key = hashlib.sha1(os.path.abspath(folder).encode()).hexdigest()[:16]
    return f"ipc://{tempfile.gettempdir()}/framewire-packets-{key}.sock"


class PacketPush:
    """The decode worker's end: connect once, send without ever waiting."""

    def __init__(self, endpoint: str, source_id: str, hwm: int = HWM) -> None:
        self.endpoint = endpoint
        self.source = source_id.encode()
        self.hwm = hwm
        self.dropped = 0
        self.offered = 0
        """Packets offered so far (sent or dropped): the next one's `n`."""
        self._context: zmq.Context[Any] | None = None
        self._socket: zmq.Socket[Any] | None = None

    def _open(self) -> zmq.Socket[Any]:
        if self._socket is None:
            self._context = zmq.Context()
            self._socket = self._context.socket(zmq.PUSH)
            self._socket.setsockopt(zmq.SNDHWM, self.hwm)
            self._socket.setsockopt(zmq.LINGER, 1000)
            self._socket.connect(self.endpoint)
        return self._socket

    def streams(self, init: bytes) -> None:
        self._send([STREAMS, self.source, init])

    def packet(self, header: dict[str, Any], data: bytes) -> None:
        numbered = {**header, "n": self.offered}
        self.offered += 1
        self._send([PACKET, self.source, msgpack.packb(numbered), data])

    def _send(self, parts: list[bytes]) -> None:
        try:
            self._open().send_multipart(parts, flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self.dropped += 1

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._context is not None:
            self._context.term()
            self._context = None


class PacketPull:
    """The output's end: bind once; `received()` takes what is waiting, never waits."""

    def __init__(self, endpoint: str, hwm: int = HWM) -> None:
        self.endpoint = endpoint
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PULL)
        self._socket.setsockopt(zmq.RCVHWM, hwm)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(endpoint)

    def received(self, limit: int = 100_000) -> Iterator[tuple[bytes, str, Any, bytes]]:
        """(kind, source, header or init segment, data) of every message waiting, in order."""
        for _ in range(limit):
            try:
                parts = self._socket.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(parts) == 3 and parts[0] == STREAMS:
                yield STREAMS, parts[1].decode(errors="replace"), parts[2], b""
            elif len(parts) == 4 and parts[0] == PACKET:
                try:
                    header = msgpack.unpackb(parts[2])
                except Exception:  # msgpack's errors for bytes that are not one map
                    log.warning("packets: dropped a packet with a bad header")
                    continue
                yield PACKET, parts[1].decode(errors="replace"), header, parts[3]
            else:
                log.warning("packets: dropped a message of %d parts", len(parts))

    def close(self) -> None:
        self._socket.close()
        self._context.term()
        path = self.endpoint.removeprefix("ipc://")
        try:
            os.remove(path)
        except OSError:
            pass
