"""What a task (a model family) provides: preprocessing, output decoding and its parameters.

A task is chosen by name in `model.task`; the built-in ones are registered in `framewire.stages.tasks`, and a
user's own task is named as an entry point `package.module:Class`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from framewire.pipeline.frame import Frame
from framewire.pipeline.wire.tensors import TensorSpec


class TaskParams(BaseModel):
    """Base of a task's parameters (the keys of `model:` beside `path` and `task`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class Result:
    """A task's answer for one frame.

    `data` is JSON-serialisable and is what subscribers and JSONL files receive, in frame pixels
    (for example `{"detections": [{"box": [x, y, w, h], "score": 0.98, "class_id": 0, "label": "face",
    "landmarks": [[x, y], ...]}]}`; the shape is stages.detections' and the README's wire format).
    `arrays` holds tensors the composite needs but that are too big or too raw for JSON (a matte).
    """

    data: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelInfo:
    """What the model file says before an engine loads it: its tensors as declared in the file, and
    its metadata (ONNX `metadata_props`: Ultralytics writes `names`, `imgsz` and `stride` there,
    PaddleOCR's recogniser its `character` list)."""

    path: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    metadata: Mapping[str, str] = field(default_factory=dict)


class Task(ABC):
    """A model family: how to prepare its input and decode its outputs. No engine, no I/O."""

    name: ClassVar[str]
    Params: ClassVar[type[TaskParams]] = TaskParams
    gives_boxes: ClassVar[bool] = False
    """Its results hold `detections` with boxes, so secondary models and tracking can follow it."""

    def __init__(self, params: TaskParams) -> None:
        self.params = params

    def use_model(self, info: ModelInfo) -> None:
        """Read what the task takes from the model file itself (input size, output format, labels);
        the composition root calls it right after building the task. Raise ConfigError naming the
        key when the file does not fit the parameters."""
        return None

    def labels(self) -> tuple[str, ...] | None:
        """The names of the classes its detections carry, when known (checks `classes:` keys)."""
        return None

    def summary(self) -> str:
        """One line on how the model is read (format, input, labels), for `validate`."""
        return ""

    def warnings(self) -> list[str]:
        """What in the config likely does not fit the model, though it runs (preprocessing other
        than the model family's usual one): `validate` and `run` say each in a warning line."""
        return []

    @abstractmethod
    def check_model(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        """Raise `ConfigError` naming the model tensor that does not fit this task."""

    def dynamic_axes(self) -> dict[str, tuple[int, ...]]:
        """Input axes that the engine must make dynamic before loading (e.g. height and width)."""
        return {}

    @property
    @abstractmethod
    def input_name(self) -> str:
        """Name of the model input that `preprocess` fills."""

    @property
    def output_names(self) -> tuple[str, ...] | None:
        """Model outputs that `postprocess` needs; None for all of them."""
        return None

    @abstractmethod
    def input_spec(self, frame_width: int, frame_height: int) -> TensorSpec:
        """The model input (batch of one) for frames of this size."""

    @abstractmethod
    def preprocess(self, frame: np.ndarray, out: np.ndarray) -> dict[str, Any]:
        """Fill `out` (shaped as `input_spec`) from a BGR uint8 frame; return small JSON-able meta."""

    def preprocess_frame(self, frame: Frame, out: np.ndarray) -> dict[str, Any]:
        """What the preprocess stage calls: `preprocess` of the frame's image by default. A task whose
        model takes more than the image (a region from a step, audio features) reads the frame's
        `meta` and `tensors` here, and may add inline tensors for its other inputs."""
        image = frame.region("image")
        if image.ndim == 2:  # I420 (framewire.media.yuv): the task's own path, or BGR first
            return self.preprocess_i420(image, out)
        return self.preprocess(image, out)

    def preprocess_i420(self, image: np.ndarray, out: np.ndarray) -> dict[str, Any]:
        """`preprocess` of an I420 image (a job that keeps its frames as YUV): of its BGR, the very
        pixels the decoder would have written, so the model sees what it sees in a BGR job. A task
        that scales the frame first may scale the planes before converting where that gives the same
        pixels (`yuv.to_bgr_resized`); scaling them to other sizes would give the model other chroma
        (12 of 168 frames of bigbuckbunny.mp4 found a face at 0.7 in one and not the other)."""
        from framewire.media import yuv

        return self.preprocess(yuv.to_bgr(image), out)

    def scales_planes(self, frame_width: int, frame_height: int) -> bool:
        """Whether `preprocess_i420` scales an I420 frame of this size before converting it (cheaper
        than converting the frame whole): a job with no video output keeps its frames as I420 then
        (`framewire.app.compose.frames.yuv_frames`). False by default."""
        return False

    def feeds(self, frame: Frame) -> dict[str, np.ndarray]:
        """The model inputs of one preprocessed frame (batch of one), by name: the slot's `input`
        region by default; a model with several inputs adds the others (inline tensors, constants)."""
        return {self.input_name: frame.region("input")}

    @abstractmethod
    def postprocess(
        self,
        outputs: Mapping[str, np.ndarray],
        meta: Mapping[str, Any],
        frame_width: int,
        frame_height: int,
    ) -> Result:
        """Decode one frame's model outputs (batch dimension of one) into a `Result`."""
