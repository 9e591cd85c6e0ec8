"""`kind: pattern`: a test pattern, frames of one grey level rising by `step` each frame."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
from pydantic import Field

from framewire.config import SourceBase


class PatternConfig(SourceBase):
    """Keys of a `pattern` source (besides id, policy, max_frames ... that every source has)."""

    kind: Literal["pattern"] = Field(description="Frames of a rising grey level.")
    frames: int = Field(10, ge=1, le=100_000, description="How many frames.")
    width: int = Field(64, ge=8, le=4096, description="Frame width.")
    height: int = Field(48, ge=8, le=4096, description="Frame height.")
    step: int = Field(10, ge=0, le=255, description="Grey level added each frame (mod 256).")


class PatternSource:
    """A FrameSource (framewire.pipeline.frame): open, then frames in order until it ends."""

    Config = PatternConfig

    def __init__(self, config: PatternConfig) -> None:
        self.config = config

    @classmethod
    def from_config(cls, config: PatternConfig) -> PatternSource:
        return cls(config)

    def open(self) -> dict[str, Any]:
        c = self.config
        return {"source_id": c.id, "uri": f"pattern:{c.id}", "width": c.width, "height": c.height,
                "fps": "25/1", "time_base": "1/25", "frame_count": c.frames}

    def frames(self) -> Iterator[tuple[np.ndarray, int, float]]:
        c = self.config
        for index in range(c.frames):
            image = np.full((c.height, c.width, 3), (index * c.step) % 256, dtype=np.uint8)
            yield image, index, index / 25.0

    def close(self) -> None:
        return None
