"""`task: brightness`: the mean of a frame shrunk to the model's input, from a one-input model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import Field

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages.tasks.base import Result, Task, TaskParams


class BrightnessParams(TaskParams):
    """Keys of `model:` for this task, beside path and task."""

    scale: float = Field(1.0, gt=0, description="Multiplies the model's output.")


class Brightness(Task):
    """Input `x` [1, 3, 8, 8] float32 in 0-1, output `mean` [1]: the frame's brightness."""

    name = "brightness"
    Params = BrightnessParams
    params: BrightnessParams

    def check_model(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        if [i.name for i in inputs] != ["x"]:
            raise ConfigError(f"model.path: brightness takes one input named x, not {[i.name for i in inputs]}")

    @property
    def input_name(self) -> str:
        return "x"

    def input_spec(self, frame_width: int, frame_height: int) -> TensorSpec:
        return TensorSpec("x", np.dtype(np.float32), (1, 3, 8, 8))

    def preprocess(self, frame: np.ndarray, out: np.ndarray) -> dict[str, Any]:
        rows = np.linspace(0, frame.shape[0] - 1, 8).astype(int)
        cols = np.linspace(0, frame.shape[1] - 1, 8).astype(int)
        out[0] = frame[rows][:, cols].transpose(2, 0, 1).astype(np.float32) / 255.0
        return {}

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], meta: Mapping[str, Any], frame_width: int, frame_height: int
    ) -> Result:
        value = float(np.asarray(outputs["mean"]).reshape(-1)[0]) * self.params.scale
        return Result(data={"brightness": round(value, 4)})
