"""CurveZMQ for every tcp link: the zmq output, the ZeroMQ source and their clients (framewire.client).

A server socket gets its key pair from the secret certificate `run_pipeline.py keys` writes
(`NAME.key_secret`); a ZAP handler (pyzmq's ThreadAuthenticator, one per context) then admits the
clients whose public certificates lie in a folder, or any client that knows the server's public
key when no folder is given. A client socket needs the server's public certificate and its own
secret one. Certificates are read once, when the socket is set up.
"""

from __future__ import annotations

from typing import Any

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from framewire.pipeline.errors import FramewireError


def load_secret(path: str, what: str) -> tuple[bytes, bytes]:
    """(public, secret) from a secret certificate; FramewireError naming `what` if it is not one."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise FramewireError(f"{what}: curve key {path}: {exc}") from None
    if secret is None:
        raise FramewireError(f"{what}: {path} holds no secret key (use the .key_secret file)")
    return public, secret


def load_public(path: str, what: str) -> bytes:
    """A public key from a certificate (either file of a pair)."""
    try:
        public, _ = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise FramewireError(f"{what}: curve key {path}: {exc}") from None
    return public


def serve(ctx: zmq.Context, sock: zmq.Socket, secret_key: str, clients_dir: str | None, what: str) -> Any:
    """Make `sock` a CurveZMQ server (call before bind). Returns the started authenticator, which
    the caller stops after closing the socket; only clients in `clients_dir` get through, or any
    client with the server's public key when it is None."""
    public, secret = load_secret(secret_key, what)
    auth = ThreadAuthenticator(ctx)
    auth.start()
    try:
        auth.configure_curve(domain="*", location=clients_dir if clients_dir else zmq.auth.CURVE_ALLOW_ANY)
    except Exception:
        auth.stop()
        raise
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True
    return auth


def connect_as_client(sock: zmq.Socket, server_key: str, client_key: str | None, what: str) -> None:
    """Make `sock` a CurveZMQ client of the server whose public certificate is `server_key`, with
    the key pair of `client_key` (a .key_secret file), or a fresh pair when None. Before connect."""
    server_public = load_public(server_key, what)
    if client_key:
        public, secret = load_secret(client_key, what)
    else:
        public, secret = zmq.curve_keypair()
    sock.curve_serverkey = server_public
    sock.curve_publickey = public
    sock.curve_secretkey = secret


def close(ctx: zmq.Context | None, sock: zmq.Socket | None, auth: Any, linger: int | None = None) -> None:
    """Close a socket served by `serve` in the order that does not hang: the socket (`linger` ms,
    or its own LINGER option), then the ZAP handler's thread, then the context. Any may be None."""
    if sock is not None:
        sock.close(linger=linger)
    if auth is not None:
        auth.stop()
    if ctx is not None:
        ctx.term()
