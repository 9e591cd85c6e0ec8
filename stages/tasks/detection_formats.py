"""Detector output formats: which one a model has (from its output shapes and metadata), and decoding.

| format | outputs | a row |
|---|---|---|
| yolov5 | one [B, N, 5+C] | cx, cy, w, h, objectness, C class scores (score = obj * cls) |
| yolov8 | one [B, 4+C, N] | cx, cy, w, h, C class scores (Ultralytics YOLOv8/11, no objectness) |
| yolox | one [B, N, 5+C], N = grid cells | as yolov5, raw: xy = (xy + grid) * stride, wh = exp(wh) * stride |
| end2end | one [B, N, 6] | x1, y1, x2, y2, score, class (NMS inside the model) |
| separate | boxes [B, N, 4], scores [B, N] or [B, N, C], labels [B, N], count [B, 1] | as named |
| gfl, tf_od | several outputs, by shape | distribution heads and TF object detection: stages.tasks.detection_heads |

A YOLOX export with `decode_in_inference` already decoded its boxes: it is `yolov5` (name it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import Dim, TensorSpec
from framewire.stages.tasks import detection_heads as heads

FORMATS = ("yolov5", "yolov8", "yolox", "end2end", "separate", "gfl", "tf_od")
USUAL_PREPROCESSING: dict[str, tuple[str, dict[str, object], str]] = {
    "gfl": (
        "a GFL head, as NanoDet's",
        {"resize": "stretch", "channels": "bgr", "scale": "none",
         "mean": (103.53, 116.28, 123.675), "std": (57.375, 57.12, 58.395)},
        "configs/nanodet.yaml",
    ),
    "tf_od": (
        "TensorFlow object detection's layout", {"resize": "stretch", "channels": "rgb"}, "configs/ssd.yaml"
    ),
}  # fmt: skip
"""The preprocessing a format's model family is usually trained with, where the format says the
family: (who, the `model:` keys, the shipped config that sets them). `validate` and `run` warn of
each key a config leaves at its default where that differs (docs/guides/models.md has what NanoDet
finds either way). PicoDet has a GFL head too, with its own mean and std: the keys are not applied
for the user."""
ROLES = ("boxes", "scores", "labels", "count")
"""The outputs of the `separate` format, in the order `Layout.outputs` lists them ('' when absent)."""
_ROLE_WORDS = {
    "boxes": ("box",),
    "scores": ("score", "conf"),
    "labels": ("label", "class"),
    "count": ("num", "count"),
}
_END2END_MAX = 1000
"""An [B, N, 6] output with at most this many rows (and not a YOLOX grid) is an end-to-end one."""


@dataclass(frozen=True)
class Layout:
    """How a model's outputs are read: the format, the outputs it uses, and its class count if known."""

    format: str
    outputs: tuple[str, ...]
    classes: int | None
    why: str = ""
    reg_max: int = 0
    """gfl: the bins of a box side, less one."""


@dataclass
class Candidates:
    """Boxes above the score threshold, before NMS: corners in model-input pixels."""

    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray


