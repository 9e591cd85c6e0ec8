"""framewire.client against real sockets: typed records, a slow subscriber's losses counted exactly,
reconnects to a restarted publisher, CurveZMQ."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import zmq.auth

from framewire.client import Client, EndOfStream, FrameRecord, KeyRefused, ProtocolError, SegmentClosed, parse
from framewire.pipeline.wire.publish import Publisher

pytestmark = pytest.mark.timeout(120)

HEADER = {"v": 2, "source": "cam", "seq": 3, "pts": 3000, "time": 0.12, "width": 8, "height": 6,
          "results": {"detections": []}, "latency_ms": {"total": 4.0}}  # fmt: skip


def frame_header(seq: int) -> dict[str, object]:
    return {**HEADER, "seq": seq, "pts": seq * 1000}


def first(client: Client, publisher: Publisher, topic: str = "cam") -> FrameRecord:
    """Frame 0, sent by another thread once the client's subscription is in (the publisher's
    `wait_subscribers`) while the client waits in `receive`, as a user's would: a SUB socket sends
    its subscriptions again after a reconnect only when its owner calls it."""
    waited: list[bool] = []

    def send() -> None:
        waited.append(publisher.wait_for_subscribers())
        publisher.send(topic, frame_header(0))

    sender = threading.Thread(target=send)
    sender.start()
    try:
        message = client.receive(timeout=30)
    finally:
        sender.join(60)
    assert waited == [True] and isinstance(message, FrameRecord)
    return message


def test_records_are_typed() -> None:
    _, jpeg = cv2.imencode(".jpg", np.full((6, 8, 3), 200, np.uint8))
    embeddings = np.arange(6, dtype=np.float32).reshape(2, 3)
    header = {**HEADER, "msg": 4, "image": {"format": "jpeg", "bytes": len(jpeg)},
              "arrays": [{"name": "embeddings.reid", "dtype": "float32", "shape": [2, 3]}]}  # fmt: skip
    record = parse([b"cam", json.dumps(header).encode(), jpeg.tobytes(), embeddings.tobytes()], decode_images=True)
    assert isinstance(record, FrameRecord)
    assert (record.source, record.seq, record.pts, record.width, record.results) == ("cam", 3, 3000, 8, {"detections": []})
    assert record.pixels is not None and record.pixels.shape == (6, 8, 3) and abs(int(record.pixels.mean()) - 200) < 3
    assert record.image() is record.pixels and record.header["msg"] == 4
    assert np.array_equal(record.arrays["embeddings.reid"], embeddings)
    # Arrays without a JPEG come right after the header.
    no_image = {**HEADER, "arrays": header["arrays"]}
    record = parse([b"cam", json.dumps(no_image).encode(), embeddings.tobytes()])
    assert isinstance(record, FrameRecord) and record.jpeg is None and record.arrays["embeddings.reid"].shape == (2, 3)
    assert parse([b"cam", b'{"v": 2, "source": "cam", "eos": true}']) == EndOfStream("cam")
    event = {"v": 2, "source": "cam", "event": "segment", "output": "output0.video_file", "path": "out/cam-3.mp4",
             "index": 3, "start": "2026-01-02T03:04:05.000000Z", "first_pts": 0, "frames": 1500,
             "duration_s": 60.0, "bytes": 123, "deleted": ["out/cam-0.mp4"]}  # fmt: skip
    closed = parse([b"cam", json.dumps(event).encode()])
    assert isinstance(closed, SegmentClosed) and (closed.index, closed.deleted) == (3, ("out/cam-0.mp4",))
    bad_arrays = json.dumps(no_image).encode()
    for bad in ([b"cam"], [b"cam", b"not json"], [b"cam", b"[1]"], [b"cam", b'{"source": "cam", "seq": "x"}'],
                [b"cam", bad_arrays], [b"cam", bad_arrays, b"short"], [b"cam", json.dumps(HEADER).encode(), b"extra"]):
        with pytest.raises(ProtocolError):
            parse(bad)


def test_a_slow_subscriber_counts_exactly_what_it_lost(tmp_path: Path) -> None:
    """A PUB socket drops, for that subscriber alone, whatever is over the marks, and says nothing:
    the numbers on each topic tell the subscriber how many it missed."""
    endpoint = f"ipc://{tmp_path}/pub.sock"
    publisher = Publisher(endpoint, "pub", hwm=5, wait_subscribers=1, wait_timeout_s=60)
    publisher.open()
    try:
        with Client(endpoint, hwm=5) as client:
            assert first(client, publisher).seq == 0
            payload = bytes(256 * 1024)  # large: the socket buffers hold few of them
            image = {"image": {"format": "jpeg", "bytes": len(payload)}}
            sent = 1
            for seq in range(1, 300):  # while the subscriber is busy elsewhere
                publisher.send("cam", {**frame_header(seq), **image}, payload)
                sent += 1
            received = 1
            while client.receive(timeout=1.0) is not None:
                received += 1
            assert client.bad == 0
            publisher.send("cam", {"v": 2, "source": "cam", "eos": True})  # the end, once it caught up
            sent += 1
            assert isinstance(client.receive(timeout=10), EndOfStream)
            received += 1
            print(f"slow subscriber: sent {sent}, received {received}, lost {client.lost}")
            assert client.lost > 0 and received < sent
            assert received + client.lost == sent  # every message is either here or counted
            assert client.lost_by_source == {"cam": client.lost} and client.missed_at_start == 0
    finally:
        publisher.close()


def test_reconnects_to_a_restarted_publisher_without_counting_a_loss(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/pub.sock"
    with Client(endpoint, reconnect_ms=(20, 200)) as client:  # started before the daemon
        for _ in range(2):
            publisher = Publisher(endpoint, "pub", wait_subscribers=1, wait_timeout_s=60)
            publisher.open()
            try:
                assert first(client, publisher).seq == 0
                publisher.send("cam", frame_header(1))
                record = client.receive(timeout=10)
                assert isinstance(record, FrameRecord) and record.seq == 1
            finally:
                publisher.close()
        assert client.lost == 0  # numbers from 0 again: a restart, not a loss


def test_curve_keys(tmp_path: Path) -> None:
    server_public, server_secret = zmq.auth.create_certificates(tmp_path, "server")
    allowed = tmp_path / "clients"
    allowed.mkdir()
    _, known_secret = zmq.auth.create_certificates(allowed, "known")
    endpoint = f"ipc://{tmp_path}/curve.sock"
    publisher = Publisher(endpoint, "pub", curve_secret_key=str(server_secret), curve_clients_dir=str(allowed),
                          wait_subscribers=1, wait_timeout_s=60)  # fmt: skip
    publisher.open()
    try:
        with Client(endpoint, server_key=str(server_public), client_key=str(known_secret)) as known:
            assert first(known, publisher).source == "cam"
        with Client(endpoint, server_key=str(server_public)) as stranger:  # a fresh pair, not in the folder
            publisher.send("cam", frame_header(0))
            assert stranger.receive(timeout=1.0) is None
    finally:
        publisher.close()


def test_a_watched_client_knows_what_its_connection_went_through(tmp_path: Path) -> None:
    """Nothing listening; a publisher; a server that refuses the key: the link says which, and a
    refused key raises at once (ZeroMQ never connects again after it, so waiting would be for ever)."""
    with Client(f"ipc://{tmp_path}/nobody.sock", watch=True) as alone:
        assert alone.receive(timeout=0.3) is None
        assert alone.link is not None and alone.link.update().connected == 0
    publisher = Publisher(f"ipc://{tmp_path}/plain.sock", "pub")
    publisher.open()
    try:
        with Client(publisher.endpoint, topics=("door",), watch=True) as client:
            deadline = time.monotonic() + 20
            while client.link.update().handshakes == 0 and time.monotonic() < deadline:  # type: ignore[union-attr]
                publisher.send("cam", frame_header(0))
                assert client.receive(timeout=0.05) is None  # another topic
            assert client.link.state.handshakes >= 1 and client.link.state.refused == 0  # type: ignore[union-attr]
    finally:
        publisher.close()
    server_public, server_secret = zmq.auth.create_certificates(tmp_path, "server")
    (tmp_path / "clients").mkdir()
    publisher = Publisher(f"ipc://{tmp_path}/curve.sock", "pub", curve_secret_key=str(server_secret),
                          curve_clients_dir=str(tmp_path / "clients"))  # fmt: skip
    publisher.open()
    try:
        with Client(publisher.endpoint, server_key=str(server_public), watch=True) as stranger:
            started = time.monotonic()
            with pytest.raises(KeyRefused, match=r"curve.sock: the server refused our CurveZMQ key$"):
                stranger.receive(timeout=30)
            assert time.monotonic() - started < 20
    finally:
        publisher.close()
