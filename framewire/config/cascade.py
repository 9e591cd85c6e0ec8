"""`secondary:` and `tracking:`: models run on the primary's detections, and tracking per source.

As for `model:`, the task parameters of a secondary model sit beside its `path` and `task` and are
checked by its task in `stages/`; the tracker's parameters beside `interval` are checked by the
tracker (stages.tracking). This package only knows the keys that shape the job.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class SecondaryConfig(BaseModel):
    """A model run on crops of the primary model's detections (a cascade); its task's own keys sit
    beside these."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$",
        description="What it is called: each object's result is `attributes.<name>`.",
    )
    path: str = Field(description="The ONNX model file.")
    task: str = Field(
        description="A task that runs on objects: classification, text_recognition, or package.module:Class."
    )
    classes: tuple[str | int, ...] | None = Field(
        default=None, description="Only objects of these labels (or class ids) of the primary; default: all."
    )
    min_size: int = Field(
        default=0, ge=0, description="Only objects whose box is at least this many pixels on both sides."
    )
    max_objects: int = Field(
        default=32,
        ge=1,
        le=10000,
        description="At most this many objects a frame, the highest scoring first.",
    )
    max_batch: int = Field(
        default=0, ge=0, le=1024, description="Crops per inference; 0: all of a frame's crops in one."
    )
    expand: float = Field(
        default=0.0,
        ge=0.0,
        le=2.0,
        description="Grow each box by this fraction on every side before cropping.",
    )
    reinfer_every: int | None = Field(
        default=None,
        ge=1,
        le=100000,
        description="With tracking: run once per track, and again when this many frames have passed "
        "(other frames reuse its last result); null: every object of every frame.",
    )

    @property
    def params(self) -> dict[str, Any]:
        """The task parameters: every key not declared here."""
        return dict(self.model_extra or {})


class TrackingConfig(BaseModel):
    """Multi-object tracking per source (ByteTrack); the tracker's own keys sit beside these."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: Literal["bytetrack"] = Field(default="bytetrack", description="The tracker.")
    interval: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Run the primary model on one frame in interval + 1 and let the tracker carry the "
        "boxes in between (DeepStream's interval); 0: every frame.",
    )

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})
