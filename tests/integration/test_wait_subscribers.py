"""A `pub` output's `wait_subscribers` against real sockets: the first message waits for the
subscriptions (counted from XPUB's subscription messages, each subscriber once per topic, those that
leave taken off), a timeout warns once and sends anyway, and the zmq output stage waits in `start`,
before its worker says ready; a client counts what it missed at the start of a stream."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
import zmq

from framewire.client import Client, EndOfStream, FrameRecord
from framewire.config import ZmqOutput
from framewire.pipeline.frame import Frame, StageContext
from framewire.pipeline.wire.publish import Publisher
from framewire.stages.outputs.sinks import ZmqSink

pytestmark = pytest.mark.timeout(60)


def frame_header(seq: int) -> dict[str, object]:
    return {"v": 2, "source": "cam", "seq": seq, "pts": seq, "time": seq / 25, "width": 8, "height": 6,
            "results": {}, "latency_ms": {}}  # fmt: skip


def subscriber(ctx: zmq.Context, endpoint: str, *topics: str) -> zmq.Socket:
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    for topic in topics:
        sock.setsockopt_string(zmq.SUBSCRIBE, topic)
    sock.connect(endpoint)
    return sock


def count_until(publisher: Publisher, expected: int, timeout: float = 20) -> int:
    """The subscription count once it reaches `expected` (or what it is at the deadline)."""
    deadline = time.monotonic() + timeout
    while publisher.count_subscriptions(100) != expected and time.monotonic() < deadline:
        pass
    return publisher.subscriptions


def test_the_first_message_waits_for_the_subscriber(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/pub.sock"
    publisher = Publisher(endpoint, "pub", wait_subscribers=1, wait_timeout_s=50)
    publisher.open()
    waited: list[bool] = []
    waiter = threading.Thread(target=lambda: waited.append(publisher.wait_for_subscribers()))
    try:
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive()  # nobody has subscribed: it can only be waiting
        with Client(endpoint) as client:
            waiter.join(30)
            assert waited == [True] and publisher.subscriptions == 1
            publisher.send("cam", frame_header(0))  # the very first message: no retry, no sleep
            record = client.receive(timeout=10)
            assert isinstance(record, FrameRecord) and record.seq == 0 and record.header["msg"] == 0
            assert client.lost == client.missed_at_start == 0
    finally:
        waiter.join(60)
        publisher.close()


def test_each_subscription_counts_and_a_subscriber_that_leaves_is_taken_off(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/pub.sock"
    publisher = Publisher(endpoint, "pub", wait_subscribers=2, wait_timeout_s=50)
    publisher.open()
    ctx = zmq.Context()
    sockets: list[zmq.Socket] = []
    try:
        # Two subscribers of the same topic both count (XPUB_VERBOSER), a third subscribes to two topics.
        first, second = subscriber(ctx, endpoint, ""), subscriber(ctx, endpoint, "")
        sockets += [first, second]
        assert publisher.wait_for_subscribers() and count_until(publisher, 2) == 2
        both = subscriber(ctx, endpoint, "cam1", "cam2")
        sockets.append(both)
        assert count_until(publisher, 4) == 4
        first.close()
        assert count_until(publisher, 3) == 3
        both.close()
        assert count_until(publisher, 1) == 1
        second.close()
        assert count_until(publisher, 0) == 0
    finally:
        for sock in sockets:
            sock.close(linger=0)
        publisher.close()
        ctx.term()


def test_without_subscribers_it_warns_once_and_sends_anyway(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    endpoint = f"ipc://{tmp_path}/pub.sock"
    publisher = Publisher(endpoint, "pub", wait_subscribers=2, wait_timeout_s=0.3)
    publisher.open()
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="framewire.pipeline.wire.publish"):
            assert publisher.wait_for_subscribers() is False
        assert 0.3 <= time.monotonic() - started < 10
        assert [r.getMessage() for r in caplog.records] == [
            f"zmq output {endpoint}: 0 of 2 subscriber(s) after 0.3 s; sending anyway"
        ]
        assert publisher.send("cam", frame_header(0)) and publisher.sent == 1
    finally:
        publisher.close()


def test_push_and_plain_pub_do_not_wait(tmp_path: Path) -> None:
    for mode in ("push", "pub"):
        publisher = Publisher(f"ipc://{tmp_path}/{mode}.sock", mode, wait_subscribers=0 if mode == "pub" else 1)
        publisher.open()
        try:
            started = time.monotonic()
            assert publisher.wait_for_subscribers() and time.monotonic() - started < 1
        finally:
            publisher.close()


def test_a_late_client_counts_the_messages_before_its_first(tmp_path: Path) -> None:
    """A client that connects after the stream started: what went before its first message is lost,
    and said to be missed at the start (the stream's numbers start at 0)."""
    endpoint = f"ipc://{tmp_path}/pub.sock"
    publisher = Publisher(endpoint, "pub")
    publisher.open()
    try:
        for seq in range(3):  # nobody is there: gone for everyone
            publisher.send("cam", frame_header(seq), starts_stream=seq == 0)
        with Client(endpoint) as client:
            seq, first = 3, None
            deadline = time.monotonic() + 30
            while first is None and time.monotonic() < deadline:  # until its subscription is in
                publisher.send("cam", frame_header(seq))
                seq += 1
                first = client.receive(timeout=0.05)
            assert isinstance(first, FrameRecord) and first.seq >= 3
            assert first.header["msg"] == first.seq and "msg_start" not in first.header
            assert client.missed_at_start == client.lost == first.seq
            assert client.lost_by_source == {"cam": first.seq}
            # Everything after its first message arrives: nothing more is counted.
            while client.receive(timeout=0.5) is not None:
                pass
            publisher.send("cam", {"v": 2, "source": "cam", "eos": True})
            assert isinstance(client.receive(timeout=10), EndOfStream)
            assert client.lost == client.missed_at_start == first.seq
    finally:
        publisher.close()


def test_a_reused_source_id_counts_from_its_new_streams_start(tmp_path: Path) -> None:
    """A source id used again (its first stream ended) keeps numbering on its topic; its new stream
    says where it started (`msg_start`), so a client that joined between the streams misses nothing,
    and one that joined later counts only the new stream's messages before its first."""
    endpoint = f"ipc://{tmp_path}/pub.sock"
    sink = ZmqSink(ZmqOutput(kind="zmq", endpoint=endpoint, wait_subscribers=1, wait_subscribers_timeout_s=50))
    early = Client(endpoint)
    try:
        sink.start(StageContext("output0.zmq", 0))  # returns once the early client's subscription is in
        for seq in range(3):
            list(sink.process(Frame("cam", seq, seq, seq / 25, 8, 6)))
        list(sink.flush("cam"))
        got = [early.receive(timeout=10) for _ in range(4)]
        assert [m.header["msg"] for m in got if m is not None] == [0, 1, 2, 3] and isinstance(got[3], EndOfStream)
        assert all("msg_start" not in m.header for m in got if m is not None)
        with Client(endpoint) as between:
            assert count_until(sink.publisher, 2) == 2
            list(sink.process(Frame("cam", 0, 0, 0.0, 8, 6)))  # the second stream of `cam`
            record = between.receive(timeout=10)
            assert isinstance(record, FrameRecord) and record.header["msg"] == record.header["msg_start"] == 4
            assert between.lost == between.missed_at_start == 0
            late = Client(endpoint)
            try:
                assert count_until(sink.publisher, 3) == 3
                list(sink.process(Frame("cam", 1, 1, 0.04, 8, 6)))
                later = late.receive(timeout=10)
                assert isinstance(later, FrameRecord) and later.header["msg"] == 5 and later.header["msg_start"] == 4
                assert late.lost == late.missed_at_start == 1  # the new stream's first frame, not the old stream
            finally:
                late.close()
        assert [early.receive(timeout=10) is not None for _ in range(2)] == [True, True] and early.lost == 0
    finally:
        early.close()
        sink.stop()
