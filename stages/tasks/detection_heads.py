"""Detector formats of several outputs read by their shapes: distribution heads and TF object detection.

| format | outputs | read as |
|---|---|---|
| gfl | per stride: scores [B, N, C] and box bins [B, N, 4*(reg_max+1)], N = the stride's cells | GFL head (NanoDet, PicoDet): softmax over each side's bins, expected bin x stride = the side's distance from the cell centre ((col+0.5)*stride, (row+0.5)*stride) |
| tf_od | boxes [B, K, 4], classes [B, K], scores [B, K], count [B] | TensorFlow object detection (TFLite_Detection_PostProcess): boxes normalised (ymin, xmin, ymax, xmax), 0-based class ids, NMS inside the model |

A gfl head keeps every class above the score threshold at a cell (NanoDet's own `multiclass_nms`),
not only the best one; the boxes then go through class-aware NMS.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec

KNOWN_REG_MAX = (7, 10, 16)
"""The bins-1 of the distribution heads in use (NanoDet-Plus/PicoDet 7, NanoDet-m 10, GFL 16): with
`reg_max: auto` they tell box bins from class scores when both last dims are multiples of 4."""
TF_OD_ROLES = ("boxes", "classes", "scores", "count")
_TF_OD_NAMES = {
    "detection_boxes": "boxes",
    "detection_classes": "classes",
    "detection_scores": "scores",
    "num_detections": "count",
    "tflite_detection_postprocess": "boxes",
    "tflite_detection_postprocess:1": "classes",
    "tflite_detection_postprocess:2": "scores",
    "tflite_detection_postprocess:3": "count",
}
"""Output names that say their role: the TF object detection API's and TFLite's post-process op's."""


def gfl_cells(width: int, height: int, stride: int) -> int:
    """Cells of a stride's feature map (NanoDet: ceil(size / stride) per side)."""
    return math.ceil(height / stride) * math.ceil(width / stride)


def looks_gfl(
    outputs: Sequence[TensorSpec], input_size: tuple[int, int] | None, strides: Sequence[int]
) -> bool:
    """Two [B, N, D] outputs per stride, N the stride's cells for the input size: a distribution head."""
    if input_size is None or len(outputs) != 2 * len(strides):
        return False
    rows = sorted(o.shape[1] for o in outputs if len(o.shape) == 3 and isinstance(o.shape[1], int))
    cells = sorted(gfl_cells(*input_size, s) for s in strides for _ in range(2))
    return rows == cells


def gfl_outputs(
    outputs: Sequence[TensorSpec],
    input_size: tuple[int, int] | None,
    strides: Sequence[int],
    reg_max: int | None,
) -> tuple[tuple[str, ...], int, int]:
    """(output names, scores then bins per stride; classes; reg_max): each stride's pair matched by
    its rows to the stride's cells, told apart by the last dim. ConfigError naming the outputs if not."""
    shapes = ", ".join(f"{o.name!r} {list(o.shape)}" for o in outputs)
    if input_size is None:
        raise ConfigError("model.format: gfl needs a fixed input size (model.input_size model or [w, h])")
    names: list[str] = []
    found: set[tuple[int, int]] = set()
    for stride in strides:
        cells = gfl_cells(*input_size, stride)
        pair = [o for o in outputs if len(o.shape) == 3 and o.shape[1] == cells]
        if len(pair) != 2 or not all(isinstance(o.shape[2], int) for o in pair):
            raise ConfigError(
                f"model.format: gfl needs two outputs [B, {cells}, D] for stride {stride} "
                f"({input_size[0]}x{input_size[1]} input); the model's outputs are {shapes}"
            )
        scores, bins, bins_reg = _tell_apart(pair[0], pair[1], reg_max, stride)
        names += [scores.name, bins.name]
        found.add((int(scores.shape[2]), bins_reg))  # type: ignore[arg-type]
    if len(found) != 1:
        raise ConfigError(f"model.format: gfl outputs differ in classes or bins across strides: {shapes}")
    classes, reg = found.pop()
    return tuple(names), classes, reg


def _tell_apart(
    a: TensorSpec, b: TensorSpec, reg_max: int | None, stride: int
) -> tuple[TensorSpec, TensorSpec, int]:
    """(scores, bins, reg_max) of one stride's pair, by the bins' last dim 4 * (reg_max + 1)."""
    def is_bins(spec: TensorSpec) -> bool:
        last = int(spec.shape[2])  # type: ignore[arg-type]
        if reg_max is not None:
            return last == 4 * (reg_max + 1)
        return last % 4 == 0 and last // 4 - 1 in KNOWN_REG_MAX

    which = [s for s in (a, b) if is_bins(s)]
    if len(which) != 1:
        pair = f"{a.name!r} {list(a.shape)} and {b.name!r} {list(b.shape)}"
        want = (
            f"4 x (model.reg_max + 1) = {4 * (reg_max + 1)}" if reg_max is not None else "name model.reg_max"
        )
        raise ConfigError(
            f"model.format: gfl cannot tell class scores from box bins at stride {stride}: {pair} ({want})"
        )
    bins = which[0]
    scores = b if bins is a else a
    last = bins.shape[2]
    assert isinstance(last, int)
    return scores, bins, last // 4 - 1


