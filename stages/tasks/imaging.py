"""Preparing a frame for an image model, from the config: size, letterbox or stretch, channels, scale.

The keys cover what detector and classifier exports expect: Ultralytics (letterbox centred, pad 114,
RGB, 1/255), YOLOX (letterbox top-left, pad 114, BGR, 0-255), torchvision classifiers (stretch, RGB,
1/255, ImageNet mean/std). `Geometry` maps boxes found in the model input back to frame pixels.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import cv2
import numpy as np
from pydantic import Field, field_validator

from framewire.media import yuv
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages.tasks.base import ModelInfo, TaskParams

Float3 = tuple[float, float, float]


class ImageParams(TaskParams):
    """How a frame becomes the model's input: keys of `model:` (and of `secondary:` items)."""

    input_size: Literal["model", "auto"] | tuple[int, int] = Field(
        "model",
        description="Model input [width, height]; 'model': the size fixed in the file (or, for a "
        "dynamic one, the `imgsz` Ultralytics writes in its metadata); 'auto': the frame scaled so its "
        "longest side is max_side, the other padded to a multiple of size_multiple (the model's height "
        "and width are made dynamic, as YuNet's are).",
    )
    max_side: int = Field(640, ge=16, le=8192, description="With input_size 'auto': the longest side.")
    size_multiple: int = Field(
        32, ge=1, le=256, description="With input_size 'auto': sides are multiples of this."
    )
    resize: Literal["letterbox", "stretch", "height"] = Field(
        "letterbox",
        description="letterbox: keep the aspect and pad; stretch: resize to the input size; height: "
        "to the input's height keeping the aspect, the width capped at the input's, padded on the "
        "right (PaddleOCR's text classifier and recogniser).",
    )
    rounding: Literal["round", "floor"] = Field(
        "round",
        description="Letterbox: the scaled frame's size in whole pixels, rounded (Ultralytics) or "
        "floored (YOLOX's own preprocessing).",
    )
    pad_value: float = Field(
        114, ge=0, le=255, description="Padding, in 0-255 pixel units (127.5: 0 after (x/255 - 0.5) / 0.5)."
    )
    pad: Literal["center", "top_left"] = Field(
        "center", description="Where the letterboxed frame sits: centred (Ultralytics) or top-left (YOLOX)."
    )
    channels: Literal["rgb", "bgr"] = Field("rgb", description="Channel order the model expects.")
    scale: Literal["1/255", "none"] = Field(
        "1/255", description="Pixel scale before mean/std: 1/255 (0-1) or none (0-255)."
    )
    mean: Float3 = Field((0.0, 0.0, 0.0), description="Subtracted per channel (model order), after scale.")
    std: Float3 = Field((1.0, 1.0, 1.0), description="Divided per channel (model order), after mean.")

    @field_validator("input_size", mode="before")
    @classmethod
    def _check_size(cls, value: Any) -> Any:
        if value in ("model", "auto"):
            return value
        if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != 2:
            raise ValueError("input_size must be 'model', 'auto' or [width, height]")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
            raise ValueError("input_size [width, height] must be positive whole pixels")
        return tuple(value)

    @field_validator("std")
    @classmethod
    def _std_not_zero(cls, value: Float3) -> Float3:
        if any(v == 0 for v in value):
            raise ValueError("std must not be 0")
        return value


@dataclass(frozen=True)
class Geometry:
    """Where a frame lands in the model input: input size, scale per axis, and padding offset."""

    width: int
    height: int
    scale_x: float
    scale_y: float
    pad_x: int
    pad_y: int
    resized_width: int
    resized_height: int

    def to_frame(self, boxes_xyxy: np.ndarray, frame_width: int, frame_height: int) -> np.ndarray:
        """Corner boxes in model-input pixels -> frame pixels, clipped to the frame."""
        out = np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4).copy()
        out[:, [0, 2]] = (out[:, [0, 2]] - self.pad_x) / self.scale_x
        out[:, [1, 3]] = (out[:, [1, 3]] - self.pad_y) / self.scale_y
        out[:, [0, 2]] = np.clip(out[:, [0, 2]], 0, frame_width)
        out[:, [1, 3]] = np.clip(out[:, [1, 3]], 0, frame_height)
        return out

    def points_to_frame(self, points: np.ndarray) -> np.ndarray:
        """[..., 2] points in model-input pixels -> frame pixels (not clipped)."""
        out = np.asarray(points, dtype=np.float64).copy()
        out[..., 0] = (out[..., 0] - self.pad_x) / self.scale_x
        out[..., 1] = (out[..., 1] - self.pad_y) / self.scale_y
        return out


