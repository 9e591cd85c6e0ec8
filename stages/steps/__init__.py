"""Steps by kind: stages run on each frame before preprocessing (`steps:` in the config).

- `audio_features` (stages.steps.audio_features): the audio window around each frame, as PCM, a
  log-mel spectrogram, or an audio encoder model's output: a tensor named after the step.
- `vad` (stages.steps.vad): Silero VAD over the source's audio, in order per source: `speaking`
  (score) and `speech` (flag) in each frame's results.
- `region` (stages.steps.region): the box a generator crops and pastes back: a face from a
  detector, expanded and smoothed over time, or a fixed region.

Each is an entry of the `framewire.steps` entry-point group (framewire.registry.STEPS), as a plug-in's
steps are. Modules are imported on first use, so a process that runs no step does not load them.
"""

from __future__ import annotations

from pydantic import ValidationError

from framewire.config import EngineConfig, StepConfig
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.stagespec import Facts
from framewire.registry import STEPS
from framewire.stages.steps.base import Step, StepParams
from framewire.stages.tasks import validation_error

def resolve_step(config: StepConfig, index: int, engine: EngineConfig, rate: int = 16000) -> Step:
    """The step of `steps.<index>`, its parameters validated; errors name `steps.<index>.<key>`.
    `rate` is the sample rate of the sources' audio (framewire.app.compose.audio checks they agree)."""
    cls, params = _class_and_params(config, index)
    return cls(params, config.stage, engine, rate)


def step_facts(config: StepConfig, index: int) -> Facts:
    """What the step of `steps.<index>` does (its class's `declare`), without building it."""
    cls, params = _class_and_params(config, index)
    return cls.declare(params)


def _class_and_params(config: StepConfig, index: int) -> tuple[type[Step], StepParams]:
    cls = STEPS.get(config.kind, f"steps.{index}.kind")
    if not (isinstance(cls, type) and issubclass(cls, Step)):
        raise ConfigError(f"steps.{index}.kind: {config.kind!r} is not a framewire.stages.steps.base.Step subclass")
    try:
        return cls, cls.Params.model_validate(config.params)
    except ValidationError as exc:
        raise validation_error(exc, f"steps.{index}") from None
