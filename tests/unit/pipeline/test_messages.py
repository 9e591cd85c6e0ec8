from __future__ import annotations

import random

import msgpack
import numpy as np
import pytest

from framewire.pipeline.wire import messages as msg

pytestmark = pytest.mark.timeout(30)


def test_round_trip_with_tensors() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.zeros((0,), dtype=np.uint8)
    parts = msg.encode({"type": msg.RESULT, "source": "cam0", "seq": 7, "slot": 2}, {"a": a, "b": b})
    header, tensors = msg.decode([bytes(p) for p in parts])
    assert header["source"] == "cam0" and header["seq"] == 7 and header["v"] == msg.WIRE_VERSION
    np.testing.assert_array_equal(tensors["a"], a)
    assert tensors["b"].shape == (0,)


def _header(**fields: object) -> bytes:
    return msgpack.packb({"v": 1, "type": msg.WORK, **fields})


@pytest.mark.parametrize(
    "frames, reason",
    [
        ([], "empty"),
        ([b"\xc1garbage"], "not msgpack"),
        ([msgpack.packb([1, 2])], "not a map"),
        ([msgpack.packb({"v": 9, "type": "work"})], "version"),
        ([msgpack.packb({"v": 1, "type": "rm -rf"})], "unknown message type"),
        ([_header(seq="1")], "seq must be int"),
        ([_header(tensors=[["x", "float32", [2]]])], "0 buffers for 1 tensors"),
        ([_header(tensors=[["x", "object", [1]]]), b"\x00" * 8], "not allowed"),
        ([_header(tensors=[["x", "float32", [3]]]), b"\x00" * 8], "bytes for shape"),
        ([_header(tensors=[["x", "uint8", [2**20, 2**20]]]), b""], "over the limit"),
        ([_header(tensors=[["x", "uint8", [-1]]]), b""], "bad shape"),
        ([_header(tensors=[["", "uint8", [1]]]), b"\x00"], "name"),
    ],
)
def test_bad_messages_are_rejected_with_a_reason(frames: list[bytes], reason: str) -> None:
    with pytest.raises(msg.WireError, match=reason):
        msg.decode(frames)


def test_random_bytes_never_crash_the_decoder() -> None:
    rng = random.Random(1234)
    for _ in range(2000):
        parts = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64))) for _ in range(rng.randint(1, 3))]
        try:
            msg.decode(parts)
        except msg.WireError:
            pass


def test_receive_copies_the_identity_and_header_and_leaves_the_tensors_in_place() -> None:
    """Off a ROUTER: the peer's identity and the header as bytes, each tensor's buffer a zmq.Frame
    the array is a view of; a message of one frame comes back as it is, with no wait for a second."""
    import zmq

    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    try:
        router.bind("inproc://receive-test")
        dealer.setsockopt(zmq.IDENTITY, b"w1")
        dealer.connect("inproc://receive-test")
        big = np.arange(100_000, dtype=np.uint8)
        msg.send(dealer, msg.encode({"type": msg.RESULT, "source": "cam0", "seq": 1, "slot": 0}, {"big": big}))
        assert router.poll(5000)
        parts = msg.receive(router, prefix=1)
        assert parts[0] == b"w1" and isinstance(parts[1], bytes) and isinstance(parts[2], zmq.Frame)
        header, tensors = msg.decode(parts[1:])
        assert header["seq"] == 1
        np.testing.assert_array_equal(tensors["big"], big)
        assert not tensors["big"].flags.owndata  # a view of the received frame, not a copy

        router.send_multipart([b"w1", b"only a header"])
        assert dealer.poll(5000)
        assert msg.receive(dealer) == [b"only a header"]
    finally:
        dealer.close(linger=0)
        router.close(linger=0)
        ctx.term()
