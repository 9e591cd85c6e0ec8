"""Text detection with a DBNet (PaddleOCR's detector): a text probability map -> rotated text boxes.

Preparation and decoding follow PaddleOCR's DB post-processing as the `rapidocr-onnxruntime` package
runs it (its reference pipeline): the frame is resized so its short side is at least `limit_side`,
each side rounded to a multiple of 32 (BGR, (x/255 - 0.5) / 0.5); the map is thresholded, dilated,
and each region's minimum-area rectangle, if its mean probability reaches `box_threshold`, is grown
by `area * unclip_ratio / perimeter` on every side (Clipper's offset, through pyclipper, as PaddleOCR
does). Each box is a detection of the class `text` with its four corners (`quad`), which a text
recogniser crops along (stages.tasks.text_recognition).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import cv2
import numpy as np
import pyclipper
from pydantic import Field

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages import detections
from framewire.stages.tasks.base import ModelInfo, Result, Task, TaskParams

LABEL = "text"
_MEAN, _STD = 0.5, 0.5


class TextDetectionParams(TaskParams):
    """Keys of `model:` for `task: text_detection` (defaults: rapidocr-onnxruntime's)."""

    limit_side: int = Field(736, ge=32, le=8192, description="The side limit of the model input.")
    limit: Literal["min", "max"] = Field(
        "min",
        description="min: the short side is scaled up to at least limit_side; "
        "max: the long side down to at most.",
    )
    channels: Literal["bgr", "rgb"] = Field(
        "bgr", description="Channel order fed to the model (rapidocr: BGR)."
    )
    threshold: float = Field(0.3, gt=0.0, lt=1.0, description="Probability above which a pixel is text.")
    box_threshold: float = Field(0.5, ge=0.0, le=1.0, description="Minimum mean probability inside a box.")
    unclip_ratio: float = Field(
        1.6, ge=0.0, le=10.0, description="How far a box is grown (area * ratio / perimeter)."
    )
    max_candidates: int = Field(1000, ge=1, description="Text regions looked at, at most.")
    dilation: bool = Field(True, description="Dilate the thresholded map by 2x2 first.")
    min_size: int = Field(3, ge=1, description="Boxes with a side below this (map pixels) are dropped.")


class TextDetection(Task):
    """PaddleOCR DBNet: input [N, 3, H, W] (H, W multiples of 32), output [N, 1, H, W] probabilities."""

    name: ClassVar[str] = "text_detection"
    Params: ClassVar[type[TaskParams]] = TextDetectionParams
    gives_boxes: ClassVar[bool] = True

    def __init__(self, params: TaskParams) -> None:
        if not isinstance(params, TextDetectionParams):
            raise TypeError(f"TextDetection needs TextDetectionParams, got {type(params).__name__}")
        super().__init__(params)
        self.params: TextDetectionParams = params
        self._input = "x"
        self._output = ""

    def use_model(self, info: ModelInfo) -> None:
        self.check_model(info.inputs, info.outputs)

    def labels(self) -> tuple[str, ...]:
        return (LABEL,)

    def summary(self) -> str:
        p = self.params
        return (
            f"text_detection: probability map {self._output!r} -> boxes (threshold {p.threshold}, box "
            f"{p.box_threshold}, unclip {p.unclip_ratio}); "
            f"input {self._input!r}, {p.limit} side {p.limit_side}"
        )

    @property
    def input_name(self) -> str:
        return self._input

    @property
    def output_names(self) -> tuple[str, ...] | None:
        return (self._output,) if self._output else None

    def check_model(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        if len(inputs) != 1 or len(inputs[0].shape) != 4:
            found = ", ".join(f"{t.name!r} {list(t.shape)}" for t in inputs)
            raise ConfigError(f"text_detection expects one image input [N, 3, H, W]; the model has {found}")
        maps = [
            o
            for o in outputs
            if len(o.shape) == 4 and (o.shape[1] in (1, None) or isinstance(o.shape[1], str))
        ]
        if len(outputs) != 1 or not maps:
            found = ", ".join(f"{t.name!r} {list(t.shape)}" for t in outputs)
            raise ConfigError(
                f"text_detection expects one output [N, 1, H, W] (a probability map); the model has {found}"
            )
        self._input, self._output = inputs[0].name, outputs[0].name

    def input_spec(self, frame_width: int, frame_height: int) -> TensorSpec:
        width, height = self._size(frame_width, frame_height)
        return TensorSpec(self._input, np.dtype(np.float32), (1, 3, height, width))

    def preprocess(self, frame: np.ndarray, out: np.ndarray) -> dict[str, Any]:
        height, width = frame.shape[:2]
        size = self._size(width, height)
        if out.shape != (1, 3, size[1], size[0]):
            raise ValueError(
                f"text_detection: input buffer is {out.shape}, expected (1, 3, {size[1]}, {size[0]})"
            )
        image = cv2.resize(frame, size) if size != (width, height) else frame
        order = (0, 1, 2) if self.params.channels == "bgr" else (2, 1, 0)
        for plane, source in enumerate(order):
            np.multiply(
                image[:, :, source], np.float32(1.0 / 255.0 / _STD), out=out[0, plane], casting="unsafe"
            )
            out[0, plane] -= np.float32(_MEAN / _STD)
        return {}

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], meta: Mapping[str, Any], frame_width: int, frame_height: int
    ) -> Result:
        name = self._output or next(iter(outputs))
        value = np.asarray(outputs[name], dtype=np.float32)
        if value.ndim != 4:
            raise ValueError(
                f"text_detection: output {name!r} has shape {list(value.shape)}, expected [N, 1, H, W]"
            )
        quads = db_boxes(value[0, 0], self.params, frame_width, frame_height)
        records = []
        for quad, score in quads:
            x1, y1 = quad.min(axis=0)
            x2, y2 = quad.max(axis=0)
            records.append(detections.make((x1, y1, x2, y2), score, 0, LABEL, quad=quad.astype(int).tolist()))
        return Result(data={detections.KEY: records})

    def _size(self, frame_width: int, frame_height: int) -> tuple[int, int]:
        """(width, height) of the model input: rapidocr's DetPreProcess.resize."""
        p = self.params
        ratio = 1.0
        if p.limit == "max" and max(frame_width, frame_height) > p.limit_side:
            ratio = p.limit_side / max(frame_width, frame_height)
        elif p.limit == "min" and min(frame_width, frame_height) < p.limit_side:
            ratio = p.limit_side / min(frame_width, frame_height)
        width = max(32, int(round(int(frame_width * ratio) / 32) * 32))
        height = max(32, int(round(int(frame_height * ratio) / 32) * 32))
        return width, height


