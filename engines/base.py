"""The interface every inference backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from framewire.pipeline.wire.framepool import FramePool
from framewire.pipeline.wire.tensors import TensorSpec


class Engine(ABC):
    """A loaded model on one backend.

    `inputs` and `outputs` describe the model as loaded (after any dimension rewrite), with dynamic
    dimensions as `None` or a symbolic name. `infer` runs one batch: feeds by input name, and returns
    the requested outputs (all of them when `output_names` is None) by name.
    """

    backend: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @abstractmethod
    def infer(
        self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]: ...

    @abstractmethod
    def close(self) -> None: ...

    served: bool = False
    """The model runs on a server this worker reaches over the network, which may go away and come
    back (`infer` then raises BackendUnavailable, and the stage tries again)."""
    retry_max_s: float = 2.0
    """While the server does not answer: the longest wait between tries."""

    def server_times(self) -> tuple[str, dict[str, float]] | None:
        """The server's own totals for the model, for the metrics: (model name, {requests, queue_s,
        compute_s}); None when it has none or has not read them yet."""
        return None

    @property
    def provider(self) -> str:
        """What actually runs the model (for logs and metrics), e.g. `CPUExecutionProvider`."""
        return self.backend

    def pin_pool(self, pool: FramePool) -> bool:
        """A frame pool this worker reads inputs from was attached: a GPU backend registers it as
        pinned memory so inputs are copied from it by DMA. Returns whether it did (default: no)."""
        return False

    def unpin_pool(self, pool: FramePool) -> None:
        """That pool is being removed: undo `pin_pool` before the pool is unmapped (default: no-op)."""

    def input_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        """An array to build input `name` of `shape` in (a batch stacked in place), which `infer`
        then reads without a copy of its own: a GPU backend's pinned staging buffer. Valid until the
        next `infer`. None where the engine has none, or cannot take that shape or type (default)."""
        return None


@dataclass(frozen=True)
class ProfileShape:
    """The shapes one input accepts: TensorRT tunes for `opt` and accepts anything in [min, max]."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def to_json(self) -> list[Any]:
        return [self.name, list(self.min), list(self.opt), list(self.max)]
