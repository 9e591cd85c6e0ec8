"""The JSON record of one frame: what JSONL files hold and the header of a ZeroMQ message.

Version 2 (issue 11): every task that finds objects writes `results.detections` (stages.detections:
box, score, class_id, label, and landmarks, quad, track_id, predicted, attributes where they apply)
instead of version 1's `results.faces`; `arrays` describes the binary parts that follow the header
on the ZeroMQ output (a secondary model's embeddings).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from framewire.pipeline.frame import Frame
from framewire.config.job import MODEL_STAGES
from framewire.pipeline.frame import IMAGE, shown_region
from framewire.pipeline.stagespec import DECODE
from framewire.stages.detections import EMBEDDINGS
from framewire.stages.postprocess import MODEL

RECORD_VERSION = 2
STAGE_ORDER = (DECODE, *MODEL_STAGES)


def frame_record(frame: Frame, now: float | None = None) -> dict[str, Any]:
    """Version, source, seq, pts, time, frame size, the task's results, per-stage latencies, and the
    model version that made the results."""
    now = time.time() if now is None else now
    latency: dict[str, float] = {}
    # The fixed stages in frame order, then any others (steps) as they came.
    for stage in (*STAGE_ORDER, *(s for s in frame.timings if s not in STAGE_ORDER)):
        span = frame.timings.get(stage)
        if span:
            latency[stage] = round((span[1] - span[0]) * 1000.0, 3)
    decode = frame.timings.get(DECODE)
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
    if frame.meta.get(MODEL):  # the model version that made the results (model.version)
        record["model"] = frame.meta[MODEL]
    if frame.error:
        record["error"] = frame.error
    return record


def embedding_arrays(frame: Frame) -> list[tuple[str, np.ndarray]]:
    """The secondary models' embeddings of the frame (`embeddings.<name>`), by name: float32, one row
    per object whose `attributes.<name>.embedding` holds its row."""
    return sorted((k, v) for k, v in frame.tensors.items() if k.startswith(EMBEDDINGS))


def composited_image(frame: Frame) -> Any:
    """The frame as the outputs should show it: composited if a stage drew on it (`Frame.SHOWS`)."""
    shown = shown_region(frame.meta)
    return frame.region(shown if frame.has_region(shown) else IMAGE)
