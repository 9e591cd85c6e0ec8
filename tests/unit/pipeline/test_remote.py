"""Frames that travel inline to a worker on another host (pipeline.remote, Frame.inline): the
regions a worker gets and gives back, and the checks on everything a remote peer sends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from framewire.pipeline.wire import messages as msg
from framewire.pipeline.wire import remote
from framewire.pipeline.frame import Frame
from framewire.pipeline.wire.framepool import PoolLayout

pytestmark = pytest.mark.timeout(30)

LAYOUT = PoolLayout.plan(
    "framewire-1-1-cam", 4, {"image": ((6, 8, 3), "uint8"), "input": ((1, 3, 4, 4), "float32"), "output": ((6, 8, 3), "uint8")}
)


def work_header(**extra: Any) -> dict[str, Any]:
    return {"type": msg.WORK, "source": "cam", "seq": 3, "slot": 2, "pool": LAYOUT.to_wire(), "w": 8, "h": 6,
            "ts": {"decode": [1.0, 2.0]}, **extra}  # fmt: skip


def image(value: int = 7) -> np.ndarray:
    return np.full((6, 8, 3), value, np.uint8)


def over_the_wire(header: dict[str, Any], tensors: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Encode and decode as the sockets would: received buffers are read-only."""
    parts = [bytes(memoryview(p)) if not isinstance(p, bytes) else p for p in msg.encode(header, tensors)]
    return msg.decode(parts)


def test_an_inline_frame_reads_what_came_and_writes_fresh_buffers() -> None:
    header, tensors = over_the_wire(work_header(), {"region:image": image(), "scores": np.ones(3, np.float32)})
    plain, regions = remote.split_regions(tensors)
    assert set(plain) == {"scores"} and set(regions) == {"image"}
    frame = Frame.from_wire(header, plain, None)
    frame.inline = remote.inline_regions(header, regions, reads=["image"], writes=["input"])
    assert frame.pool is None
    assert frame.has_region("image") and frame.has_region("input") and not frame.has_region("output")
    assert (frame.region("image") == 7).all()
    assert not frame.region("image").flags.writeable  # read, not written: no copy was made
    written = frame.region("input")
    assert written.shape == (1, 3, 4, 4) and written.dtype == np.float32 and not written.any()
    written[...] = 0.5  # writable
    with pytest.raises(RuntimeError, match="region 'output' did not come with it"):
        frame.region("output")


def test_a_region_the_stage_reads_and_writes_is_made_writable() -> None:
    header, tensors = over_the_wire(work_header(), {"region:image": image()})
    _, regions = remote.split_regions(tensors)
    inline = remote.inline_regions(header, regions, reads=["image"], writes=["image"])
    inline["image"][0, 0, 0] = 1
    assert inline["image"][0, 0, 0] == 1


def test_a_pool_frame_is_unchanged() -> None:
    frame = Frame(source_id="cam", seq=0, pts=0, time_s=0.0, width=8, height=6)
    assert frame.inline is None and not frame.has_region("image")
    with pytest.raises(RuntimeError, match="no frame pool"):
        frame.region("image")


@pytest.mark.parametrize(
    ("regions", "match"),
    [
        ({"image": np.zeros((6, 8, 3), np.float32)}, "the pool holds uint8"),
        ({"image": np.zeros((8, 6, 3), np.uint8)}, "the pool holds"),
        ({"output": np.zeros((6, 8, 3), np.uint8)}, "not one this stage may send"),
        ({"secret": np.zeros(1, np.uint8)}, "not one this stage may send"),
    ],
)
def test_received_regions_must_fit_the_pool(regions: dict[str, np.ndarray], match: str) -> None:
    with pytest.raises(msg.WireError, match=match):
        remote.inline_regions(work_header(), regions, reads=["image"], writes=["input"])


def test_a_work_without_a_pool_layout_is_refused() -> None:
    with pytest.raises(msg.WireError, match="pool layout"):
        remote.inline_regions({"type": msg.WORK}, {}, reads=["image"], writes=[])
    with pytest.raises(msg.WireError, match="pool layout"):
        remote.inline_regions({"pool": {"name": "x", "regions": 5}}, {}, reads=["image"], writes=[])


def test_a_result_changes_only_what_a_stage_may_change() -> None:
    old = work_header(meta={"scale": 1.0})
    old.pop("type")
    new = {
        "type": msg.RESULT, "source": "cam", "seq": 3, "slot": 0, "pool": {"name": "elsewhere"},
        "meta": {"scale": 0.5}, "result": {"faces": []},
        "ts": {"decode": [0.0, 0.0], "preprocess": [3.0, 4.0]},
    }  # fmt: skip
    written = np.ones((1, 3, 4, 4), np.float32)
    header, plain, regions = remote.accept_result(
        old, new, {"region:input": written, "x": np.zeros(2)}, LAYOUT, {"input"}, "preprocess"
    )
    assert header["slot"] == 2 and header["pool"] == LAYOUT.to_wire()  # the hub's own
    assert header["meta"] == {"scale": 0.5} and header["result"] == {"faces": []}
    assert header["ts"] == {"decode": [1.0, 2.0], "preprocess": [3.0, 4.0]}
    assert set(plain) == {"x"} and set(regions) == {"input"}


