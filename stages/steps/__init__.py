"""Steps by kind: stages run on each frame before preprocessing (`steps:` in the config).

- `audio_features` (stages.steps.audio_features): the audio window around each frame, as PCM, a
  log-mel spectrogram, or an audio encoder model's output: a tensor named after the step.
- `vad` (stages.steps.vad): Silero VAD over the source's audio, in order per source: `speaking`
  (score) and `speech` (flag) in each frame's results.
- `region` (stages.steps.region): the box a generator crops and pastes back: a face from a
  detector, expanded and smoothed over time, or a fixed region.

Modules are imported on first use, so a process that runs no step does not load them.
"""

from __future__ import annotations

import importlib

from pydantic import ValidationError

from framewire.config import EngineConfig, StepConfig
from framewire.pipeline.errors import ConfigError
from framewire.stages.steps.base import Step
from framewire.stages.tasks import validation_error

STEPS: dict[str, str] = {
    "audio_features": "framewire.stages.steps.audio_features:AudioFeatures",
    "vad": "framewire.stages.steps.vad:Vad",
    "region": "framewire.stages.steps.region:Region",
}
"""Step kinds and the class each one loads."""


def resolve_step(config: StepConfig, index: int, engine: EngineConfig, rate: int = 16000) -> Step:
    """The step of `steps.<index>`, its parameters validated; errors name `steps.<index>.<key>`.
    `rate` is the sample rate of the sources' audio (app.plan checks they agree)."""
    entry = STEPS.get(config.kind)
    if entry is None:
        raise ConfigError(f"steps.{index}.kind: unknown step {config.kind!r} (one of {', '.join(STEPS)})")
    module, _, name = entry.partition(":")
    cls: type[Step] = getattr(importlib.import_module(module), name)
    try:
        params = cls.Params.model_validate(config.params)
    except ValidationError as exc:
        raise validation_error(exc, f"steps.{index}") from None
    return cls(params, config.stage, engine, rate)