def tf_od_roles(outputs: Sequence[TensorSpec]) -> dict[str, TensorSpec] | None:
    """The four outputs by role when their names say it (TF OD API or TFLite names), else None."""
    found = {_TF_OD_NAMES[o.name.lower()]: o for o in outputs if o.name.lower() in _TF_OD_NAMES}
    return found if len(found) == 4 and len(outputs) == 4 else None


def tf_od_outputs(outputs: Sequence[TensorSpec], named: bool) -> tuple[tuple[str, ...], str]:
    """(names in TF_OD_ROLES order, why): by their names, or (format named) by shape and TFLite's
    order, classes before scores. ConfigError naming the outputs if the shapes do not fit."""
    shapes = ", ".join(f"{o.name!r} {list(o.shape)}" for o in outputs)
    roles = tf_od_roles(outputs)
    why = "outputs named " + ", ".join(roles[r].name for r in TF_OD_ROLES) if roles else ""
    if roles is None and named and len(outputs) == 4:
        boxes = [o for o in outputs if len(o.shape) == 3 and o.shape[2] == 4]
        pairs = [o for o in outputs if len(o.shape) == 2]
        count = [o for o in outputs if len(o.shape) == 1 or (len(o.shape) == 2 and o.shape[1] == 1)]
        pairs = [o for o in pairs if o not in count]
        if len(boxes) == 1 and len(pairs) == 2 and len(count) == 1:
            roles = dict(zip(TF_OD_ROLES, (boxes[0], pairs[0], pairs[1], count[0]), strict=True))
            why = "named in the config; classes and scores in TFLite's order"
    if roles is None:
        raise ConfigError(
            "model.format: tf_od needs boxes [B, K, 4], classes [B, K], scores [B, K] and count [B]; "
            f"the model's outputs are {shapes}"
        )
    box = roles["boxes"]
    if len(box.shape) != 3 or box.shape[2] != 4:
        raise ConfigError(f"model.format: tf_od boxes {box.name!r} {list(box.shape)} is not [B, K, 4]")
    return tuple(roles[r].name for r in TF_OD_ROLES), why


# --- decoding -------------------------------------------------------------------------------------


def decode_gfl(
    names: Sequence[str],
    arrays: Mapping[str, np.ndarray],
    input_size: tuple[int, int],
    strides: Sequence[int],
    score_threshold: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes xyxy in input pixels, scores, class ids): one candidate per (cell, class) at or above
    the threshold, boxes from the expected bin of each side, clipped to the input."""
    width, height = input_size
    boxes, scores, ids = [], [], []
    pairs = zip(names[::2], names[1::2], strict=True)
    for stride, (score_name, bins_name) in zip(strides, pairs, strict=True):
        cls = np.asarray(arrays[score_name], dtype=np.float32)[0]
        cells, classes = np.nonzero(cls >= score_threshold)
        if len(cells) == 0:
            continue
        raw = np.asarray(arrays[bins_name], dtype=np.float32)[0]
        sides = raw[cells].reshape(len(cells), 4, -1).astype(np.float64)
        sides = np.exp(sides - sides.max(axis=2, keepdims=True))
        sides /= sides.sum(axis=2, keepdims=True)
        distance = (sides @ np.arange(sides.shape[2], dtype=np.float64)) * stride
        cols = math.ceil(width / stride)
        cx = (cells % cols + 0.5) * stride
        cy = (cells // cols + 0.5) * stride
        box = np.stack(
            [cx - distance[:, 0], cy - distance[:, 1], cx + distance[:, 2], cy + distance[:, 3]], 1
        )
        box[:, [0, 2]] = box[:, [0, 2]].clip(0, width)
        box[:, [1, 3]] = box[:, [1, 3]].clip(0, height)
        boxes.append(box)
        scores.append(cls[cells, classes])
        ids.append(classes.astype(np.int64))
    if not boxes:
        return np.zeros((0, 4)), np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
    return np.concatenate(boxes), np.concatenate(scores), np.concatenate(ids)


def decode_tf_od(
    names: Sequence[str],
    arrays: Mapping[str, np.ndarray],
    input_size: tuple[int, int],
    score_threshold: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes xyxy in input pixels, scores, class ids) of the first `count` rows above the threshold."""
    boxes, classes, scores, count = (np.asarray(arrays[n]) for n in names)
    total = int(count.reshape(-1)[0])
    yxyx = boxes[0][:total].astype(np.float64).reshape(-1, 4)
    width, height = input_size
    xyxy = yxyx[:, [1, 0, 3, 2]] * np.array([width, height, width, height], dtype=np.float64)
    score = scores[0][:total].astype(np.float32)
    keep = score >= score_threshold
    return xyxy[keep], score[keep], np.rint(classes[0][:total][keep]).astype(np.int64)
