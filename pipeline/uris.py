"""What kind of source a `sources[].uri` names, from its text alone (nothing is opened here).

One place for the config's checks and defaults and for the stage that opens the source, so both
agree on what is live: a live source reconnects when it drops and drops frames when behind, a
file ends at its end and is read in full.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import unquote, urlsplit

SourceKind = Literal["file", "stream", "camera", "zmq"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
LIVE_SCHEMES = frozenset({"rtsp", "rtsps", "rtmp", "rtmps", "rtmpt", "srt", "udp", "rtp", "tcp"})
STREAM_SCHEMES = LIVE_SCHEMES | {"http", "https"}
ZMQ_SCHEMES = frozenset({"zmq+tcp", "zmq+ipc"})


def scheme(uri: str) -> str | None:
    """The URI's scheme in lower case (`rtsp`, `zmq+tcp`), or None for a plain path."""
    match = _SCHEME.match(uri)
    return match.group(1).lower() if match else None


def source_kind(uri: str) -> SourceKind:
    """file (a path, file:// or any scheme PyAV reads as a whole), stream (rtsp, rtmp, http(s),
    srt, udp...), camera (a V4L2 device under /dev/) or zmq (frames pushed to zmq+tcp:// or
    zmq+ipc://)."""
    found = scheme(uri)
    if found in ZMQ_SCHEMES:
        return "zmq"
    if found in STREAM_SCHEMES:
        return "stream"
    if found is None and uri.startswith("/dev/"):
        return "camera"
    return "file"


def local_path(uri: str) -> str | None:
    """The file path that `uri` names (a plain path or a file:// URI), or None for other schemes."""
    found = scheme(uri)
    if found is None:
        return uri
    if found != "file":
        return None
    parts = urlsplit(uri)
    return unquote(parts.path) if not parts.netloc or parts.netloc == "localhost" else None


def is_live(uri: str) -> bool:
    """Whether a source is live when its config does not say: cameras, ZeroMQ, RTSP, RTMP, SRT,
    UDP, and HTTP(S) HLS playlists (`.m3u8`); a plain HTTP(S) URL is a remote file."""
    kind = source_kind(uri)
    if kind in ("camera", "zmq"):
        return True
    if kind != "stream":
        return False
    if scheme(uri) in ("http", "https"):
        path = re.split(r"[?#]", uri, maxsplit=1)[0]
        return path.lower().endswith(".m3u8")
    return True


def redact(uri: str) -> str:
    """`uri` fit for logs and messages: the user:password of a URL becomes `***`."""
    match = _SCHEME.match(uri)
    if not match:
        return uri
    rest = uri[match.end() :]
    # Everything up to the last "@" before the query is user info; a password may hold "/" or "@".
    head = re.split(r"[?#]", rest, maxsplit=1)[0]
    at = head.rfind("@")
    if at < 0:
        return uri
    return f"{match.group(0)}***@{rest[at + 1:]}"


def zmq_endpoint(uri: str) -> str:
    """The ZeroMQ endpoint a `zmq+tcp://host:port` or `zmq+ipc:///path` source binds."""
    found = scheme(uri)
    if found not in ZMQ_SCHEMES:
        raise ValueError(f"not a ZeroMQ source URI: {uri!r}")
    return uri[len("zmq+") :]


_TCP = re.compile(r"^tcp://(\[[0-9a-fA-F:.]+\]|[^/:\[\]]+):([^:/]*)$")
_IPC_PATH_MAX = 107
"""A Unix socket path's bytes at most (sun_path is 108 with its NUL): ZeroMQ refuses longer ones."""


def endpoint_problem(endpoint: str, schemes: tuple[str, ...] = ("tcp", "ipc", "inproc")) -> str | None:
    """What ZeroMQ would refuse in an endpoint to bind (`tcp://HOST:PORT`, `ipc:///path`,
    `inproc://name`), in a few words; None when it is well formed. Nothing is opened here."""
    found = scheme(endpoint)
    if found not in schemes:
        names = [f"{s}://" for s in schemes]
        return "must start with " + (", ".join(names[:-1]) + " or " if len(names) > 1 else "") + names[-1]
    rest = endpoint[len(found) + 3 :]
    if found == "tcp":
        match = _TCP.match(endpoint)
        if match is None:
            return "expected tcp://HOST:PORT"
        port = match.group(2)
        if port != "*" and not (port.isdigit() and int(port) <= 65535):
            return f"port {port!r} is not a number from 0 to 65535 (0 or *: any free port)"
        return None
    if not rest:
        return f"expected {found}://" + ("/path" if found == "ipc" else "name")
    if found == "ipc" and len(rest.encode()) > _IPC_PATH_MAX:
        return f"an ipc:// path is at most {_IPC_PATH_MAX} bytes (this one is {len(rest.encode())})"
    return None


def is_loopback(host: str) -> bool:
    """Whether a bind host only reaches this machine (so plain text is no worse than ipc://)."""
    import ipaddress

    if host in ("localhost", "127.0.0.1", "::1", "[::1]"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
