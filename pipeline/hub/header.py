"""What the hub reads of a frame's messages, typed and read once where a message comes in.

The wire header (pipeline.wire.messages) is a msgpack map that the stages fill and pass on; the hub
carries it from stage to stage unchanged. What the hub itself needs of it is small and fixed: the
frame's source and seq (its key), the slot decode wrote it into, its pts, when decode started it, and
of a stage's answer whether it came too late (stale) and the stages' time spans, of a worker's READY
its credits. These are read here,
checked, into frozen records; nothing past this module looks a hub field up in a map.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from framewire.pipeline.stagespec import DECODE
from framewire.pipeline.wire.messages import WireError

NO_SPANS: Mapping[str, Any] = {}


class FrameKey(NamedTuple):
    """One frame of one source."""

    source: str
    seq: int

    @classmethod
    def of(cls, header: Mapping[str, Any]) -> FrameKey:
        """The frame a message names (its `source` and `seq`, whose types the wire codec checked)."""
        return cls(str(header.get("source")), int(header.get("seq", -1)))


class FrameHeader(NamedTuple):
    """A frame as the hub knows it from its decode worker's FRAME, fixed for the frame's life: the
    slot is the hub's to give back, whatever a stage's later header says."""

    key: FrameKey
    slot: int
    pts: int
    decoded_at: float | None
    """Wall-clock time decode started the frame (its `ts.decode` span): where end-to-end latency starts."""
    dropped: int
    """Frames the source's policy dropped since its previous FRAME."""

    @classmethod
    def read(cls, header: Mapping[str, Any], source: str) -> FrameHeader:
        """A FRAME's header from the decode worker of `source`, checked; WireError when a field the
        hub needs is missing or mistyped."""
        seq, slot, pts, dropped = header.get("seq"), header.get("slot"), header.get("pts", 0), header.get("dropped", 0)
        if type(seq) is not int or type(slot) is not int or type(pts) is not int or type(dropped) is not int:
            raise WireError("a frame needs int seq, slot, pts and dropped")
        return cls(FrameKey(source, seq), slot, pts, _start(header.get("ts")), dropped)

    @property
    def source(self) -> str:
        return self.key.source

    @property
    def seq(self) -> int:
        return self.key.seq


class ReadyHeader(NamedTuple):
    """A stage worker's READY: it started, and how many frames it asks to hold."""

    credits: int
    provider: str | None
    """The execution provider its engine ended up on (an infer worker's `describe`), for the metrics."""

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> ReadyHeader:
        credits, provider = header.get("credits", 1), header.get("provider")
        return cls(credits if type(credits) is int else 1, provider if isinstance(provider, str) else None)


class ResultHeader(NamedTuple):
    """A stage's RESULT for a frame, as the hub reads it."""

    key: FrameKey
    stale: bool
    """The frame was past its `max_staleness_ms` before inference: it is dropped, not passed on."""
    spans: Mapping[str, Any]
    """The frame's `ts`: stage name -> [start, end] in wall-clock seconds."""

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> ResultHeader:
        spans = header.get("ts")
        return cls(FrameKey.of(header), header.get("stale") is True, spans if type(spans) is dict else NO_SPANS)

    def span(self, stage: str) -> float | None:
        """Seconds `stage` spent on the frame, or None when it stamped no (valid) span."""
        span = self.spans.get(stage)
        if not span:
            return None
        try:
            start, end = span
            return float(end - start)
        except (TypeError, ValueError):
            return None


def _start(spans: Any) -> float | None:
    """When decode started the frame: its span's start, if it stamped one."""
    try:
        start = spans[DECODE][0]
    except (KeyError, IndexError, TypeError):
        return None
    return float(start) if type(start) is float or type(start) is int else None
