"""What every config model shares: unknown keys are refused, and a loaded config is frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
