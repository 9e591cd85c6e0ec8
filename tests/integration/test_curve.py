"""CurveZMQ on the zmq output: encrypted, and limited to known clients when a folder is given."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import zmq
import zmq.auth

from pipeline.errors import FramewireError
from pipeline.publish import Publisher

pytestmark = pytest.mark.timeout(60)


def client(endpoint: str, server_public: bytes | None, keys: tuple[bytes, bytes] | None) -> tuple[zmq.Context, zmq.Socket]:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.LINGER, 0)
    if server_public is not None and keys is not None:
        sock.curve_serverkey = server_public
        sock.curve_publickey, sock.curve_secretkey = keys
    sock.connect(endpoint)
    return ctx, sock


def receives(sock: zmq.Socket, publisher: Publisher) -> bool:
    ok = publisher.send("cam", {"v": 1, "seq": 0}, should_stop=lambda: True)
    return ok and sock.poll(1000) != 0


def test_only_known_clients_with_the_server_key_get_messages(tmp_path: Path) -> None:
    server_public_file, server_secret_file = zmq.auth.create_certificates(tmp_path, "server")
    allowed = tmp_path / "clients"
    allowed.mkdir()
    known_public_file, known_secret_file = zmq.auth.create_certificates(allowed, "known")
    server_public, _ = zmq.auth.load_certificate(server_public_file)
    endpoint = f"ipc://{tmp_path}/curve.sock"
    publisher = Publisher(
        endpoint, "push", curve_secret_key=str(server_secret_file), curve_clients_dir=str(allowed)
    )
    publisher.open()
    try:
        for keys, expected in (
            (zmq.auth.load_certificate(known_secret_file), True),
            (zmq.curve_keypair(), False),  # right server key, unknown client
            (None, False),  # plain text
        ):
            ctx, sock = client(endpoint, server_public if keys else None, keys)  # type: ignore[arg-type]
            time.sleep(0.2)
            try:
                assert receives(sock, publisher) is expected
            finally:
                sock.close()
                ctx.term()
    finally:
        publisher.close()


def test_a_public_certificate_is_not_a_secret_key(tmp_path: Path) -> None:
    public_file, _ = zmq.auth.create_certificates(tmp_path, "server")
    publisher = Publisher(f"ipc://{tmp_path}/x.sock", "pub", curve_secret_key=str(public_file))
    with pytest.raises(FramewireError, match="no secret key"):
        publisher.open()
    publisher.close()
