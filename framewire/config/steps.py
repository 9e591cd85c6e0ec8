"""`steps:`: stages that run on each frame before preprocessing (audio features, voice activity, the
region a generated image is pasted into). Each is a stage of its own, `name` in the hub and the
metrics; its parameters belong to the step's class in `framewire.stages.steps`, kept here as extra keys."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from framewire.config.sources import SOURCE_ID

STEP_KINDS = ("audio_features", "vad", "region")


class StepConfig(BaseModel):
    """One step; its parameters belong to the step `kind` (stages.steps)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: str = Field(
        description="audio_features (the audio around each frame: PCM, log-mel or an encoder model's "
        "output, as a tensor), vad (Silero VAD: a speaking score), region (the box a generator works on)."
    )
    name: str | None = Field(
        default=None,
        description="The step's stage name and the name of what it adds (a tensor, a result key); default: kind.",
    )
    workers: int = Field(default=1, ge=1, le=64, description="Processes running this step (unless stages.fuse).")

    @field_validator("name")
    @classmethod
    def _name_is_a_name(cls, value: str | None) -> str | None:
        if value is not None and not SOURCE_ID.match(value):
            raise ValueError("must be 1-64 letters, digits, '_', '.' or '-'")
        return value

    @property
    def stage(self) -> str:
        return self.name or self.kind

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})
