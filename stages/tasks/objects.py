"""What a secondary model (run on crops of detected objects) provides: cropping, batching, decoding.

A cascade (stages.cascade) crops each selected object out of the frame, lets the task turn the crops
of one frame into as few model inputs as it can (`batches`), runs them, and attaches what `decode`
returns to each object: JSON `attributes` under the secondary's name, and optionally an embedding
kept as an array (for the composite and the ZeroMQ output, not the JSON).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import cv2
import numpy as np

from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages import detections
from framewire.stages.tasks.base import ModelInfo, TaskParams


@dataclass
class ObjectResult:
    """A secondary model's answer for one object."""

    attributes: Any
    """JSON-able; attached as `attributes[<secondary name>]`. None: nothing to attach."""
    embedding: np.ndarray | None = None
    """A vector kept as an array row (`embeddings.<secondary name>`), not in the JSON."""


@dataclass
class CropBatch:
    """Crops that run as one inference: their indices (in the order given) and the model input."""

    indices: list[int]
    feeds: np.ndarray


class ObjectTask(ABC):
    """A model family run on objects: crops in, one `ObjectResult` per crop out. No engine, no I/O."""

    name: ClassVar[str]
    Params: ClassVar[type[TaskParams]] = TaskParams
    key: str = "secondary"
    """The config key its errors name (`secondary.<index>`, set when it is built)."""

    def __init__(self, params: TaskParams) -> None:
        self.params = params

    def use_model(self, info: ModelInfo) -> None:
        """Read what the task takes from the model file (input name and size, characters, labels)."""
        return None

    @abstractmethod
    def check_model(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        """Raise ConfigError naming the model tensor that does not fit this task."""

    def dynamic_axes(self) -> dict[str, tuple[int, ...]]:
        """Input axes the engine makes dynamic before loading; the batch axis is added by the cascade."""
        return {}

    @property
    @abstractmethod
    def input_name(self) -> str:
        """The model input the crops go into."""

    @property
    def output_names(self) -> tuple[str, ...] | None:
        return None

    def summary(self) -> str:
        return ""

    def labels(self) -> tuple[str, ...] | None:
        """The names of the classes the model tells apart, for `validate`; None when it has none."""
        return None

    def crop(self, image: np.ndarray, detection: Mapping[str, Any], expand: float) -> np.ndarray | None:
        """The object's pixels (BGR): cut along its `quad` when it has one (a rotated text box),
        else its box grown by `expand` on each side, clipped; None if empty."""
        if detection.get("quad") is not None:
            return quad_crop(image, detection["quad"])
        return axis_crop(image, detection, expand)

    @abstractmethod
    def batches(self, crops: Sequence[np.ndarray], limit: int) -> list[CropBatch]:
        """The crops as model inputs of at most `limit` crops each (every crop in exactly one)."""

    @abstractmethod
    def decode(self, outputs: Mapping[str, np.ndarray], count: int) -> list[ObjectResult]:
        """One result per crop of a batch of `count`, in its order."""


def quad_crop(image: np.ndarray, quad: Any) -> np.ndarray | None:
    """The quadrilateral (tl, tr, br, bl) warped to an upright rectangle (PaddleOCR's
    get_rotate_crop_image, without its turn of tall crops)."""
    points = np.asarray(quad, dtype=np.float32).reshape(4, 2)
    width = int(max(np.linalg.norm(points[0] - points[1]), np.linalg.norm(points[2] - points[3])))
    height = int(max(np.linalg.norm(points[0] - points[3]), np.linalg.norm(points[1] - points[2])))
    if width < 1 or height < 1:
        return None
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(points, target)
    return cv2.warpPerspective(
        image, matrix, (width, height), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC
    )


def axis_crop(image: np.ndarray, detection: Mapping[str, Any], expand: float) -> np.ndarray | None:
    x1, y1, x2, y2 = detections.xyxy(detection)
    grow_x, grow_y = (x2 - x1) * expand, (y2 - y1) * expand
    height, width = image.shape[:2]
    left, top = max(0, int(np.floor(x1 - grow_x))), max(0, int(np.floor(y1 - grow_y)))
    right, bottom = min(width, int(np.ceil(x2 + grow_x))), min(height, int(np.ceil(y2 + grow_y)))
    if right - left < 1 or bottom - top < 1:
        return None
    return image[top:bottom, left:right]
