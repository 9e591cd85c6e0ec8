"""Tensor descriptors shared by engines, tasks and the wire format."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Dim = int | str | None
"""A tensor dimension: a size, or a symbolic name / None where the model leaves it dynamic."""


@dataclass(frozen=True)
class TensorSpec:
    """Name, dtype and shape of one tensor; dynamic dimensions are `None` or a symbolic name."""

    name: str
    dtype: np.dtype
    shape: tuple[Dim, ...]

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def nbytes(self) -> int:
        """Bytes of a tensor of this spec; only for static shapes."""
        if not self.is_static:
            raise ValueError(f"tensor {self.name!r} has dynamic shape {self.shape}")
        count = 1
        for d in self.shape:
            count *= int(d)  # type: ignore[arg-type]
        return count * np.dtype(self.dtype).itemsize