class ImageInput:
    """One image input of a model, prepared as `ImageParams` say. `bind` reads the model's input."""

    def __init__(self, params: ImageParams, task: str) -> None:
        self.params = params
        self.task = task
        self.name = "images"
        self.fixed: tuple[int, int] | None = None
        """(width, height) fixed in the model file, if they are."""
        self.metadata_size: tuple[int, int] | None = None
        self.nhwc = False
        """The input is [N, H, W, 3] (TensorFlow exports), not [N, 3, H, W]."""
        self.dtype = np.dtype(np.float32)
        """float32, or uint8: the frame's 0-255 pixels as they are (quantised TFLite exports)."""

    def _check_raw(self, spec: TensorSpec) -> None:
        """A uint8 input takes raw pixels: a scale, mean or std written in the config cannot apply."""
        p = self.params
        given = [k for k in ("scale", "mean", "std") if k in p.model_fields_set]
        if (p.scale, p.mean, p.std) != ("none", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)) and given:
            raise ConfigError(
                f"model.{given[0]}: the model's input {spec.name!r} is uint8 (raw 0-255 pixels): "
                f"leave out scale, mean and std (or scale: none)"
            )

    def bind(self, info: ModelInfo) -> TensorSpec:
        """Take the input's name and fixed size from the model file; the one image input."""
        images = [t for t in info.inputs if len(t.shape) == 4]
        if len(info.inputs) != 1 or not images:
            found = ", ".join(f"{t.name!r} {list(t.shape)}" for t in info.inputs)
            raise ConfigError(
                f"{self.task} expects a model with one image input [N, 3, H, W]; this one has: {found}"
            )
        spec = images[0]
        self.nhwc = spec.shape[3] == 3 and spec.shape[1] != 3
        channels = spec.shape[3] if self.nhwc else spec.shape[1]
        self.dtype = np.dtype(spec.dtype)
        if self.dtype not in (np.float32, np.uint8) or (isinstance(channels, int) and channels != 3):
            raise ConfigError(
                f"{self.task} expects model input {spec.name!r} float32 or uint8, [N, 3, H, W] or "
                f"[N, H, W, 3], found {self.dtype} {list(spec.shape)}"
            )
        if self.dtype == np.uint8:
            self._check_raw(spec)
        self.name = spec.name
        height, width = (spec.shape[1], spec.shape[2]) if self.nhwc else (spec.shape[2], spec.shape[3])
        self.fixed = (width, height) if isinstance(width, int) and isinstance(height, int) else None
        self.metadata_size = _imgsz(info.metadata)
        if self.params.input_size == "model" and self.fixed is None and self.metadata_size is None:
            raise ConfigError(
                f"model.input_size: the model's input {spec.name!r} {list(spec.shape)} has no fixed size: "
                f"give [width, height] or auto"
            )
        return spec

    def dynamic_axes(self) -> dict[str, tuple[int, ...]]:
        """Height and width made dynamic when the configured size is not the one fixed in the file."""
        size = self.params.input_size
        if self.fixed is None or size == "model" or size == self.fixed:
            return {}
        return {self.name: (1, 2) if self.nhwc else (2, 3)}

    def geometry(self, frame_width: int, frame_height: int) -> Geometry:
        width, height = self._size(frame_width, frame_height)
        if self.params.resize == "stretch":
            return Geometry(width, height, width / frame_width, height / frame_height, 0, 0, width, height)
        if self.params.resize == "height":
            resized_w = min(width, int(math.ceil(height * frame_width / frame_height)))
            return Geometry(
                width, height, resized_w / frame_width, height / frame_height, 0, 0, resized_w, height
            )
        ratio = min(width / frame_width, height / frame_height)
        whole = round if self.params.rounding == "round" else int
        resized_w = min(width, max(1, whole(frame_width * ratio)))
        resized_h = min(height, max(1, whole(frame_height * ratio)))
        pad_x, pad_y = (
            (0, 0) if self.params.pad == "top_left" else ((width - resized_w) // 2, (height - resized_h) // 2)
        )
        return Geometry(width, height, ratio, ratio, pad_x, pad_y, resized_w, resized_h)

    def spec(self, frame_width: int, frame_height: int) -> TensorSpec:
        g = self.geometry(frame_width, frame_height)
        shape = (1, g.height, g.width, 3) if self.nhwc else (1, 3, g.height, g.width)
        return TensorSpec(self.name, self.dtype, shape)

    def scales_planes(self, frame_width: int, frame_height: int) -> bool:
        """Whether `fill` scales an I420 frame of this size before converting it."""
        g = self.geometry(frame_width, frame_height)
        return yuv.scaled_from_planes((frame_width, frame_height), (g.resized_width, g.resized_height))

    def fill(self, frame: np.ndarray, out: np.ndarray) -> Geometry:
        """Write the prepared frame (BGR, or I420: `framewire.media.yuv`) into `out` [1, 3, H, W]
        or [3, H, W] ([1, H, W, 3] or [H, W, 3] for an NHWC input); return its geometry."""
        frame_width, frame_height = yuv.size(frame)
        g = self.geometry(frame_width, frame_height)
        planes = out[0] if out.ndim == 4 else out
        if self.nhwc:
            planes = planes.transpose(2, 0, 1)
        if planes.shape != (3, g.height, g.width):
            raise ValueError(
                f"{self.task}: input buffer is {out.shape}, expected (1, 3, {g.height}, {g.width})"
            )
        size = (g.resized_width, g.resized_height)
        if yuv.is_i420(frame):  # scaled before it is converted where that gives the same pixels
            same = size == (frame_width, frame_height)
            image = yuv.to_bgr(frame) if same else yuv.to_bgr_resized(frame, size)
        elif size != (frame_width, frame_height):
            image = cv2.resize(frame, size, interpolation=cv2.INTER_LINEAR)
        else:
            image = frame
        gain, offset = self._affine()
        order = (2, 1, 0) if self.params.channels == "rgb" else (0, 1, 2)
        padded = (g.resized_width, g.resized_height) != (g.width, g.height)
        if self.dtype == np.uint8:
            _fill_raw(image, planes, order, g, round(self.params.pad_value) if padded else None)
            return g
        for plane, source in enumerate(order):
            target = planes[plane]
            if padded:
                target[...] = self.params.pad_value * gain[plane] + offset[plane]
            region = target[g.pad_y : g.pad_y + g.resized_height, g.pad_x : g.pad_x + g.resized_width]
            np.multiply(image[:, :, source], gain[plane], out=region, casting="unsafe")
            region += offset[plane]
        return g

    def _affine(self) -> tuple[np.ndarray, np.ndarray]:
        """Per model channel: value = pixel * gain + offset ((pixel * scale - mean) / std)."""
        scale = 1.0 / 255.0 if self.params.scale == "1/255" else 1.0
        mean = np.asarray(self.params.mean, dtype=np.float64)
        std = np.asarray(self.params.std, dtype=np.float64)
        return (scale / std).astype(np.float32), (-mean / std).astype(np.float32)

    def _size(self, frame_width: int, frame_height: int) -> tuple[int, int]:
        size = self.params.input_size
        if size == "auto":
            ratio = self.params.max_side / max(frame_width, frame_height)
            multiple = self.params.size_multiple
            return (
                _round_up(max(1, round(frame_width * ratio)), multiple),
                _round_up(max(1, round(frame_height * ratio)), multiple),
            )
        if size == "model":
            found = self.fixed or self.metadata_size
            if found is None:
                raise ConfigError(f"model.input_size: the model input {self.name!r} has no fixed size")
            return found
        return size


def _fill_raw(
    image: np.ndarray, planes: np.ndarray, order: Sequence[int], g: Geometry, pad: int | None
) -> None:
    """The resized frame's 0-255 pixels copied as they are into uint8 planes (no scale, no mean)."""
    for plane, source in enumerate(order):
        if pad is not None:
            planes[plane][...] = pad
        planes[plane][g.pad_y : g.pad_y + g.resized_height, g.pad_x : g.pad_x + g.resized_width] = image[
            :, :, source
        ]


def _round_up(value: int, multiple: int) -> int:
    return ((value - 1) // multiple + 1) * multiple


def _imgsz(metadata: Mapping[str, str]) -> tuple[int, int] | None:
    """(width, height) from Ultralytics' `imgsz` metadata ('[h, w]' or 'n'), if present."""
    text = metadata.get("imgsz")
    if text is None:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, int):
        return value, value
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return int(value[1]), int(value[0])
    return None
