"""CurveZMQ on the zmq output and the ZeroMQ source: encrypted, and limited to known peers when a
folder is given."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
import zmq
import zmq.auth

from framewire.config import SourceConfig
from framewire.pipeline.errors import FramewireError, SourceError
from framewire.pipeline.wire.publish import Publisher
from framewire.sources.zmq_wire import PushedFrame, ZmqReceiver

pytestmark = pytest.mark.timeout(60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client(
    endpoint: str, server_public: bytes | None, keys: tuple[bytes, bytes] | None, kind: int = zmq.PULL
) -> tuple[zmq.Context, zmq.Socket]:
    """A socket of `kind` connected to `endpoint`, a CurveZMQ client when given the keys."""
    ctx = zmq.Context()
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    if server_public is not None and keys is not None:
        sock.curve_serverkey = server_public
        sock.curve_publickey, sock.curve_secretkey = keys
    sock.connect(endpoint)
    return ctx, sock


def receives(sock: zmq.Socket, publisher: Publisher, patience_s: float) -> bool:
    """Whether the client gets a message pushed to it: push waits for a peer that completed its
    handshake (at most `patience_s`); a refused client never becomes one, however long it is given."""
    deadline = time.monotonic() + patience_s
    ok = publisher.send("cam", {"v": 1, "seq": 0}, should_stop=lambda: time.monotonic() > deadline)
    return ok and sock.poll(10_000) != 0


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
            try:
                assert receives(sock, publisher, 30.0 if expected else 1.0) is expected
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


# --- the ZeroMQ source ------------------------------------------------------------------------


def frame_message(value: int) -> list[bytes]:
    header = {"width": 4, "height": 2, "format": "bgr24", "pts": value}
    return [json.dumps(header).encode(), bytes([value]) * 24]


def test_the_zmq_source_takes_frames_only_from_known_producers(tmp_path: Path) -> None:
    server_public_file, server_secret_file = zmq.auth.create_certificates(tmp_path, "source")
    allowed = tmp_path / "producers"
    allowed.mkdir()
    _, known_secret_file = zmq.auth.create_certificates(allowed, "camera")
    server_public, _ = zmq.auth.load_certificate(server_public_file)
    port = free_port()
    receiver = ZmqReceiver(
        "cam", f"tcp://127.0.0.1:{port}", curve_secret_key=str(server_secret_file), curve_clients_dir=str(allowed)
    )
    receiver.open()
    endpoint = f"tcp://127.0.0.1:{port}"
    try:
        for value, keys, expected in (
            (1, zmq.auth.load_certificate(known_secret_file), True),
            (2, zmq.curve_keypair(), False),  # right server key, unknown producer
            (3, None, False),  # plain text
        ):
            ctx, sock = client(endpoint, server_public if keys else None, keys, zmq.PUSH)  # type: ignore[arg-type]
            try:
                # An unauthorised PUSH never completes its handshake, so its send just waits queued.
                sock.send_multipart(frame_message(value), zmq.NOBLOCK) if expected else _try_send(sock, value)
                got = receiver.receive(1500)
                if expected:
                    assert isinstance(got, PushedFrame) and got.pts == value
                else:
                    assert got is None
            finally:
                sock.close()
                ctx.term()
    finally:
        receiver.close()


def _try_send(sock: zmq.Socket, value: int) -> None:
    try:
        sock.send_multipart(frame_message(value), zmq.NOBLOCK)
    except zmq.Again:  # no completed connection to queue on: refused, as expected
        pass


def test_the_zmq_source_config_takes_curve_keys_only_for_zmq(tmp_path: Path) -> None:
    base = {"id": "cam", "curve_secret_key": "k.key_secret"}
    SourceConfig.model_validate({**base, "uri": "zmq+tcp://127.0.0.1:5555"})
    with pytest.raises(ValueError, match="only for ZeroMQ sources"):
        SourceConfig.model_validate({**base, "uri": "clip.mp4"})
    with pytest.raises(ValueError, match="needs curve_secret_key"):
        SourceConfig.model_validate({"id": "cam", "uri": "zmq+tcp://127.0.0.1:5555", "curve_clients": "dir"})


def test_a_missing_source_key_is_a_source_error(tmp_path: Path) -> None:
    receiver = ZmqReceiver("cam", f"ipc://{tmp_path}/s.sock", curve_secret_key=str(tmp_path / "none.key_secret"))
    with pytest.raises(SourceError, match="source cam: curve key"):
        receiver.open()
