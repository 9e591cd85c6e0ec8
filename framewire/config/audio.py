"""`sources[].audio` and `sources[].template`: a source's audio side channel, and a template video
driven by audio. The decode worker reads the audio into the source's audio ring (pipeline.audioring);
the `steps:` that need it read windows of it around each frame."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from framewire.pipeline import uris
from framewire.config.base import _Model


class MissingAudioConfig(_Model):
    """What a frame whose audio window is incomplete gets (counted in
    framewire_audio_windows_missing_total). A file's audio is never late: its frames wait for it;
    this is for gaps, audio that ended before the video, and live audio that is late."""

    policy: Literal["silence", "wait", "drop"] = Field(
        default="silence",
        description="silence: the frame goes on, the missing samples read as silence; wait: a live "
        "source's frame waits up to wait_ms for late audio, then after_wait; drop: the frame is dropped.",
    )
    wait_ms: float = Field(default=200.0, ge=0, le=10000, description="policy wait: the longest wait for late audio.")
    after_wait: Literal["silence", "drop"] = Field(
        default="silence", description="policy wait: what a frame still incomplete after wait_ms gets."
    )


class AudioConfig(_Model):
    """Where a source's audio comes from and how it is kept."""

    uri: str = Field(
        default="self",
        description="self: the video's own audio track (a file, or the rtsp/rtmp stream's); a file "
        "(WAV, MP3, AAC, M4A, FLAC, a video's track); a live audio stream (rtsp://, rtmp://, http(s)://); "
        "or zmq+tcp://host:port / zmq+ipc:///path: PCM chunks pushed by another program (docs: Wire "
        "formats, The ZeroMQ audio input).",
    )
    sample_rate: int = Field(
        default=16000, ge=8000, le=192000, description="The audio is resampled to this rate, mono, whatever it comes in."
    )
    buffer_s: float = Field(
        default=10.0, ge=2.0, le=600.0, description="Seconds of audio the source's ring keeps (shared memory, 4 bytes a sample)."
    )
    missing: MissingAudioConfig = Field(
        default_factory=MissingAudioConfig, description="What a frame whose audio window is incomplete gets."
    )
    curve_secret_key: str | None = Field(
        default=None, description="ZeroMQ audio input: this input's secret certificate; producers must use CurveZMQ."
    )
    curve_clients: str | None = Field(
        default=None, description="ZeroMQ audio input with curve_secret_key: the producers' public certificates."
    )

    @property
    def kind(self) -> str:
        """self, file, stream or zmq."""
        return "self" if self.uri == "self" else uris.source_kind(self.uri)

    @model_validator(mode="after")
    def _fits_the_uri(self) -> AudioConfig:
        kind = self.kind
        if kind == "camera":
            raise ValueError(f"uri: {self.uri!r}: a camera has no audio input here (use a file, a stream or zmq+tcp://)")
        if kind == "zmq" and not re.match(r"^(tcp://[^/:]+:\d{1,5}|ipc://.+)$", uris.zmq_endpoint(self.uri)):
            raise ValueError(f"uri: {self.uri!r}: expected zmq+tcp://host:port or zmq+ipc:///path")
        if kind == "zmq" and (problem := uris.endpoint_problem(uris.zmq_endpoint(self.uri), ("tcp", "ipc"))):
            raise ValueError(f"uri: {self.uri!r}: {problem}")
        if kind != "zmq" and (self.curve_secret_key or self.curve_clients):
            raise ValueError("curve_secret_key: only for a ZeroMQ audio input (zmq+tcp://)")
        if self.curve_clients and not self.curve_secret_key:
            raise ValueError("curve_clients: needs curve_secret_key")
        return self


Template = Literal["loop", "pingpong"]
"""How a template video repeats while its audio lasts: from the start again, or back and forth."""