def grid_cells(width: int, height: int, strides: Sequence[int]) -> int:
    return sum((height // s) * (width // s) for s in strides)


def find_layout(
    outputs: Sequence[TensorSpec],
    metadata: Mapping[str, str],
    input_size: tuple[int, int] | None,
    strides: Sequence[int],
    named: str,
    reg_max: int | None = None,
) -> Layout:
    """The layout of a detector's outputs: the one `named`, checked, or (named 'auto') the one its
    shapes and metadata show. ConfigError (one line, naming each output and its shape) if none fits."""
    auto = named == "auto"
    if named == "gfl" or (auto and heads.looks_gfl(outputs, input_size, strides)):
        names, scores, reg = heads.gfl_outputs(outputs, input_size, strides, reg_max)
        why = "named in the config" if not auto else (
            f"{len(outputs)} outputs: scores and {4 * (reg + 1)} box bins at each stride's cells"
        )
        return Layout("gfl", names, scores, why, reg)
    if named == "tf_od" or (auto and heads.tf_od_roles(outputs) is not None):
        names, why = heads.tf_od_outputs(outputs, named == "tf_od")
        return Layout("tf_od", names, None, why)
    if named == "separate" or (named == "auto" and len(outputs) > 1):
        return _separate(outputs, named)
    single = [o for o in outputs if len(o.shape) == 3]
    if len(outputs) != 1 or not single:
        raise ConfigError(f"model.format: {_describe(outputs)} fit no detection format ({_formats_hint()})")
    spec = single[0]
    d1, d2 = spec.shape[1], spec.shape[2]
    cells = grid_cells(*input_size, strides) if input_size else None
    if named == "auto":
        named, why = _guess(d1, d2, cells, metadata)
        if not named:
            raise ConfigError(f"model.format: {_describe(outputs)} {why} ({_formats_hint()})")
    else:
        why = "named in the config"
    classes = _check_single(spec, named, cells)
    return Layout(named, (spec.name,), classes, why)


def _guess(d1: Dim, d2: Dim, cells: int | None, metadata: Mapping[str, str]) -> tuple[str, str]:
    """(format, why) from the dims of a single [B, d1, d2] output; ('', why not) when unsure."""
    ultralytics = "ultralytics" in metadata.get("author", "").lower()
    if ultralytics and metadata.get("end2end", "").lower() == "true":
        return "end2end", "Ultralytics metadata end2end: True"
    known1, known2 = isinstance(d1, int), isinstance(d2, int)
    if known1 and known2:
        assert isinstance(d1, int) and isinstance(d2, int)
        if cells is not None and d1 == cells and 6 <= d2 < d1:
            return "yolox", f"{d1} rows = the grid cells at the strides"
        if d2 == 6 and d1 <= _END2END_MAX:
            return "end2end", f"[B, {d1}, 6]: few rows of 6"
        if d1 < d2:
            return "yolov8", f"[B, {d1}, {d2}]: channels first (4 + {d1 - 4} classes)"
        if d2 >= 6:
            return "yolov5", f"[B, {d1}, {d2}]: rows of 5 + {d2 - 5} classes"
    if known1 and not known2 and isinstance(d1, int) and d1 >= 5:
        return "yolov8", f"[B, {d1}, N]: channels fixed, rows dynamic" + (
            " (Ultralytics)" if ultralytics else ""
        )
    return "", "cannot be told apart from its shape alone: name model.format"


def _check_single(spec: TensorSpec, named: str, cells: int | None) -> int | None:
    d1, d2 = spec.shape[1], spec.shape[2]
    shape = list(spec.shape)
    if named == "yolov8":
        if isinstance(d1, int) and d1 >= 5:
            return d1 - 4
        raise ConfigError(f"model.format: yolov8 needs output {spec.name!r} as [B, 4+C, N], found {shape}")
    if named in ("yolov5", "yolox"):
        if not (isinstance(d2, int) and d2 >= 6):
            raise ConfigError(
                f"model.format: {named} needs output {spec.name!r} as [B, N, 5+C], found {shape}"
            )
        if named == "yolox" and cells is not None and isinstance(d1, int) and d1 != cells:
            raise ConfigError(
                f"model.format: yolox output {spec.name!r} {shape} has {d1} rows, but the grid at "
                f"model.strides has {cells} cells for this input size"
            )
        return d2 - 5
    if named == "end2end":
        if d2 != 6:
            raise ConfigError(f"model.format: end2end needs output {spec.name!r} as [B, N, 6], found {shape}")
        return None
    raise ConfigError(f"model.format: unknown format {named!r} ({_formats_hint()})")


def _separate(outputs: Sequence[TensorSpec], named: str) -> Layout:
    found: dict[str, TensorSpec] = {}
    for spec in outputs:
        lowered = spec.name.lower()
        for role, words in _ROLE_WORDS.items():
            if role not in found and any(w in lowered for w in words):
                found[role] = spec
                break
    boxes, scores = found.get("boxes"), found.get("scores")
    if boxes is None or scores is None or len(boxes.shape) != 3 or boxes.shape[2] != 4:
        need = (
            "separate needs outputs named like boxes [B, N, 4] and scores [B, N]; "
            if named == "separate"
            else ""
        )
        raise ConfigError(
            f"model.format: {_describe(outputs)} fit no detection format ({need}{_formats_hint()})"
        )
    classes = scores.shape[2] if len(scores.shape) == 3 and isinstance(scores.shape[2], int) else None
    if len(scores.shape) == 2 and "labels" not in found:
        raise ConfigError(
            f"model.format: separate outputs: scores {scores.name!r} [B, N] need a labels output"
        )
    names = tuple(found[r].name if r in found else "" for r in ROLES)
    return Layout("separate", names, classes, "outputs named " + ", ".join(n for n in names if n))


YOLOV8_STRIDES = (8, 16, 32)


def detector_evidence(
    inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], metadata: Mapping[str, str]
) -> tuple[bool, str]:
    """Whether the model file shows beyond doubt that it is a detector (so `model.task` may be left
    out), and why or why not: an Ultralytics export says its task in its metadata; without that,
    one [B, 4+C, N] output with N the grid cells of its fixed input at strides 8/16/32 is YOLOv8's
    anchor-free head (no other family this task reads has channels first at exactly that count)."""
    if "ultralytics" in metadata.get("author", "").lower() and metadata.get("task"):
        kind = metadata["task"]
        if kind == "detect":
            return True, "Ultralytics metadata task: detect"
        return False, f"the model is an Ultralytics {kind!r} export, not a detector"
    sizes = [(w, h) for w, h in ((i.shape[3], i.shape[2]) for i in inputs if len(i.shape) == 4)
             if isinstance(w, int) and isinstance(h, int) and min(w, h) > 0]  # fmt: skip
    size = sizes[0] if sizes else None
    if len(outputs) == 1 and len(outputs[0].shape) == 3 and size is not None:
        d1, d2 = outputs[0].shape[1], outputs[0].shape[2]
        if isinstance(d1, int) and d1 >= 5 and d2 == grid_cells(*size, YOLOV8_STRIDES):
            cells = f"the grid cells of a {size[0]}x{size[1]} input"
            return True, f"one output [B, {d1}, {d2}]: 4 + {d1 - 4} classes at {cells}"
    would = "a YOLOv8-style detector's one [B, 4+C, N] output would"
    return False, f"{_describe(outputs)} does not tell its task: {would}"


def _describe(outputs: Sequence[TensorSpec]) -> str:
    if len(outputs) == 1:
        return f"the model's output {outputs[0].name!r} {list(outputs[0].shape)}"
    return "the model's outputs " + ", ".join(f"{o.name!r} {list(o.shape)}" for o in outputs)


def _formats_hint() -> str:
    return "model.format: " + " | ".join(FORMATS)


# --- decoding -------------------------------------------------------------------------------------


def decode(
    layout: Layout,
    arrays: Mapping[str, np.ndarray],
    input_size: tuple[int, int],
    strides: Sequence[int],
    score_threshold: float,
    box_format: str = "xyxy",
) -> Candidates:
    """The candidates of one frame (batch index 0) above `score_threshold`, boxes in input pixels."""
    if layout.format == "separate":
        return _decode_separate(layout, arrays, score_threshold, box_format)
    if layout.format == "gfl":
        return Candidates(*heads.decode_gfl(layout.outputs, arrays, input_size, strides, score_threshold))
    if layout.format == "tf_od":
        return Candidates(*heads.decode_tf_od(layout.outputs, arrays, input_size, score_threshold))
    value = np.asarray(arrays[layout.outputs[0]], dtype=np.float32)
    if value.ndim != 3:
        raise ValueError(
            f"detection: output {layout.outputs[0]!r} has shape {list(value.shape)}, expected 3 dims"
        )
    rows = value[0]
    if layout.format == "yolov8":
        rows = rows.T
        scores = rows[:, 4:]
        return _best_class(_corners(rows[:, :4]), scores, score_threshold)
    if layout.format == "end2end":
        keep = rows[:, 4] >= score_threshold
        return Candidates(rows[keep, :4].astype(np.float64), rows[keep, 4], rows[keep, 5].astype(np.int64))
    if layout.format == "yolox":
        rows = _yolox_grid(rows, input_size, strides)
    keep = rows[:, 4] >= score_threshold  # objectness first: score = obj * cls <= obj
    rows = rows[keep]
    return _best_class(_corners(rows[:, :4]), rows[:, 5:] * rows[:, 4:5], score_threshold)


def _yolox_grid(rows: np.ndarray, input_size: tuple[int, int], strides: Sequence[int]) -> np.ndarray:
    width, height = input_size
    grids, steps = [], []
    for stride in strides:
        xv, yv = np.meshgrid(np.arange(width // stride), np.arange(height // stride))
        grids.append(np.stack((xv, yv), 2).reshape(-1, 2))
        steps.append(np.full((grids[-1].shape[0], 1), stride))
    grid = np.concatenate(grids).astype(np.float32)
    step = np.concatenate(steps).astype(np.float32)
    if grid.shape[0] != rows.shape[0]:
        raise ValueError(f"detection: yolox output has {rows.shape[0]} rows, the grid {grid.shape[0]} cells")
    out = rows.copy()
    out[:, :2] = (rows[:, :2] + grid) * step
    out[:, 2:4] = np.exp(rows[:, 2:4]) * step
    return out


def _decode_separate(
    layout: Layout, arrays: Mapping[str, np.ndarray], score_threshold: float, box_format: str
) -> Candidates:
    names = dict(zip(ROLES, layout.outputs, strict=True))
    boxes = np.asarray(arrays[names["boxes"]], dtype=np.float64)[0]
    scores = np.asarray(arrays[names["scores"]], dtype=np.float32)[0]
    if names["count"]:
        count = int(np.asarray(arrays[names["count"]]).reshape(-1)[0])
        boxes, scores = boxes[:count], scores[:count]
    if box_format != "xyxy":
        boxes = (
            _corners(boxes)
            if box_format == "cxcywh"
            else np.concatenate([boxes[:, :2], boxes[:, :2] + boxes[:, 2:]], 1)
        )
    if scores.ndim == 2:
        return _best_class(boxes, scores, score_threshold)
    labels = np.asarray(arrays[names["labels"]])[0][: len(scores)].astype(np.int64)
    keep = scores >= score_threshold
    return Candidates(boxes[keep], scores[keep], labels[keep])


def _best_class(boxes: np.ndarray, class_scores: np.ndarray, score_threshold: float) -> Candidates:
    if len(class_scores) == 0:
        return Candidates(np.zeros((0, 4)), np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64))
    class_ids = class_scores.argmax(axis=1)
    scores = class_scores[np.arange(len(class_ids)), class_ids]
    keep = scores >= score_threshold
    return Candidates(
        np.asarray(boxes[keep], dtype=np.float64), scores[keep], class_ids[keep].astype(np.int64)
    )


def _corners(cxcywh: np.ndarray) -> np.ndarray:
    out = np.empty(cxcywh.shape, dtype=np.float64)
    half = cxcywh[:, 2:4].astype(np.float64) / 2.0
    out[:, :2] = cxcywh[:, :2] - half
    out[:, 2:4] = cxcywh[:, :2] + half
    return out
