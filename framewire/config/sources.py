"""The `sources:` items: where frames come from and how a source behaves when the pipeline is behind."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SerializeAsAny, field_validator, model_validator

from framewire.pipeline import uris
from framewire.pipeline.plan import Policy
from framewire.config.audio import AudioConfig, Template
from framewire.config.base import _Model
from framewire.config.kinds import by_kind, variants
from framewire.registry import SOURCES

SOURCE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class ReconnectConfig(_Model):
    """How a live source comes back after it drops: delays double from initial_s up to max_s."""

    initial_s: float = Field(default=0.5, gt=0, le=3600, description="Delay before the first retry.")
    max_s: float = Field(default=30.0, gt=0, le=3600, description="Longest delay between two retries.")
    max_attempts: int | None = Field(
        default=None,
        ge=1,
        description="Failed attempts in a row before the source ends with an error; null: forever.",
    )
    jitter: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Each wait is shortened by a random fraction of at most this, so sources that "
        "dropped together do not all reconnect at the same instant.",
    )

    @model_validator(mode="after")
    def _in_order(self) -> ReconnectConfig:
        if self.max_s < self.initial_s:
            raise ValueError(f"max_s ({self.max_s}) must be at least initial_s ({self.initial_s})")
        return self


class CameraConfig(_Model):
    """What to ask a V4L2 camera for (`v4l2-ctl --list-formats-ext` lists what it offers)."""

    width: int | None = Field(default=None, ge=1, le=16384, description="Frame width; with height.")
    height: int | None = Field(default=None, ge=1, le=16384, description="Frame height; with width.")
    fps: float | None = Field(default=None, gt=0, le=1000, description="Frame rate.")
    input_format: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9_]{1,32}$",
        description="What the camera sends: mjpeg, yuyv422, h264, ... (FFmpeg's v4l2 input_format).",
    )

    @model_validator(mode="after")
    def _both_sides(self) -> CameraConfig:
        if (self.width is None) != (self.height is None):
            raise ValueError("width and height go together")
        return self


class SourceBase(_Model):
    """Base of a `sources:` item: what every source has, whatever it reads. The `Config` of an entry
    of the `framewire.sources` group subclasses it (a plug-in's source, with its `kind` literal)."""

    id: str = Field(description="Name of the source: the ZeroMQ topic, `{source_id}` in output paths.")
    kind: str = Field(
        description="Which source: file, stream, camera or zmq (unset: from the uri), or a plug-in's."
    )
    policy: Policy = Field(
        default=Policy.BLOCK,
        description="block: process every frame; drop_oldest / drop_newest: drop when behind. "
        "Unset, it is drop_oldest for a live source and block for a file.",
    )
    max_staleness_ms: float | None = Field(
        default=None,
        gt=0,
        description="Drop (and count, reason stale) a frame that reaches inference this long after "
        "it was read; needs a drop policy.",
    )
    max_waiting: int | None = Field(
        default=None,
        ge=1,
        description="Frames of a live source that may wait in the hub for a worker up to inference. "
        "The live sources' bounds add up: past their sum, a source at or over its own (the one that lost "
        "the fewest lately, so the streams share the loss) drops its oldest waiting frame (drop_oldest) "
        "or its newest (drop_newest), counted (reason overflow), so a busy machine never queues the "
        "streams' frames toward their staleness limit. Unset: 4 "
        "under a drop policy; needs a drop policy.",
    )
    latency_budget_ms: float | None = Field(
        default=None,
        gt=0,
        description="The end-to-end latency (end of decode to the outputs) this source should stay "
        "under: each frame over it is counted (`framewire_latency_over_budget_total`) and logged. "
        "It is a check, not a control: `max_staleness_ms` (below the budget by about one inference "
        "and the later stages) is what keeps frames young.",
    )
    realtime: bool = Field(
        default=False, description="Pace a file at its own frame rate instead of as fast as possible."
    )
    max_frames: int | None = Field(
        default=None, ge=1, description="Stop after this many frames (a shorter job on a long file)."
    )
    audio: AudioConfig | None = Field(
        default=None,
        description="The source's audio (for audio steps and outputs); null: none is read. Sources "
        "read from a uri only.",
    )

    @field_validator("id")
    @classmethod
    def _id_is_a_name(cls, value: str) -> str:
        if not SOURCE_ID.match(value):
            raise ValueError("must be 1-64 letters, digits, '_', '.' or '-'")
        return value

    @model_validator(mode="after")
    def _audio_needs_a_uri(self) -> SourceBase:
        if self.audio is not None and "uri" not in type(self).model_fields:
            raise ValueError(f"audio: only for sources read from a uri, not a {self.kind} source")
        return self

    @classmethod
    def variants(cls) -> tuple[type[BaseModel], ...]:
        """The config model of every registered source (imports them all)."""
        return variants(SOURCES)

    @property
    def is_live(self) -> bool:
        """Whether this source reconnects and drops (a plug-in's source: no)."""
        return False


def kind_of_uri(raw: Mapping[str, Any]) -> str:
    """The kind of a `sources:` item that names none: its uri's (file, stream, camera, zmq); without
    a uri, file (whose model then says the uri is missing)."""
    uri = raw.get("uri")
    return uris.source_kind(uri) if isinstance(uri, str) else "file"


Source = Annotated[SerializeAsAny[SourceBase], by_kind(SOURCES, kind_of_uri)]
"""A `sources:` item, validated by the model of the source its `kind` (or uri) names."""


class SourceConfig(SourceBase):
    """A source read from a uri: a file, a network stream, a V4L2 camera, or frames pushed over ZeroMQ."""

    kind: Literal["file", "stream", "camera", "zmq"] = Field(
        default="file",
        exclude=True,  # found from the uri: a dump with another uri validates again
        description="file, stream, camera or zmq: what the uri names (unset: found from it).",
    )
    uri: str = Field(
        description="A video file path or file:// URI; rtsp://, rtmp://, http(s):// (HLS), srt:// "
        "streams; a V4L2 camera (/dev/video0); or zmq+tcp://host:port / zmq+ipc:///path (frames "
        "pushed by another program, see the docs: Sources)."
    )
    live: bool | None = Field(
        default=None,
        description="A live source reconnects when it drops or ends; null: from the URI (cameras, "
        "ZeroMQ, rtsp, rtmp, srt, udp and .m3u8 playlists are live, files and plain http are not).",
    )
    timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="Stream and camera sources: how long opening, or waiting for the next packet, may "
        "take before the connection counts as lost.",
    )
    reconnect: ReconnectConfig = Field(
        default_factory=ReconnectConfig, description="Live sources: retries after a drop, with backoff."
    )
    rtsp_transport: Literal["tcp", "udp"] | None = Field(
        default=None, description="rtsp:// sources: RTP over the RTSP connection (tcp, the default) or udp."
    )
    camera: CameraConfig | None = Field(
        default=None, description="V4L2 cameras (/dev/video*): size, frame rate and format to ask for."
    )
    ffmpeg_options: dict[str, str] = Field(
        default_factory=dict,
        description="Stream and camera sources: more FFmpeg options, e.g. {probesize: '32768'}.",
    )
    curve_secret_key: str | None = Field(
        default=None,
        description="ZeroMQ sources: this source's secret certificate (`keys` makes one); producers "
        "must then connect with CurveZMQ and the matching public key.",
    )
    curve_clients: str | None = Field(
        default=None,
        description="ZeroMQ sources with curve_secret_key: a folder of producer public certificates; "
        "only those may connect (without it, any producer that knows the public key may).",
    )
    template: Template | None = Field(
        default=None,
        description="The uri is a template video, repeated (loop or pingpong) for as long as the "
        "audio lasts, at its own frame rate: needs audio with a uri of its own.",
    )
    resume: bool = Field(
        default=False,
        description="Files: go on after the last frame every output holds (the last complete fragment "
        "of the recording, the last JSONL record), appending, instead of starting over: after a "
        "crash, on another replica, or run again (`run --resume` sets it on every file source). "
        "Needs policy block; recordings must be fmp4 files, one per source (docs: Guides, Resuming jobs).",
    )

    @model_validator(mode="before")
    @classmethod
    def _kind_from_uri(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and isinstance(data.get("uri"), str):
            found = uris.source_kind(data["uri"])
            if data.get("kind") is None:
                return {**data, "kind": found}
            if data["kind"] != found:
                raise ValueError(f"kind: {data['kind']!r} does not fit uri {uris.redact(data['uri'])} (a {found})")
        return data

    @model_validator(mode="before")
    @classmethod
    def _live_drops_by_default(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "policy" not in data and isinstance(data.get("uri"), str):
            live = data.get("live")
            if live is True or (live is None and uris.is_live(data["uri"])):
                return {**data, "policy": Policy.DROP_OLDEST}
        return data

    @model_validator(mode="after")
    def _fits_the_uri(self) -> SourceConfig:
        kind = self.kind
        if self.rtsp_transport is not None and uris.scheme(self.uri) not in ("rtsp", "rtsps"):
            raise ValueError(f"rtsp_transport: only for rtsp:// sources, not {kind} {uris.redact(self.uri)}")
        if self.camera is not None and kind != "camera":
            raise ValueError(f"camera: only for V4L2 cameras (/dev/video*), not {uris.redact(self.uri)}")
        if self.realtime and self.is_live:
            raise ValueError("realtime: only for files (a live source keeps its own pace)")
        if self.max_staleness_ms is not None and self.policy == Policy.BLOCK:
            raise ValueError(
                "max_staleness_ms: needs policy drop_oldest or drop_newest (block drops nothing)"
            )
        if self.max_waiting is not None and self.policy == Policy.BLOCK:
            raise ValueError("max_waiting: needs policy drop_oldest or drop_newest (block drops nothing)")
        if (
            self.max_staleness_ms is not None
            and self.latency_budget_ms is not None
            and self.max_staleness_ms >= self.latency_budget_ms
        ):
            raise ValueError(
                f"max_staleness_ms ({self.max_staleness_ms:g}) must be below latency_budget_ms "
                f"({self.latency_budget_ms:g}): a frame as old as that is already over the budget"
            )
        if kind != "zmq" and (self.curve_secret_key or self.curve_clients):
            raise ValueError(f"curve_secret_key: only for ZeroMQ sources, not {kind} {uris.redact(self.uri)}")
        if self.curve_clients and not self.curve_secret_key:
            raise ValueError("curve_clients: needs curve_secret_key (the source's own certificate)")
        self._audio_fits(kind)
        self._resume_fits(kind)
        if kind == "zmq":
            rest = uris.zmq_endpoint(self.uri)
            if not re.match(r"^(tcp://[^/:]+:\d{1,5}|ipc://.+)$", rest):
                raise ValueError(f"uri: {self.uri!r}: expected zmq+tcp://host:port or zmq+ipc:///path")
            problem = uris.endpoint_problem(rest, ("tcp", "ipc"))
            if problem:
                raise ValueError(f"uri: {self.uri!r}: {problem}")
        return self

    def _audio_fits(self, kind: str) -> None:
        audio = self.audio
        if self.template is not None:
            if audio is None or audio.uri == "self":
                raise ValueError("template: needs audio.uri: the audio file or stream that drives the template")
            if kind != "file":
                raise ValueError(f"template: the template must be a video file, not {kind} {uris.redact(self.uri)}")
        if audio is not None and audio.uri == "self" and kind in ("zmq", "camera"):
            raise ValueError(
                f"audio.uri: self: a {'ZeroMQ frame input' if kind == 'zmq' else 'camera'} has no audio track "
                "of its own (use a ZeroMQ audio input, zmq+tcp://host:port, or a file)"
            )

    def _resume_fits(self, kind: str) -> None:
        if not self.resume:
            return
        if kind != "file" or self.is_live:
            live = "a live " if self.is_live else ""
            raise ValueError(f"resume: only for files, not {live}{kind} {uris.redact(self.uri)}")
        if self.policy != Policy.BLOCK:
            raise ValueError(f"resume: needs policy block (a frame dropped under {self.policy.value} breaks the count)")
        if self.template is not None or self.audio is not None:
            raise ValueError("resume: not with audio: (the audio steps' state starts over; resume the video alone)")

    @property
    def is_live(self) -> bool:
        """Whether this source reconnects and drops (the `live` key, or the URI's kind)."""
        return self.live if self.live is not None else uris.is_live(self.uri)
