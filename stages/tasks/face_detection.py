"""YuNet face detection (OpenCV Zoo, 2023mar): the same preparation and decoding as cv2.FaceDetectorYN.

The frame is scaled (keeping its aspect) and padded bottom/right with zeros to a multiple of 32, so one
dynamic-size model serves every frame size without distorting faces. Faces come back in frame pixels
as detections of the class `face`, with their five landmarks (stages.detections).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import cv2
import numpy as np
from pydantic import Field, field_validator

from framewire.media import yuv
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages import detections
from framewire.stages.tasks.base import Result, Task, TaskParams

log = logging.getLogger(__name__)

STRIDES = (8, 16, 32)
DIVISOR = 32
INPUT_NAME = "input"
LABEL = "face"
NATIVE_SIZE = (640, 640)
"""Input size (width, height) fixed in the shipped YuNet file; other sizes need dynamic dims."""

_OUTPUT_WIDTHS = {"cls": 1, "obj": 1, "bbox": 4, "kps": 10}
OUTPUT_NAMES = tuple(f"{kind}_{stride}" for kind in _OUTPUT_WIDTHS for stride in STRIDES)


class FaceDetectionParams(TaskParams):
    """Keys of `model:` for `task: face_detection`."""

    score_threshold: float = Field(
        0.9, ge=0.0, le=1.0, description="Keep faces scoring at least this (cv2.FaceDetectorYN default)."
    )
    nms_threshold: float = Field(
        0.3, ge=0.0, le=1.0, description="Suppress a face overlapping a better one by more IoU than this."
    )
    top_k: int = Field(5000, gt=0, description="Keep at most this many candidates before NMS.")
    input_size: Literal["auto"] | tuple[int, int] = Field(
        "auto",
        description=(
            "Model input [width, height], both multiples of 32: the frame is resized (up or down) to "
            "fit inside keeping its aspect, then padded. 'auto': scale the frame down so its longest side is at "
            "most max_side (never up) and pad to a multiple of 32."
        ),
    )
    max_side: int = Field(
        640, ge=DIVISOR, description="With input_size 'auto': the longest side of the model input."
    )

    @field_validator("input_size", mode="before")
    @classmethod
    def _check_input_size(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != 2:
            raise ValueError("input_size must be 'auto' or [width, height]")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ValueError("input_size must be 'auto' or [width, height] in whole pixels")
        if any(v <= 0 or v % DIVISOR for v in value):
            raise ValueError(f"input_size [width, height] must be positive multiples of {DIVISOR}")
        return tuple(value)


@dataclass(frozen=True)
class _Geometry:
    """How a frame maps onto the model input: scale, resized size and padded size."""

    scale: float
    width: int
    height: int
    padded_width: int
    padded_height: int


class FaceDetection(Task):
    """YuNet: BGR 0-255 input, anchor-free outputs at strides 8/16/32 with 5 landmarks per face."""

    name: ClassVar[str] = "face_detection"
    Params: ClassVar[type[TaskParams]] = FaceDetectionParams
    gives_boxes: ClassVar[bool] = True

    def __init__(self, params: TaskParams) -> None:
        if not isinstance(params, FaceDetectionParams):
            raise TypeError(f"FaceDetection needs FaceDetectionParams, got {type(params).__name__}")
        super().__init__(params)
        self.params: FaceDetectionParams = params
        self._planes: list[np.ndarray] = []
        """The uint8 planes `cv2.split` fills for `_fill`, kept for the next frame of their size."""

    def labels(self) -> tuple[str, ...]:
        return (LABEL,)

    @property
    def input_name(self) -> str:
        return INPUT_NAME

    @property
    def output_names(self) -> tuple[str, ...]:
        return OUTPUT_NAMES

    def dynamic_axes(self) -> dict[str, tuple[int, ...]]:
        """Height and width of `input`, unless the configured size is the one fixed in the file."""
        if self.params.input_size == NATIVE_SIZE:
            return {}
        return {INPUT_NAME: (2, 3)}

    def check_model(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        """Raise ConfigError unless the model has YuNet's input and its 12 named outputs.

        `inputs`/`outputs` may describe the file or the engine as loaded with `dynamic_axes()`.
        """
        if len(inputs) != 1:
            names = ", ".join(repr(t.name) for t in inputs)
            raise ConfigError(f"face_detection expects a model with one input, this one has: {names}")
        spec = inputs[0]
        if spec.name != INPUT_NAME:
            raise ConfigError(f"face_detection expects model input {INPUT_NAME!r}, found {spec.name!r}")
        if np.dtype(spec.dtype) != np.float32 or len(spec.shape) != 4 or spec.shape[1] != 3:
            raise ConfigError(
                f"face_detection expects model input {spec.name!r} float32 [1, 3, H, W], "
                f"found {np.dtype(spec.dtype)} {list(spec.shape)}"
            )
        # A fixed height/width only matters when no rewrite is asked for: with `dynamic_axes()` the
        # engine makes them symbolic, so the file's own size (as `validate` reads it) is no limit.
        height, width = spec.shape[2], spec.shape[3]
        fixed = isinstance(height, int) and isinstance(width, int)
        if not self.dynamic_axes() and fixed and (width, height) != self.params.input_size:
            raise ConfigError(
                f"model input {spec.name!r} is {width}x{height} but model.input_size is "
                f"{list(self.params.input_size)}"
            )
        by_name = {t.name: t for t in outputs}
        for name in OUTPUT_NAMES:
            out = by_name.get(name)
            if out is None:
                raise ConfigError(f"face_detection expects model output {name!r}; the model has none")
            width = _OUTPUT_WIDTHS[name.split("_")[0]]
            if np.dtype(out.dtype) != np.float32 or len(out.shape) != 3 or out.shape[2] != width:
                raise ConfigError(
                    f"face_detection expects model output {name!r} float32 [1, N, {width}], "
                    f"found {np.dtype(out.dtype)} {list(out.shape)}"
                )

    def input_spec(self, frame_width: int, frame_height: int) -> TensorSpec:
        g = self._geometry(frame_width, frame_height)
        return TensorSpec(INPUT_NAME, np.dtype(np.float32), (1, 3, g.padded_height, g.padded_width))

    def preprocess(self, frame: np.ndarray, out: np.ndarray) -> dict[str, Any]:
        """Resize (only when scaling), zero-pad bottom/right, HWC -> CHW as float; meta: the scale."""
        frame_height, frame_width = frame.shape[:2]
        g = self._geometry(frame_width, frame_height)
        image = frame
        if (g.width, g.height) != (frame_width, frame_height):
            image = cv2.resize(frame, (g.width, g.height), interpolation=cv2.INTER_LINEAR)
        return self._fill(image, g, out)

    def preprocess_i420(self, image: np.ndarray, out: np.ndarray) -> dict[str, Any]:
        """`preprocess` of an I420 image, scaled before it is converted where that gives the same
        pixels (`yuv.to_bgr_resized`: 720p and 1080p to 640x360)."""
        frame_width, frame_height = yuv.size(image)
        g = self._geometry(frame_width, frame_height)
        if (g.width, g.height) == (frame_width, frame_height):
            return self._fill(yuv.to_bgr(image), g, out)
        return self._fill(yuv.to_bgr_resized(image, (g.width, g.height)), g, out)

    def scales_planes(self, frame_width: int, frame_height: int) -> bool:
        g = self._geometry(frame_width, frame_height)
        return yuv.scaled_from_planes((frame_width, frame_height), (g.width, g.height))

    def _fill(self, image: np.ndarray, g: _Geometry, out: np.ndarray) -> dict[str, Any]:
        """The model's input from the frame at the model's scale: padded, planar, float."""
        expected = (1, 3, g.padded_height, g.padded_width)
        if out.shape != expected:
            raise ValueError(f"face_detection: input buffer is {out.shape}, expected {expected}")
        planes = out[0]
        # One plane at a time from OpenCV's split: 25-30% faster than casting the transposed view
        # (190 against 265 us at 640x272, bench budget's live job). The split writes into planes
        # kept for the next frame of that size: 60-180 us less a frame at 640x272 than three new.
        for channel, plane in enumerate(cv2.split(image, self._split_planes(g.height, g.width))):
            planes[channel, : g.height, : g.width] = plane
        planes[:, g.height :, :] = 0.0
        planes[:, : g.height, g.width :] = 0.0
        return {"scale": g.scale}

    def _split_planes(self, height: int, width: int) -> list[np.ndarray]:
        """Three uint8 planes of this size for `cv2.split` to fill, the same ones frame after frame."""
        if not self._planes or self._planes[0].shape != (height, width):
            self._planes = [np.empty((height, width), np.uint8) for _ in range(3)]
        return self._planes

    def postprocess(
        self,
        outputs: Mapping[str, np.ndarray],
        meta: Mapping[str, Any],
        frame_width: int,
        frame_height: int,
    ) -> Result:
        """Decode faces as cv2.FaceDetectorYN does (then NMS) and map them back to frame pixels."""
        g = self._geometry(frame_width, frame_height)
        candidates = [self._decode_stride(outputs, stride, g) for stride in STRIDES]
        faces = np.concatenate(candidates, axis=0)  # rows: x, y, w, h, 10 landmark coords, score
        if len(faces) > 1:
            # OpenCV runs NMS on integer boxes (truncated), which decides ties the same way.
            boxes = faces[:, :4].astype(np.int32).tolist()
            keep = cv2.dnn.NMSBoxes(
                boxes,
                faces[:, 14].tolist(),
                self.params.score_threshold,
                self.params.nms_threshold,
                top_k=self.params.top_k,
            )
            faces = faces[np.asarray(keep, dtype=np.int64).reshape(-1)]
        scale = float(meta.get("scale", g.scale))
        return Result(data={detections.KEY: [_face_record(row, scale) for row in faces]})

    def _decode_stride(self, outputs: Mapping[str, np.ndarray], stride: int, g: _Geometry) -> np.ndarray:
        cols, rows = g.padded_width // stride, g.padded_height // stride
        cls = _rows(outputs, f"cls_{stride}", rows * cols)[:, 0]
        obj = _rows(outputs, f"obj_{stride}", rows * cols)[:, 0]
        scores = np.sqrt(np.clip(cls, 0.0, 1.0) * np.clip(obj, 0.0, 1.0))
        keep = np.flatnonzero(scores >= np.float32(self.params.score_threshold))
        if keep.size == 0:
            return np.empty((0, 15), dtype=np.float32)
        bbox = _rows(outputs, f"bbox_{stride}", rows * cols)[keep]
        kps = _rows(outputs, f"kps_{stride}", rows * cols)[keep]
        col = (keep % cols).astype(np.float32)[:, None]
        row = (keep // cols).astype(np.float32)[:, None]
        step = np.float32(stride)
        size = np.exp(bbox[:, 2:4]) * step
        centre = np.concatenate([col + bbox[:, 0:1], row + bbox[:, 1:2]], axis=1) * step
        landmarks = kps.reshape(-1, 5, 2) + np.stack([col, row], axis=2)
        faces = np.empty((keep.size, 15), dtype=np.float32)
        faces[:, 0:2] = centre - size / np.float32(2.0)
        faces[:, 2:4] = size
        faces[:, 4:14] = (landmarks * step).reshape(-1, 10)
        faces[:, 14] = scores[keep]
        return faces

    def _geometry(self, frame_width: int, frame_height: int) -> _Geometry:
        if self.params.input_size == "auto":
            scale = min(1.0, self.params.max_side / max(frame_width, frame_height))
            width = max(1, round(frame_width * scale))
            height = max(1, round(frame_height * scale))
            return _Geometry(scale, width, height, _pad(width), _pad(height))
        target_width, target_height = self.params.input_size
        scale = min(target_width / frame_width, target_height / frame_height)
        width = min(target_width, max(1, round(frame_width * scale)))
        height = min(target_height, max(1, round(frame_height * scale)))
        return _Geometry(scale, width, height, target_width, target_height)


def _pad(size: int) -> int:
    return ((size - 1) // DIVISOR + 1) * DIVISOR


def _rows(outputs: Mapping[str, np.ndarray], name: str, count: int) -> np.ndarray:
    """Output `name` as [count, k] float32, checked against the grid of the padded input."""
    value = outputs[name]
    if value.ndim != 3 or value.shape[1] != count:
        raise ConfigError(
            f"face_detection: model output {name!r} has shape {list(value.shape)}, expected "
            f"[1, {count}, k] for this input size"
        )
    return np.asarray(value[0], dtype=np.float32)


def _face_record(row: np.ndarray, scale: float) -> dict[str, Any]:
    coords = row[:14].astype(np.float64) / scale
    record = detections.make((0.0, 0.0, 0.0, 0.0), float(row[14]), 0, LABEL)
    record["box"] = [round(float(v), 2) for v in coords[:4]]  # x, y, w, h as YuNet gives them
    record["landmarks"] = [[round(float(coords[i]), 2), round(float(coords[i + 1]), 2)] for i in range(4, 14, 2)]
    return record
