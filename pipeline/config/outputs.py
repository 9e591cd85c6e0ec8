"""`composite:` and `outputs:`: what is drawn on the frames and where results go."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline.config.base import _Model


class CompositeConfig(BaseModel):
    """One drawing step; its parameters belong to the composite `kind`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: str = Field(
        description="blur, pixelate, boxes (detections); background_replace, background_blur (mattes)."
    )

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class VideoFileOutput(_Model):
    kind: Literal["video_file"] = Field(description="H.264 MP4 of the composited frames.")
    path: str = Field(description="Output file; `{source_id}` is replaced by the source's id.")
    crf: int = Field(default=23, ge=0, le=51, description="x264 constant rate factor (quality).")
    preset: str = Field(default="veryfast", description="x264 preset (ultrafast ... veryslow).")
    audio: bool = Field(default=True, description="Copy the source's audio through when it has some.")


class JsonlOutput(_Model):
    kind: Literal["jsonl"] = Field(description="One JSON record per frame.")
    path: str = Field(description="Output file; `{source_id}` is replaced by the source's id.")


class ZmqOutput(_Model):
    kind: Literal["zmq"] = Field(description="Publish every frame's results on a ZeroMQ socket.")
    endpoint: str = Field(
        description="Where to bind, e.g. tcp://127.0.0.1:5560 or ipc:///tmp/framewire.sock."
    )
    mode: Literal["pub", "push"] = Field(
        default="pub",
        description="pub: fan-out, a slow subscriber loses messages; push: reliable, backpressure.",
    )
    jpeg: bool = Field(default=False, description="Append the composited frame as a JPEG part.")
    jpeg_quality: int = Field(default=85, ge=1, le=100, description="JPEG quality.")
    hwm: int = Field(default=1000, ge=1, description="Messages queued per peer before pub drops / push blocks.")
    curve_secret_key: str | None = Field(
        default=None,
        description="CurveZMQ: this output's secret certificate (`keys` makes one); encrypts the socket.",
    )
    curve_clients: str | None = Field(
        default=None,
        description="CurveZMQ: a folder of client public certificates; only those may connect.",
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint_scheme(cls, value: str) -> str:
        if not re.match(r"^(tcp|ipc|inproc)://.+", value):
            raise ValueError("must start with tcp://, ipc:// or inproc://")
        return value


Output = Annotated[VideoFileOutput | JsonlOutput | ZmqOutput, Field(discriminator="kind")]
