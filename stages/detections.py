"""The one shape of a detection in a frame's results, and the box arithmetic every stage shares.

Every task that finds objects (face_detection, detection, text_detection) writes
`results["detections"]`, a list of records in frame pixels:

    {"box": [x, y, w, h], "score": 0.91, "class_id": 0, "label": "face",
     "landmarks": [[x, y], ...],                  # face_detection only
     "quad": [[x, y], [x, y], [x, y], [x, y]],    # text_detection only: the rotated text box
     "track_id": 7, "predicted": true,            # with tracking (predicted: a frame the detector skipped)
     "attributes": {"text": {"text": "EXIT", "score": 0.98}}}   # secondary models, by their name

Composites, the tracker and the cascade read only this, so each works on any detector. Results of a
user's own task written for record version 1 (`{"faces": [...]}`) are read as detections of `face`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import cv2
import numpy as np

KEY = "detections"
"""The key of `Result.data` (and of a record's `results`) that holds the detections."""
EMBEDDINGS = "embeddings."
"""Prefix of the frame tensors that hold a secondary model's embeddings (`embeddings.<name>`, one row
per object that has one): kept past the composite for the ZeroMQ output."""


def make(
    box_xyxy: Sequence[float],
    score: float,
    class_id: int,
    label: str,
    **extra: Any,
) -> dict[str, Any]:
    """A detection record from a corner box (x1, y1, x2, y2) in frame pixels, rounded for JSON."""
    x1, y1, x2, y2 = (float(v) for v in box_xyxy)
    record: dict[str, Any] = {
        "box": [round(x1, 2), round(y1, 2), round(x2 - x1, 2), round(y2 - y1, 2)],
        "score": round(float(score), 4),
        "class_id": int(class_id),
        "label": label,
    }
    record.update(extra)
    return record


def of(data: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The detections of a frame's results; version-1 `faces` read as detections of `face`."""
    if not data:
        return []
    found = data.get(KEY)
    if found is not None:
        return list(found)
    return [{"class_id": 0, "label": "face", **face} for face in data.get("faces", ())]


def xyxy(detection: Mapping[str, Any]) -> tuple[float, float, float, float]:
    """A detection's box as corners (x1, y1, x2, y2)."""
    x, y, w, h = (float(v) for v in detection["box"])
    return x, y, x + w, y + h


def boxes(detections: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """The boxes of `detections` as an [N, 4] float64 array of corners."""
    if not detections:
        return np.zeros((0, 4), dtype=np.float64)
    return np.array([xyxy(d) for d in detections], dtype=np.float64)


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` [N, 4] with every box of `b` [M, 4] (corners): an [N, M] array."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    left = np.maximum(a[:, None, 0], b[None, :, 0])
    top = np.maximum(a[:, None, 1], b[None, :, 1])
    right = np.minimum(a[:, None, 2], b[None, :, 2])
    bottom = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(right - left, 0, None) * np.clip(bottom - top, 0, None)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def nms(
    boxes_xyxy: np.ndarray,
    scores: np.ndarray,
    class_ids: np.ndarray | None,
    iou_threshold: float,
    max_detections: int,
) -> np.ndarray:
    """Indices kept by non-maximum suppression, best score first, at most `max_detections`.

    With `class_ids`, boxes only suppress boxes of their own class (class-aware, as Ultralytics
    does by default); without, any box suppresses any other (agnostic). OpenCV's NMS runs in C++.
    """
    if len(scores) == 0:
        return np.zeros(0, dtype=np.int64)
    xywh = np.asarray(boxes_xyxy, dtype=np.float64).copy()
    xywh[:, 2:] -= xywh[:, :2]
    # The score filter ran before; 0 keeps every candidate that reaches NMS.
    if class_ids is None:
        keep = cv2.dnn.NMSBoxes(xywh.tolist(), scores.astype(float).tolist(), 0.0, float(iou_threshold))
    else:
        keep = cv2.dnn.NMSBoxesBatched(
            xywh.tolist(),
            scores.astype(float).tolist(),
            class_ids.astype(int).tolist(),
            0.0,
            float(iou_threshold),
        )
    kept = np.asarray(keep, dtype=np.int64).reshape(-1)
    order = np.argsort(-scores[kept], kind="stable")
    return kept[order][:max_detections]
