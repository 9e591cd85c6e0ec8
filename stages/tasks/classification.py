"""An image classifier, on whole frames (`model:`) or on detected objects (`secondary:`).

Outputs the top-k classes (softmax applied when the model gives logits), or with `embedding: true`
the output vector itself, kept as an array (a re-identification or similarity model).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages import detections
from framewire.stages.tasks.base import ModelInfo, Result, Task, TaskParams
from framewire.stages.tasks.imaging import ImageInput, ImageParams
from framewire.stages.tasks.labels import label_of, read_labels
from framewire.stages.tasks.objects import CropBatch, ObjectResult, ObjectTask

log = logging.getLogger(__name__)

FRAME_EMBEDDING = detections.EMBEDDINGS + "frame"


class ClassificationParams(ImageParams):
    """Keys of `model:` or of a `secondary:` item for `task: classification`."""

    resize: Literal["letterbox", "stretch", "height"] = Field(
        "stretch",
        description="stretch (classifiers' usual), letterbox or height: how the image fits the input.",
    )
    labels: Path | tuple[str, ...] | None = Field(
        None, description="A labels file (one per line) or a list; default: the model's metadata `names`."
    )
    top_k: int = Field(1, ge=1, le=1000, description="How many classes to report, best first.")
    softmax: Literal["auto", "yes", "no"] = Field(
        "auto", description="Apply softmax to the output; auto: when it is not already probabilities."
    )
    score_threshold: float = Field(0.0, ge=0.0, le=1.0, description="Leave out classes scoring below this.")
    output: str | None = Field(None, description="The output to read; default: the first one.")
    embedding: bool = Field(False, description="Report the output vector (an embedding) instead of classes.")
    normalize: bool = Field(True, description="With embedding: scale the vector to unit length.")


class Classification(Task, ObjectTask):
    """One image input [N, 3, H, W]; an output [N, C] of class scores (or [N, C, 1, 1])."""

    name: ClassVar[str] = "classification"
    Params: ClassVar[type[TaskParams]] = ClassificationParams
    key = "model"
    """The config key its errors name (a secondary's is `secondary.<index>`)."""

    def __init__(self, params: TaskParams) -> None:
        if not isinstance(params, ClassificationParams):
            raise TypeError(f"Classification needs ClassificationParams, got {type(params).__name__}")
        super().__init__(params)
        self.params: ClassificationParams = params
        self.image = ImageInput(params, self.name)
        self._output = params.output or ""
        self._classes: int | None = None
        self._labels: tuple[str, ...] | None = None

    def use_model(self, info: ModelInfo) -> None:
        if self.key != "model" and self.params.input_size == "auto":
            raise ConfigError(
                f"{self.key}.input_size: auto does not fit crops batched together: "
                f"give [width, height] or model"
            )
        self.image.bind(info)
        self._output, self._classes = self._find_output(info.outputs)
        labels, source = read_labels(_labels_param(self.params), info.metadata, f"{self.key}.labels")
        if labels is not None and self._classes is not None and len(labels) != self._classes:
            raise ConfigError(
                f"{self.key}.labels: {len(labels)} labels ({source}) but the model's output "
                f"{self._output!r} has {self._classes} classes"
            )
        self._labels = labels

    def _find_output(self, outputs: Sequence[TensorSpec]) -> tuple[str, int | None]:
        wanted = self.params.output or (outputs[0].name if outputs else "")
        spec = next((o for o in outputs if o.name == wanted), None)
        if spec is None:
            raise ConfigError(f"{self.key}.output: the model has no output {wanted!r}")
        shape = list(spec.shape)
        if len(shape) < 2 or any(d != 1 for d in shape[2:]):
            raise ConfigError(f"classification expects output {spec.name!r} as [N, C], found {shape}")
        classes = shape[1]
        return spec.name, classes if isinstance(classes, int) else None

    def labels(self) -> tuple[str, ...] | None:
        return self._labels

    def summary(self) -> str:
        what = (
            "an embedding" if self.params.embedding else f"top {self.params.top_k} of {self._classes} classes"
        )
        where = f"input {self.image.name!r}, {self.params.resize}"
        return f"classification: {what} from output {self._output!r}; {where}"

    @property
    def input_name(self) -> str:
        return self.image.name

    @property
    def output_names(self) -> tuple[str, ...] | None:
        return (self._output,) if self._output else None

    def dynamic_axes(self) -> dict[str, tuple[int, ...]]:
        return self.image.dynamic_axes()

    def check_model(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        if not any(t.name == self.image.name for t in inputs):
            raise ConfigError(f"classification: the model has no input {self.image.name!r}")
        self._find_output(outputs)

    # --- on whole frames ---------------------------------------------------------------------

    def input_spec(self, frame_width: int, frame_height: int) -> TensorSpec:
        return self.image.spec(frame_width, frame_height)

    def preprocess(self, frame: np.ndarray, out: np.ndarray) -> dict[str, Any]:
        self.image.fill(frame, out)
        return {}

    def preprocess_i420(self, image: np.ndarray, out: np.ndarray) -> dict[str, Any]:
        """An I420 image goes to `fill` as it is: it scales the planes before converting where that
        gives the same pixels (`yuv.to_bgr_resized`)."""
        return self.preprocess(image, out)

    def scales_planes(self, frame_width: int, frame_height: int) -> bool:
        return self.image.scales_planes(frame_width, frame_height)

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], meta: Mapping[str, Any], frame_width: int, frame_height: int
    ) -> Result:
        row = self._rows(outputs, 1)[0]
        if self.params.embedding:
            vector = self._embedding(row)
            return Result(
                {"embedding": {"array": FRAME_EMBEDDING, "size": len(vector)}},
                {FRAME_EMBEDDING: vector[None]},
            )
        return Result({"classes": self._top(row)})

    # --- on objects --------------------------------------------------------------------------

    def batches(self, crops: Sequence[np.ndarray], limit: int) -> list[CropBatch]:
        out: list[CropBatch] = []
        step = max(1, limit)
        for start in range(0, len(crops), step):
            chunk = crops[start : start + step]
            height, width = chunk[0].shape[:2]
            g = self.image.geometry(width, height)
            feeds = np.empty((len(chunk), 3, g.height, g.width), dtype=np.float32)
            for i, crop in enumerate(chunk):
                self.image.fill(np.ascontiguousarray(crop), feeds[i])
            out.append(CropBatch(list(range(start, start + len(chunk))), feeds))
        return out

    def decode(self, outputs: Mapping[str, np.ndarray], count: int) -> list[ObjectResult]:
        rows = self._rows(outputs, count)
        if self.params.embedding:
            return [ObjectResult({"size": int(rows.shape[1])}, self._embedding(row)) for row in rows]
        results = []
        for row in rows:
            top = self._top(row)
            best = dict(top[0]) if top else None
            if best is not None and self.params.top_k > 1:
                best["top"] = top
            results.append(ObjectResult(best))
        return results

    # --- shared ------------------------------------------------------------------------------

    def _rows(self, outputs: Mapping[str, np.ndarray], count: int) -> np.ndarray:
        name = self._output or next(iter(outputs))
        value = np.asarray(outputs[name], dtype=np.float32)
        rows = value.reshape(value.shape[0], -1) if value.ndim >= 2 else value.reshape(1, -1)
        if rows.shape[0] != count:
            raise ValueError(f"classification: output {name!r} has {rows.shape[0]} rows for {count} inputs")
        return rows

    def _top(self, row: np.ndarray) -> list[dict[str, Any]]:
        scores = row.astype(np.float64)
        if self.params.softmax == "yes" or (self.params.softmax == "auto" and not _probabilities(scores)):
            scores = np.exp(scores - scores.max())
            scores /= scores.sum()
        order = np.argsort(-scores, kind="stable")[: self.params.top_k]
        return [
            {"class_id": int(i), "label": label_of(self._labels, int(i)), "score": round(float(scores[i]), 4)}
            for i in order
            if scores[i] >= self.params.score_threshold
        ]

    def _embedding(self, row: np.ndarray) -> np.ndarray:
        vector = row.astype(np.float32)
        norm = float(np.linalg.norm(vector))
        return vector / norm if self.params.normalize and norm > 0 else vector


def _probabilities(scores: np.ndarray) -> bool:
    return bool(scores.min() >= 0.0 and abs(scores.sum() - 1.0) < 1e-3)


def _labels_param(params: ClassificationParams) -> Path | tuple[str, ...] | None:
    return Path(params.labels) if isinstance(params.labels, Path) else params.labels
