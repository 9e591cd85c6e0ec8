"""The spans of one traced frame, read from its header's timings: plain data, no OpenTelemetry.

Every stage worker stamps `ts` in the frame's header (stage name -> [start, end], seconds since the
epoch; each member of a fused stage its own), and decode chose the frame's trace context where it
entered (`trace`, a W3C traceparent: the trace id and its root span's id). When every output has
written the frame, the hub hands its header to the tracer (framewire.app.tracing), which makes:

- the root span `frame`, from decode's start to the last output's end, with the ids decode chose;
- under it, one span per stage the frame went through, in frame order: `decode`, each middle stage
  (each member of a fused stage), each output (each member of the fused outputs);
- under it too, one `queue <stage>` span for each wait between two processes: from the end of what
  ran before (decode, or the previous process's last member) to the start of the next process's
  first member. An output's wait starts at the end of the last middle stage, and holds the wait
  for the frames before it (outputs write in order) as well as for the output's worker.

Every span is a child of the root, not of the span before it: a trace viewer then draws one frame
as one waterfall, the stages and the waits between them in time order, and a stage that failed (no
span) leaves no hole in a chain.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from framewire.pipeline.stagespec import DECODE, StageSpec

QUEUE = "queue "
"""The name of a wait's span: `queue infer` is the frame's wait for a worker of the infer process."""


@dataclass(frozen=True)
class Chain:
    """The job's processes after decode as the spans follow them: the members each runs, in order."""

    middle: tuple[tuple[str, ...], ...]
    """The middle processes, in frame order (a fused one: its members)."""
    outputs: tuple[tuple[str, ...], ...]
    """The output processes (the fused outputs: its members)."""
    processes: frozenset[str] = frozenset()
    """The names of fused processes that are no member of their own (`outputs`): their worker's span
    covers its members' and is left out."""

    @classmethod
    def of(cls, stages: Sequence[StageSpec]) -> Chain:
        """The chain of a plan's stages (`Plan.stages`)."""
        def members(spec: StageSpec) -> tuple[str, ...]:
            return spec.members or (spec.name,)

        return cls(
            tuple(members(s) for s in stages if not s.writes_output),
            tuple(members(s) for s in stages if s.writes_output),
            frozenset(s.name for s in stages if s.members and s.name not in s.members),
        )


@dataclass(frozen=True)
class Span:
    """One span to export: ids as ints (OpenTelemetry's), times in seconds since the epoch."""

    name: str
    span_id: int
    parent_id: int | None
    start_s: float
    end_s: float
    kind: str
    """`frame` (the root), `decode`, `stage`, `queue` or `output`."""
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FrameTrace:
    """One frame's trace: its id and its spans, the root first."""

    trace_id: int
    spans: tuple[Span, ...]


def parse_traceparent(value: Any) -> tuple[int, int] | None:
    """(trace id, parent span id) of a W3C traceparent `00-<32 hex>-<16 hex>-<2 hex>`; None when it is
    not one, or its ids are zero (invalid in W3C's rules)."""
    if not isinstance(value, str) or len(value) != 55:
        return None
    parts = value.split("-")
    if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id = int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None
    return (trace_id, span_id) if trace_id and span_id else None


def _span_of(timings: Mapping[str, Any], name: str) -> tuple[float, float] | None:
    span = timings.get(name)
    if not isinstance(span, list | tuple) or len(span) != 2:
        return None
    start, end = span
    if not isinstance(start, int | float) or not isinstance(end, int | float) or end < start:
        return None
    return float(start), float(end)


def _new_id() -> int:
    return int.from_bytes(os.urandom(8), "big") or 1


class _Builder:
    def __init__(self, root: int, source: str, seq: int) -> None:
        self.root = root
        self.spans: list[Span] = []
        self.common = {"framewire.source": source, "framewire.seq": seq}

    def add(self, name: str, start: float, end: float, kind: str, stage: str) -> None:
        attributes = {**self.common, "framewire.stage": stage}
        self.spans.append(Span(name, _new_id(), self.root, start, end, kind, attributes))

    def process(self, members: Iterable[str], timings: Mapping[str, Any], after: float | None, kind: str) -> float | None:
        """The spans of one process's members (and the wait before it, from `after`); the end of
        its last member, or `after` when none stamped a span (it failed, or the frame skipped it)."""
        present = [(name, span) for name in members if (span := _span_of(timings, name)) is not None]
        if not present:
            return after
        first_name, (first_start, _) = present[0]
        if after is not None and first_start >= after:
            self.add(QUEUE + first_name, after, first_start, "queue", first_name)
        for name, (start, end) in present:
            self.add(name, start, end, kind, name)
        return present[-1][1][1]


def frame_trace(header: Mapping[str, Any], chain: Chain) -> FrameTrace | None:
    """The spans of a finished frame from its last header (its `trace`, `ts`, `source`, `seq`), or
    None when it is not traced. Stages in `ts` that the chain does not name (a layout's own) are
    added as stages after the chain's, in time order."""
    ids = parse_traceparent(header.get("trace"))
    timings = header.get("ts")
    if ids is None or not isinstance(timings, Mapping):
        return None
    trace_id, root_id = ids
    built = _Builder(root_id, str(header.get("source")), int(header.get("seq", -1)))
    decode = _span_of(timings, DECODE)
    after = None
    if decode is not None:
        built.add(DECODE, decode[0], decode[1], "decode", DECODE)
        after = decode[1]
    for members in chain.middle:
        after = built.process(members, timings, after, "stage")
    for members in chain.outputs:
        built.process(members, timings, after, "output")
    named = {DECODE, *chain.processes, *(m for p in chain.middle for m in p), *(m for p in chain.outputs for m in p)}
    others = sorted((span, name) for name in timings if name not in named and (span := _span_of(timings, name)))
    for (start, end), name in others:
        built.add(name, start, end, "stage", name)
    if not built.spans:
        return None
    start = min(span.start_s for span in built.spans)
    end = max(span.end_s for span in built.spans)
    attributes = dict(built.common)
    if isinstance(header.get("pts"), int):
        attributes["framewire.pts"] = header["pts"]
    if isinstance(header.get("error"), str):
        attributes["framewire.error"] = header["error"]
    root = Span("frame", root_id, None, start, end, "frame", attributes)
    return FrameTrace(trace_id, (root, *built.spans))
