"""What the hub reads of a message (pipeline.hub.header): typed once, bad fields refused."""

from __future__ import annotations

import pytest

from framewire.pipeline.hub.header import FrameHeader, FrameKey, ReadyHeader, ResultHeader
from framewire.pipeline.wire.messages import WireError

pytestmark = pytest.mark.timeout(30)


def test_a_frame_header_keeps_what_the_hub_needs_and_the_source_its_worker_reads() -> None:
    head = FrameHeader.read({"source": "other", "seq": 7, "slot": 2, "pts": 3003, "dropped": 1,
                             "ts": {"decode": [100.5, 100.6]}, "result": {"boxes": []}}, "cam")  # fmt: skip
    assert head == FrameHeader(FrameKey("cam", 7), 2, 3003, 100.5, 1)
    assert (head.source, head.seq) == ("cam", 7)
    assert FrameHeader.read({"seq": 0, "slot": 0}, "cam") == FrameHeader(FrameKey("cam", 0), 0, 0, None, 0)


@pytest.mark.parametrize(
    "header",
    [{"seq": 1}, {"slot": 1}, {"seq": True, "slot": 1}, {"seq": 1, "slot": 1.0}, {"seq": 1, "slot": 1, "pts": "9"},
     {"seq": 1, "slot": 1, "dropped": None}],
)
def test_a_frame_header_without_a_usable_field_is_a_wire_error(header: dict[str, object]) -> None:
    with pytest.raises(WireError):
        FrameHeader.read(header, "cam")


def test_a_result_header_spans_and_staleness() -> None:
    result = ResultHeader.read({"source": "cam", "seq": 4, "ts": {"infer": [1.0, 1.25], "bad": "xy", "odd": [1, "x"]}})
    assert result.key == FrameKey("cam", 4) and not result.stale
    assert result.span("infer") == 0.25
    assert result.span("bad") is None and result.span("odd") is None and result.span("missing") is None
    assert ResultHeader.read({"source": "cam", "seq": 4, "stale": True, "ts": "no"}) == (FrameKey("cam", 4), True, {})


def test_a_ready_says_its_credits_and_provider_or_defaults() -> None:
    assert ReadyHeader.read({"type": "ready", "credits": 6, "provider": "CUDAExecutionProvider"}) == (
        6,
        "CUDAExecutionProvider",
    )
    assert ReadyHeader.read({"type": "ready"}) == (1, None)
    assert ReadyHeader.read({"credits": "6", "provider": 3}) == (1, None)  # mistyped: as if absent
