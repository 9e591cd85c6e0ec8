"""Shared helpers for stage tests: real decoded frames of the shipped videos."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]

ASSETS = ROOT / "assets"


@pytest.fixture(scope="session")
def assets() -> Path:
    """The shipped models and videos."""
    return ASSETS


@pytest.fixture(scope="session")
def decode_frames() -> Callable[[str, Sequence[int]], list[np.ndarray]]:
    """Decode the given frame indices of a shipped video as BGR uint8 arrays (cached per video)."""
    import av

    cache: dict[tuple[str, tuple[int, ...]], list[np.ndarray]] = {}

    def decode(video: str, indices: Sequence[int]) -> list[np.ndarray]:
        key = (video, tuple(indices))
        if key not in cache:
            wanted = set(indices)
            frames: dict[int, np.ndarray] = {}
            with av.open(str(ASSETS / "videos" / video)) as container:
                for index, frame in enumerate(container.decode(video=0)):
                    if index in wanted:
                        frames[index] = frame.to_ndarray(format="bgr24")
                    if index >= max(wanted):
                        break
            cache[key] = [frames[i] for i in indices]
        return cache[key]

    return decode