def test_a_fused_stage_brings_back_its_members_spans_and_no_other() -> None:
    # The outputs show the composited image only when the composite span is there (record.py).
    spans = {"preprocess": [1.0, 2.0], "infer": [2.0, 3.0], "composite": [3.0, 4.0], "decode": [9.0, 9.0]}
    header, _, _ = remote.accept_result(
        work_header(), {"ts": spans}, {}, LAYOUT, {"output"}, "infer", ("preprocess", "infer", "composite")
    )
    assert header["ts"] == {"decode": [1.0, 2.0], **{k: v for k, v in spans.items() if k != "decode"}}
    with pytest.raises(msg.WireError, match=r"ts.composite must be \[start, end\]"):
        remote.accept_result(work_header(), {"ts": {"composite": [1]}}, {}, LAYOUT, set(), "infer", ("composite",))


@pytest.mark.parametrize(
    ("new", "tensors", "match"),
    [
        ({"meta": [1, 2]}, {}, "meta must be a map"),
        ({"error": 5}, {}, "error must be a string"),
        ({"ts": {"infer": ["a", "b"]}}, {}, r"ts.infer must be \[start, end\]"),
        ({"ts": {"infer": [1.0]}}, {}, r"ts.infer must be \[start, end\]"),
        ({}, {"region:input": np.zeros((1, 3, 4, 4), np.float32)}, "not one this stage may send"),
        ({}, {"region:output": np.zeros((6, 8), np.uint8)}, "the pool holds"),
    ],
)
def test_a_bad_result_is_refused(new: dict[str, Any], tensors: dict[str, np.ndarray], match: str) -> None:
    with pytest.raises(msg.WireError, match=match):
        remote.accept_result(work_header(), new, tensors, LAYOUT, {"output"}, "infer")


@pytest.mark.parametrize(
    ("ready", "match"),
    [
        ({"stage": "decode", "credits": 2, "inline": True}, "not one of this job's stages"),
        ({"stage": 5, "credits": 2, "inline": True}, "not one of this job's stages"),
        ({"stage": "infer", "credits": 0, "inline": True}, "credits must be"),
        ({"stage": "infer", "credits": "2", "inline": True}, "credits must be"),
        ({"stage": "infer", "credits": True, "inline": True}, "credits must be"),
        ({"stage": "infer", "credits": 2}, "inline"),
        ({"stage": "infer", "credits": 2, "inline": True, "reads": "input"}, "list of names"),
    ],
)
def test_a_bad_ready_is_refused(ready: dict[str, Any], match: str) -> None:
    with pytest.raises(msg.WireError, match=match):
        remote.check_ready(ready, ["preprocess", "infer"])


def test_a_good_ready() -> None:
    joining = remote.check_ready(
        {"stage": "infer", "credits": 4, "inline": True, "reads": ["input"], "writes": []}, ["infer"]
    )
    assert joining == remote.Joining("infer", 4, frozenset({"input"}), frozenset())


def test_the_hub_sends_views_of_the_slot() -> None:
    from framewire.pipeline.wire.framepool import FramePool

    layout = PoolLayout.plan("framewire-test-remote-views", 2, {"image": ((6, 8, 3), "uint8")})
    pool = FramePool.create(layout)
    try:
        pool.view(1, "image")[...] = 9
        regions = remote.region_tensors(pool, 1, ["image", "missing"])
        assert set(regions) == {"region:image"}
        assert np.shares_memory(regions["region:image"], pool.view(1, "image"))
        del regions
    finally:
        pool.close()


def test_a_send_with_no_connection_to_the_hub_asks_the_link_instead_of_blocking() -> None:
    # After a refused CurveZMQ handshake a DEALER has no connection and a plain send blocks for
    # ever; a remote worker's socket times out, and its hub link says whether to try again.
    import zmq

    from framewire.pipeline.worker.hub_link import HubConnection

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.SNDTIMEO, 20)
    sock.setsockopt(zmq.IMMEDIATE, 1)  # no pipe until connected: as after a refused handshake
    sock.connect("tcp://127.0.0.1:1")  # nobody there
    conn = HubConnection(ctx, sock)
    answers = [True, True, False]
    conn.on_blocked = lambda: answers.pop(0)
    conn.send({"type": msg.PING})
    assert answers == []  # tried three times, then dropped
    conn.on_blocked = None
    conn.send({"type": msg.PING})  # no link: dropped at once
    conn.close(linger_ms=0)
