"""The JSON record of one frame: what JSONL files hold and the header of a ZeroMQ message."""

from __future__ import annotations

import time
from typing import Any

from pipeline.frame import Frame

RECORD_VERSION = 1
STAGE_ORDER = ("decode", "preprocess", "infer", "postprocess", "composite")


def frame_record(frame: Frame, now: float | None = None) -> dict[str, Any]:
    """Version, source, seq, pts, time, frame size, the task's results and per-stage latencies."""
    now = time.time() if now is None else now
    latency: dict[str, float] = {}
    # The fixed stages in frame order, then any others (steps) as they came.
    for stage in (*STAGE_ORDER, *(s for s in frame.timings if s not in STAGE_ORDER)):
        span = frame.timings.get(stage)
        if span:
            latency[stage] = round((span[1] - span[0]) * 1000.0, 3)
    decode = frame.timings.get("decode")
    if decode:
        latency["total"] = round((now - decode[0]) * 1000.0, 3)
    record: dict[str, Any] = {
        "v": RECORD_VERSION,
        "source": frame.source_id,
        "seq": frame.seq,
        "pts": frame.pts,
        "time": round(frame.time_s, 6),
        "width": frame.width,
        "height": frame.height,
        "results": frame.result or {},
        "latency_ms": latency,
    }
    if frame.error:
        record["error"] = frame.error
    return record


def composited_image(frame: Frame) -> Any:
    """The frame as the outputs should show it: composited if the composite stage ran on it."""
    if "composite" in frame.timings and frame.has_region("output"):
        return frame.region("output")
    return frame.region("image")
