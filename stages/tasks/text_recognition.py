"""Text recognition with a CTC model (PaddleOCR's recogniser), on the text boxes of a detector.

As rapidocr-onnxruntime does it (its reference pipeline): each text box is cut out along its four
corners (a perspective warp; a box twice as tall as wide, or more, is turned upright), resized to
height 48 keeping its aspect, scaled to [-1, 1] and zero-padded on the right to the widest crop of
its batch (at least 320 wide); the crops of a batch are sorted by aspect first, so that crops of
similar width share one inference. The output [N, T, C] is decoded greedily: the best class at
each step, repeats merged, blanks dropped, the characters from the model's metadata `character`
(the CTC blank first, a space last), the score the mean probability of the characters kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import cv2
import numpy as np
from pydantic import Field, FilePath

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages.tasks.base import ModelInfo, TaskParams
from framewire.stages.tasks.objects import CropBatch, ObjectResult, ObjectTask, axis_crop, quad_crop


class TextRecognitionParams(TaskParams):
    """Keys of a `secondary:` item for `task: text_recognition` (defaults: rapidocr-onnxruntime's)."""

    height: int = Field(48, ge=8, le=512, description="Model input height; crops are resized to it.")
    min_width: int = Field(320, ge=8, le=8192, description="Narrowest model input; crops are padded to it.")
    characters: FilePath | None = Field(
        None, description="A characters file (one per line); default: the model's metadata `character`."
    )
    channels: Literal["bgr", "rgb"] = Field(
        "bgr", description="Channel order fed to the model (rapidocr: BGR)."
    )
    min_score: float = Field(
        0.5, ge=0.0, le=1.0, description="Texts scoring below this are not attached (rapidocr's text_score)."
    )
    upright_ratio: float = Field(
        1.5, ge=1.0, description="A crop at least this many times taller than wide is turned upright."
    )


class TextRecognition(ObjectTask):
    """PaddleOCR CTC recogniser: input [N, 3, 48, W], output [N, T, len(characters) + 2]."""

    name: ClassVar[str] = "text_recognition"
    Params: ClassVar[type[TaskParams]] = TextRecognitionParams

    def __init__(self, params: TaskParams) -> None:
        if not isinstance(params, TextRecognitionParams):
            raise TypeError(f"TextRecognition needs TextRecognitionParams, got {type(params).__name__}")
        super().__init__(params)
        self.params: TextRecognitionParams = params
        self._input = "x"
        self._output = ""
        self.characters: tuple[str, ...] = ()

    def use_model(self, info: ModelInfo) -> None:
        self.check_model(info.inputs, info.outputs)
        if self.params.characters is not None:
            text = Path(self.params.characters).read_text(encoding="utf-8")
            source = f"file {self.params.characters}"
        elif "character" in info.metadata:
            text, source = info.metadata["character"], "model metadata 'character'"
        else:
            raise ConfigError(
                f"{self.key}.characters: the model has no 'character' metadata: give a characters file"
            )
        self.characters = ("", *text.splitlines(), " ")  # index 0: the CTC blank
        classes = next(o for o in info.outputs if o.name == self._output).shape[-1]
        if isinstance(classes, int) and classes != len(self.characters):
            raise ConfigError(
                f"{self.key}.characters: {len(self.characters) - 2} characters ({source}) but the model's "
                f"output {self._output!r} has {classes} classes (characters + blank + space)"
            )

    def summary(self) -> str:
        count = len(self.characters) - 2
        return f"text_recognition: CTC over {count} characters, input height {self.params.height}"

    @property
    def input_name(self) -> str:
        return self._input

    @property
    def output_names(self) -> tuple[str, ...] | None:
        return (self._output,) if self._output else None

    def check_model(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        if len(inputs) != 1 or len(inputs[0].shape) != 4:
            found = ", ".join(f"{t.name!r} {list(t.shape)}" for t in inputs)
            raise ConfigError(f"text_recognition expects one image input [N, 3, H, W]; the model has {found}")
        if len(outputs) != 1 or len(outputs[0].shape) != 3:
            found = ", ".join(f"{t.name!r} {list(t.shape)}" for t in outputs)
            raise ConfigError(f"text_recognition expects one output [N, T, C]; the model has {found}")
        self._input, self._output = inputs[0].name, outputs[0].name

    def crop(self, image: np.ndarray, detection: Mapping[str, Any], expand: float) -> np.ndarray | None:
        """Along the text box's corners when it has them (rapidocr's get_rotate_crop_image)."""
        quad = detection.get("quad")
        if quad is None:
            return axis_crop(image, detection, expand)
        crop = quad_crop(image, quad)
        if crop is not None and crop.shape[0] / crop.shape[1] >= self.params.upright_ratio:
            crop = np.rot90(crop)
        return crop

    def batches(self, crops: Sequence[np.ndarray], limit: int) -> list[CropBatch]:
        ratios = np.array([c.shape[1] / float(c.shape[0]) for c in crops])
        order = np.argsort(ratios, kind="stable")
        height, step = self.params.height, max(1, limit)
        out: list[CropBatch] = []
        for start in range(0, len(order), step):
            chunk = [int(i) for i in order[start : start + step]]
            widest = max(self.params.min_width / height, *(float(ratios[i]) for i in chunk))
            width = int(height * widest)
            feeds = np.zeros((len(chunk), 3, height, width), dtype=np.float32)
            for row, index in enumerate(chunk):
                self._fill(crops[index], feeds[row], ratios[index], width)
            out.append(CropBatch(chunk, feeds))
        return out

    def _fill(self, crop: np.ndarray, out: np.ndarray, ratio: float, width: int) -> None:
        height = self.params.height
        resized_width = min(width, int(math.ceil(height * ratio)))
        resized = cv2.resize(np.ascontiguousarray(crop), (resized_width, height)).astype(np.float32)
        if self.params.channels == "rgb":
            resized = resized[:, :, ::-1]
        out[:, :, :resized_width] = resized.transpose(2, 0, 1) / np.float32(255.0) / np.float32(
            0.5
        ) - np.float32(1.0)

    def decode(self, outputs: Mapping[str, np.ndarray], count: int) -> list[ObjectResult]:
        name = self._output or next(iter(outputs))
        preds = np.asarray(outputs[name], dtype=np.float32)
        if preds.ndim != 3 or preds.shape[0] != count:
            raise ValueError(
                f"text_recognition: output {name!r} has shape {list(preds.shape)} for {count} crops"
            )
        best = preds.argmax(axis=2)
        probability = preds.max(axis=2)
        results = []
        for indices, probs in zip(best, probability, strict=True):
            keep = np.ones(len(indices), dtype=bool)
            keep[1:] = indices[1:] != indices[:-1]
            keep &= indices != 0
            text = "".join(self.characters[i] if i < len(self.characters) else "" for i in indices[keep])
            score = float(probs[keep].mean()) if keep.any() else 0.0
            attributes = (
                {"text": text, "score": round(score, 4)} if text and score >= self.params.min_score else None
            )
            results.append(ObjectResult(attributes))
        return results
