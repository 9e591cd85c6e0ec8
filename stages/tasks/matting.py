"""U²-Netp matting: a foreground alpha (salient object or person) at the model's resolution.

Preparation follows rembg: RGB, x / max(x), ImageNet mean/std; the first output is the matte, min-max
normalised to get alpha. The composite stage resizes alpha to the frame.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import cv2
import numpy as np
from pydantic import Field

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages.tasks.base import Result, Task, TaskParams

log = logging.getLogger(__name__)

INPUT_NAME = "input.1"
"""Input name of the shipped U²-Netp file; `check_model` learns the name of another export."""
NATIVE_SIZE = 320
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


class MattingParams(TaskParams):
    """Keys of `model:` for `task: matting`."""

    input_size: int = Field(
        NATIVE_SIZE,
        ge=32,
        description="Side of the square model input; the frame is resized to it (aspect not kept).",
    )
    output: str | None = Field(
        None, description="Name of the model output holding the matte; default: the first output."
    )


class Matting(Task):
    """U²-Netp (and U²-Net exports like it): one RGB input, the matte as the first [1, 1, H, W] output."""

    name: ClassVar[str] = "matting"
    Params: ClassVar[type[TaskParams]] = MattingParams

    def __init__(self, params: TaskParams) -> None:
        if not isinstance(params, MattingParams):
            raise TypeError(f"Matting needs MattingParams, got {type(params).__name__}")
        super().__init__(params)
        self.params: MattingParams = params
        self._input_name = INPUT_NAME
        self._output_name = params.output

    @property
    def input_name(self) -> str:
        return self._input_name

    @property
    def output_names(self) -> tuple[str, ...] | None:
        """The matte output once known (from params or `check_model`); None (all) before that."""
        return (self._output_name,) if self._output_name else None

    def dynamic_axes(self) -> dict[str, tuple[int, ...]]:
        """Height and width of the input, unless the configured size is the one fixed in the file."""
        if self.params.input_size == NATIVE_SIZE:
            return {}
        return {self._input_name: (2, 3)}

    def check_model(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        """Raise ConfigError unless the model fits; remember its input and matte output names."""
        if len(inputs) != 1:
            names = ", ".join(repr(t.name) for t in inputs)
            raise ConfigError(f"matting expects a model with one input, this one has: {names}")
        spec = inputs[0]
        if np.dtype(spec.dtype) != np.float32 or len(spec.shape) != 4 or spec.shape[1] != 3:
            raise ConfigError(
                f"matting expects model input {spec.name!r} float32 [1, 3, H, W], "
                f"found {np.dtype(spec.dtype)} {list(spec.shape)}"
            )
        # As for face detection: fixed dims only bind when no rewrite is asked for.
        size = self.params.input_size
        if not self.dynamic_axes():
            for axis, label in ((2, "height"), (3, "width")):
                dim = spec.shape[axis]
                if isinstance(dim, int) and dim != size:
                    raise ConfigError(
                        f"model input {spec.name!r} has a fixed {label} of {dim} but model.input_size "
                        f"is {size}"
                    )
        if not outputs:
            raise ConfigError("matting expects a model with at least one output; this one has none")
        by_name = {t.name: t for t in outputs}
        wanted = self.params.output or outputs[0].name
        matte = by_name.get(wanted)
        if matte is None:
            raise ConfigError(
                f"model.output: the model has no output {wanted!r} "
                f"(outputs: {', '.join(repr(n) for n in by_name)})"
            )
        channels = matte.shape[1] if len(matte.shape) == 4 else None
        if len(matte.shape) != 4 or (isinstance(channels, int) and channels != 1):
            raise ConfigError(
                f"matting expects the matte output {matte.name!r} as [1, 1, H, W], found {list(matte.shape)}"
            )
        self._input_name = spec.name
        self._output_name = matte.name

    def input_spec(self, frame_width: int, frame_height: int) -> TensorSpec:
        size = self.params.input_size
        return TensorSpec(self._input_name, np.dtype(np.float32), (1, 3, size, size))

    def preprocess(self, frame: np.ndarray, out: np.ndarray) -> dict[str, Any]:
        """Resize to the square input, BGR -> RGB, x / max(x), ImageNet mean/std, HWC -> CHW."""
        size = self.params.input_size
        if out.shape != (1, 3, size, size):
            raise ValueError(f"matting: input buffer is {out.shape}, expected {(1, 3, size, size)}")
        height, width = frame.shape[:2]
        # INTER_AREA averages when shrinking (no aliasing); it is bilinear-like when enlarging.
        shrinking = size < width or size < height
        interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR
        image = cv2.resize(frame, (size, size), interpolation=interpolation)
        peak = float(image.max())
        scale = np.float32(1.0 / peak if peak > 0 else 1.0)
        for channel in range(3):
            # BGR frame -> RGB planes: plane c takes frame channel 2 - c.
            plane = image[:, :, 2 - channel].astype(np.float32) * scale
            out[0, channel] = (plane - MEAN[channel]) / STD[channel]
        return {}

    def postprocess(
        self,
        outputs: Mapping[str, np.ndarray],
        meta: Mapping[str, Any],
        frame_width: int,
        frame_height: int,
    ) -> Result:
        """Min-max normalise the matte into alpha; report its mean and foreground fraction."""
        name = self._output_name or next(iter(outputs))
        matte = np.asarray(outputs[name], dtype=np.float32)
        if matte.ndim != 4 or matte.shape[:2] != (1, 1):
            raise ConfigError(
                f"matting: model output {name!r} has shape {list(matte.shape)}, expected [1, 1, H, W]"
            )
        matte = matte[0, 0]
        low, high = float(matte.min()), float(matte.max())
        if high > low:
            alpha = (matte - np.float32(low)) * np.float32(1.0 / (high - low))
        else:
            alpha = np.zeros_like(matte)
        data = {
            "matte": {
                "mean": round(float(alpha.mean()), 4),
                "foreground_fraction": round(float(np.count_nonzero(alpha > 0.5)) / alpha.size, 4),
            }
        }
        alpha8 = np.rint(alpha * np.float32(255.0)).astype(np.uint8)
        return Result(data=data, arrays={"alpha": alpha8})
