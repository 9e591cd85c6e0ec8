"""What a connecting ZeroMQ socket went through, read from its monitor: whether anything answered at
the endpoint, whether the ZMTP handshake succeeded, or whether the server refused our CurveZMQ key.

A client that receives nothing cannot tell those apart from its messages alone; `subscribe` says
which. A refused key is final: ZeroMQ does not connect again after it (checked with libzmq 4.3.5),
so a client that waits for messages after it waits for ever.
"""

from __future__ import annotations

from dataclasses import dataclass

import zmq
from zmq.utils.monitor import recv_monitor_message

EVENTS = (
    zmq.EVENT_CONNECTED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
MECHANISM_MISMATCH = zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
"""The value of a failed handshake where one side spoke CurveZMQ and the other did not."""


@dataclass
class LinkState:
    """Counts of what happened to the socket's connections so far."""

    connected: int = 0
    """Connections made (something listens at the endpoint)."""
    handshakes: int = 0
    """ZMTP handshakes that succeeded: a ZeroMQ peer of a fitting kind, with matching keys."""
    refused: int = 0
    """Handshakes the server's authenticator refused: our CurveZMQ key is not among its clients."""
    mismatched: int = 0
    """Handshakes where one side spoke CurveZMQ and the other plain ZMTP."""
    failed: int = 0
    """Other failed handshakes: with CurveZMQ, the wrong server key (or a peer of an unfitting kind,
    which CurveZMQ hides). A plain peer of an unfitting kind (a push output read in sub mode) ends
    the connection with none of these: it shows as `connected` without a handshake."""


class LinkWatch:
    """Monitors `sock` (attach before `connect`, so no event is missed); `update()` reads the events
    that came so far without waiting. `close()` before the socket's context is terminated."""

    def __init__(self, sock: zmq.Socket) -> None:
        self._sock = sock
        self.monitor: zmq.Socket = sock.get_monitor_socket(EVENTS)
        self.state = LinkState()

    def update(self) -> LinkState:
        while self.monitor.poll(0):
            found = recv_monitor_message(self.monitor)
            event, value = found["event"], int(found["value"])
            if event == zmq.EVENT_CONNECTED:
                self.state.connected += 1
            elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.state.handshakes += 1
            elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self.state.refused += 1
            elif event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == MECHANISM_MISMATCH:
                self.state.mismatched += 1
            elif event in (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL):
                self.state.failed += 1
        return self.state

    def close(self) -> None:
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass  # the socket is closed already: so is its monitoring
        self.monitor.close(linger=0)