def db_boxes(
    probability: np.ndarray, p: TextDetectionParams, frame_width: int, frame_height: int
) -> list[tuple[np.ndarray, float]]:
    """Text quads (tl, tr, br, bl, in frame pixels) and their scores, in reading order."""
    map_height, map_width = probability.shape
    mask: np.ndarray = (probability > p.threshold).astype(np.uint8)
    if p.dilation:
        mask = cv2.dilate(mask, np.ones((2, 2), dtype=np.uint8))
    contours, _ = cv2.findContours(mask * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    found: list[tuple[np.ndarray, float]] = []
    for contour in contours[: p.max_candidates]:
        points, short = _mini_box(cv2.minAreaRect(contour))
        if short < p.min_size:
            continue
        score = _box_score(probability, points)
        if score < p.box_threshold:
            continue
        grown = _unclip(points, p.unclip_ratio)
        if len(grown) < 3:
            continue
        box, short = _mini_box(cv2.minAreaRect(grown))
        if short < p.min_size + 2:
            continue
        box[:, 0] = np.clip(np.round(box[:, 0] / map_width * frame_width), 0, frame_width)
        box[:, 1] = np.clip(np.round(box[:, 1] / map_height * frame_height), 0, frame_height)
        quad = _clockwise(box)
        quad[:, 0] = np.clip(quad[:, 0], 0, frame_width - 1).astype(np.int32)
        quad[:, 1] = np.clip(quad[:, 1], 0, frame_height - 1).astype(np.int32)
        if int(np.linalg.norm(quad[0] - quad[1])) <= 3 or int(np.linalg.norm(quad[0] - quad[3])) <= 3:
            continue
        found.append((quad, float(score)))
    return _reading_order(found)


def _mini_box(rect: Any) -> tuple[np.ndarray, float]:
    """The rectangle's corners as PaddleOCR orders them, and its short side."""
    points = sorted(cv2.boxPoints(rect).tolist(), key=lambda point: point[0])
    left = (points[0], points[1]) if points[1][1] > points[0][1] else (points[1], points[0])
    right = (points[2], points[3]) if points[3][1] > points[2][1] else (points[3], points[2])
    box = np.array([left[0], right[0], right[1], left[1]], dtype=np.float64)
    return box, float(min(rect[1]))


def _unclip(box: np.ndarray, ratio: float) -> np.ndarray:
    """The box grown by area * ratio / perimeter on every side, with rounded corners, as PaddleOCR
    does it (Clipper's polygon offset on integer coordinates; the reference's own library, so the
    boxes agree to the pixel)."""
    x, y = box[:, 0], box[:, 1]
    area = 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))
    perimeter = float(np.linalg.norm(box - np.roll(box, -1, axis=0), axis=1).sum())
    if perimeter <= 0:
        return np.zeros((0, 2), dtype=np.float32)
    offset = pyclipper.PyclipperOffset()
    offset.AddPath(box.tolist(), pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    grown = offset.Execute(area * ratio / perimeter)
    return np.asarray(grown[0] if grown else [], dtype=np.float32).reshape(-1, 2)


def _box_score(probability: np.ndarray, box: np.ndarray) -> float:
    """Mean probability inside the box (PaddleOCR's `box_score_fast`)."""
    height, width = probability.shape
    xmin = int(np.clip(np.floor(box[:, 0].min()), 0, width - 1))
    xmax = int(np.clip(np.ceil(box[:, 0].max()), 0, width - 1))
    ymin = int(np.clip(np.floor(box[:, 1].min()), 0, height - 1))
    ymax = int(np.clip(np.ceil(box[:, 1].max()), 0, height - 1))
    mask = np.zeros((ymax - ymin + 1, xmax - xmin + 1), dtype=np.uint8)
    shifted = box - np.array([xmin, ymin], dtype=np.float64)
    cv2.fillPoly(mask, [shifted.reshape(-1, 2).astype(np.int32)], 1)
    return float(cv2.mean(probability[ymin : ymax + 1, xmin : xmax + 1], mask)[0])


def _clockwise(points: np.ndarray) -> np.ndarray:
    """tl, tr, br, bl (imutils' order_points, as rapidocr orders a box)."""
    by_x = points[np.argsort(points[:, 0], kind="stable")]
    left, right = by_x[:2], by_x[2:]
    tl, bl = left[np.argsort(left[:, 1], kind="stable")]
    tr, br = right[np.argsort(right[:, 1], kind="stable")]
    return np.array([tl, tr, br, bl], dtype=np.float64)


def _reading_order(found: list[tuple[np.ndarray, float]]) -> list[tuple[np.ndarray, float]]:
    """Top to bottom, then left to right within a line (boxes whose tops are within 10 px)."""
    ordered = sorted(found, key=lambda item: (item[0][0][1], item[0][0][0]))
    for i in range(len(ordered) - 1):
        for j in range(i, -1, -1):
            a, b = ordered[j][0][0], ordered[j + 1][0][0]
            if abs(b[1] - a[1]) < 10 and b[0] < a[0]:
                ordered[j], ordered[j + 1] = ordered[j + 1], ordered[j]
            else:
                break
    return ordered
