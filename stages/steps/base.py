"""What a step is: a stage that runs on each frame before preprocessing, with its parameters, what
it reads of a source's audio, and what it can check before the job runs."""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from framewire.pipeline.wire.audioring import AudioRing, RingCache, ring_of
from framewire.config import EngineConfig
from framewire.pipeline.errors import FramewireError
from framewire.pipeline.frame import Frame, Stage
from framewire.pipeline.stagespec import Facts

ROOT = Path(__file__).resolve().parents[2]


def model_file(path: str) -> str:
    """A step's model path: as given, or under the project when a default such as
    assets/models/... is not found from the current folder (the shipped models, from anywhere)."""
    if Path(path).is_absolute() or Path(path).exists() or not (ROOT / path).exists():
        return path
    return str(ROOT / path)


class StepParams(BaseModel):
    """Base of a step's parameters (the keys of a `steps:` item beside kind, name and workers)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Step(Stage):
    """A step: built cheaply in the supervisor (for checks) and in its worker, started in the worker."""

    kind: ClassVar[str]
    Params: ClassVar[type[StepParams]] = StepParams
    facts = Facts()

    @classmethod
    def declare(cls, params: StepParams) -> Facts:
        """What a step with these parameters does (`Stage.facts`); a step whose parameters decide
        (a region that smooths) overrides this."""
        return cls.facts

    def __init__(self, params: StepParams, name: str, engine: EngineConfig, rate: int) -> None:
        """`engine`: the job's engine config (a step's own model runs on it, or on the CPU); `rate`:
        the sample rate of the sources' audio rings."""
        self.params = params
        self.name = name
        self.engine_config = engine
        self.rate = rate

    def audio_span(self) -> tuple[float, float] | None:
        """(seconds before, seconds after) a frame's time that the step reads of the source's audio;
        None when it reads none. The source holds each frame until that much audio is there."""
        return None

    def tensor(self) -> tuple[int, ...] | None:
        """The shape (batch of one) of the tensor the step adds to each frame, named after the step,
        when it adds one (a generator's `fill: audio` input takes it)."""
        return None

    def check(self, where: str) -> None:
        """Raise ConfigError naming `where` (steps.N) when the step cannot run (its model file)."""
        return None

    @abstractmethod
    def process(self, frame: Frame) -> Any: ...


class AudioStep(Step):
    """A step that reads a source's audio ring (mapped once per source in this worker)."""

    def __init__(self, params: StepParams, name: str, engine: EngineConfig, rate: int) -> None:
        super().__init__(params, name, engine, rate)
        self._rings = RingCache()

    def ring(self, frame: Frame) -> AudioRing:
        wire = ring_of(frame.pool_wire)
        if wire is None:
            raise FramewireError(
                f"step {self.name}: source {frame.source_id} has no audio (set sources[].audio for it)"
            )
        ring = self._rings.get(wire)
        if ring.rate != self.rate:
            raise FramewireError(
                f"step {self.name}: source {frame.source_id}'s audio is at {ring.rate} Hz, the steps read {self.rate} Hz"
            )
        return ring

    def window(self, frame: Frame, offset_s: float, count: int) -> np.ndarray:
        """`count` samples from `frame.time_s + offset_s` (missing ones read as silence)."""
        return self.ring(frame).window(frame.time_s + offset_s, count).samples

    def stop(self) -> None:
        self._rings.close()
