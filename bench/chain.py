"""A config's middle stages run in this process, as one fused infer worker runs them: frames in,
records and per-stage times out. What `bench cascade` and `bench models` measure, without the
daemon's processes (whose own costs `bench pipeline` measures)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SOURCE = "bench"


class _MemoryPool:
    """One slot of the regions a config's layout names, in plain memory."""

    def __init__(self, layout: dict[str, tuple[tuple[int, ...], str]]) -> None:
        self.regions = {name: np.zeros(shape, dtype=dtype) for name, (shape, dtype) in layout.items()}

    def view(self, slot: int, region: str) -> np.ndarray:
        return self.regions[region]

    def has(self, region: str) -> bool:
        return region in self.regions


@dataclass
class ChainRun:
    """What one pass over the frames gave."""

    records: list[dict[str, Any]] = field(default_factory=list)
    """Each frame's results (the record's `results`)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Time spent in each stage, summed over the frames."""
    wall_s: float = 0.0
    detector_frames: int = 0
    """Frames the primary model ran on (fewer with tracking.interval)."""
    secondary_inferences: int = 0


def run_chain(config: Any, frames: Sequence[np.ndarray]) -> ChainRun:
    """Every frame through the config's preprocess ... composite members, in order."""
    from framewire.components import (
        CascadeStage, Frame, StageContext, skipped, slot_layout, stages_from_config,
    )

    height, width = frames[0].shape[:2]
    info = {"width": width, "height": height}
    fused = stages_from_config(config.model_copy(update={"composite": ()}))
    fused.start(StageContext("infer", 0, {SOURCE: info}))
    pool = _MemoryPool(slot_layout(config.model_copy(update={"composite": ()}), SOURCE, info))
    run = ChainRun()
    started = time.perf_counter()
    try:
        for seq, image in enumerate(frames):
            np.copyto(pool.regions["image"], image)
            frame = Frame(SOURCE, seq, seq, seq / 25.0, width, height, slot=0, pool=pool)  # type: ignore[arg-type]
            for out in fused.process(frame):
                frame = out
            run.detector_frames += not skipped(frame)
            run.records.append(frame.result or {})
            for name, (start, end) in frame.timings.items():
                run.seconds[name] = run.seconds.get(name, 0.0) + (end - start)
        run.wall_s = time.perf_counter() - started
        run.secondary_inferences = sum(s.inferences for _, s in fused.members if isinstance(s, CascadeStage))
    finally:
        fused.stop()
    return run


def load(path: str, overrides: Sequence[str] = ()) -> Any:
    """A config file with `--set` overrides, its input paths found from the checkout."""
    from bench.harness import ROOT
    from framewire import load_config
    from framewire.components import resolve_inputs

    return resolve_inputs(load_config(path, overrides), [ROOT])


def frames_of(path: str, count: int | None = None, start: int = 0) -> list[np.ndarray]:
    """Decoded BGR frames of a video, as the daemon's decoder gives them."""
    from framewire.components import VideoReader

    out: list[np.ndarray] = []
    with VideoReader("bench", path) as reader:
        reader.open()
        for index, decoded in enumerate(reader.frames()):
            if index >= start:
                out.append(decoded.image)
            if count is not None and len(out) >= count:
                break
    return out
