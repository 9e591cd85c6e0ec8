"""The ZeroMQ source's message checks (sources.zmq_wire): every bad message is refused with a
bounded reason, before anything is allocated for it; nothing else is ever raised."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from framewire.pipeline.errors import SourceError
from framewire.sources.zmq_wire import EOS, REASONS, PushedFrame, Rejected, ZmqReceiver, jpeg_size, parse

pytestmark = pytest.mark.timeout(60)


def header(**fields: Any) -> bytes:
    return json.dumps({"width": 4, "height": 2, "format": "bgr24", **fields}).encode()


def jpeg(width: int, height: int, *, progressive: bool = False) -> bytes:
    params = [cv2.IMWRITE_JPEG_PROGRESSIVE, 1] if progressive else []
    ok, data = cv2.imencode(".jpg", np.zeros((height, width, 3), np.uint8), params)
    assert ok
    return data.tobytes()


def test_a_good_bgr24_frame() -> None:
    got = parse([header(pts=7), bytes(4 * 2 * 3)])
    assert got == PushedFrame(4, 2, "bgr24", 7, bytes(24))


def test_a_good_jpeg_frame_and_eos() -> None:
    got = parse([header(width=40, height=30, format="jpeg"), jpeg(40, 30)])
    assert isinstance(got, PushedFrame) and (got.width, got.height, got.pts) == (40, 30, None)
    assert parse([b'{"eos": true}']) == EOS


@pytest.mark.parametrize(
    ("parts", "reason"),
    [
        ([], "parts"),
        ([header(), bytes(24), b""], "parts"),
        ([header()], "parts"),
        ([b'{"eos": true}', b"x"], "parts"),
        ([b"\xff\xfe", bytes(24)], "header"),
        ([b"{not json", bytes(24)], "header"),
        ([b"[4, 2]", bytes(24)], "header"),
        ([b"[" * 3000 + b"]" * 3000, bytes(24)], "header"),  # over the header limit
        ([b"[" * 2000 + b"]" * 2000, bytes(24)], "header"),  # nested too deep for the parser
        ([header(width=0), bytes(24)], "size"),
        ([header(width=100_000, height=100_000), bytes(24)], "size"),
        ([header(height=2.0), bytes(24)], "size"),
        ([header(width=False), bytes(24)], "size"),
        ([header(), bytes(23)], "size"),
        ([header(format="jpeg", width=40, height=30), jpeg(40, 31)], "size"),
        ([header(format="rgb"), bytes(24)], "format"),
        ([header(format=None), bytes(24)], "format"),
        ([header(pts=-1), bytes(24)], "pts"),
        ([header(pts=1.5), bytes(24)], "pts"),
        ([header(pts=2**70), bytes(24)], "pts"),
        ([header(format="jpeg"), b"GIF89a...."], "payload"),
        ([header(format="jpeg"), b"\xff\xd8\xff\xda\x00\x02"], "payload"),  # scan before a frame header
    ],
)
def test_bad_messages_are_rejected_with_a_reason(parts: list[bytes], reason: str) -> None:
    with pytest.raises(Rejected) as caught:
        parse(parts)
    assert caught.value.reason == reason


def test_jpeg_size_reads_the_frame_header_without_decoding() -> None:
    assert jpeg_size(jpeg(33, 17)) == (33, 17)
    assert jpeg_size(jpeg(64, 48, progressive=True)) == (64, 48)
    # A tiny file that claims a 60000 x 60000 picture is measured, never decoded.
    bomb = b"\xff\xd8" + b"\xff\xc0\x00\x11\x08" + (60000).to_bytes(2, "big") * 2 + bytes(12)
    assert jpeg_size(bomb) == (60000, 60000)
    with pytest.raises(Rejected, match="size"):
        parse([header(format="jpeg", width=8000, height=8000), bomb])
    assert jpeg_size(b"") is None and jpeg_size(b"\xff\xd8\x00") is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200), min_size=0, max_size=4))
def test_random_bytes_are_only_ever_rejected(parts: list[bytes]) -> None:
    try:
        parse(parts)
    except Rejected as exc:
        assert exc.reason in REASONS


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["width", "height", "format", "pts", "eos", "x"]),
        st.one_of(st.integers(-10, 10**12), st.text(max_size=5), st.booleans(), st.none(), st.floats()),
    ),
    st.binary(max_size=64),
)
def test_random_headers_are_only_ever_rejected(fields: dict[str, Any], payload: bytes) -> None:
    try:
        got = parse([json.dumps(fields).encode(), payload])
    except Rejected as exc:
        assert exc.reason in REASONS
    else:
        assert isinstance(got, PushedFrame) and len(got.data) == got.width * got.height * 3


def test_receiver_counts_bad_messages_and_returns_good_ones(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/in.sock"
    receiver = ZmqReceiver("z", endpoint)
    receiver.open()
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(endpoint)
    try:
        push.send_multipart([b"junk"])
        push.send_multipart([header(), bytes(5)])
        push.send_multipart([header(pts=1), bytes(24)])
        got = receiver.receive(5000)
        assert isinstance(got, PushedFrame) and got.pts == 1
        assert receiver.rejected == {"header": 1, "size": 1}
        assert receiver.receive(50) is None
        push.send_multipart([b'{"eos": true}'])
        assert receiver.receive(5000) == EOS
    finally:
        push.close(linger=0)
        ctx.term()
        receiver.close()


def test_receiver_that_cannot_bind_says_which_source() -> None:
    first = ZmqReceiver("a", "tcp://127.0.0.1:0")
    first.open()
    assert first._sock is not None
    taken = first._sock.getsockopt_string(zmq.LAST_ENDPOINT)  # the port it was given
    try:
        with pytest.raises(SourceError, match=rf"^source b: cannot bind {taken}: Address already in use"):
            ZmqReceiver("b", taken).open()
    finally:
        first.close()
