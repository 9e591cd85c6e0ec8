"""A free TCP port for a test's server: the OS picks it (bind to port 0), so no test depends on a
fixed port being free."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
