"""`outputs:` items that send the composited video live: pushed to an RTSP or RTMP server, or
written as HLS (a rolling window of segments) that the daemon's HTTP server serves."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from framewire.config.outputs import OutputConfig
from framewire.pipeline import paths, uris

PUSH_SCHEMES = {"rtsp": "rtsp", "rtsps": "rtsp", "rtmp": "flv", "rtmps": "flv"}
"""URL scheme -> the FFmpeg muxer that speaks it (RTSP ANNOUNCE/RECORD, or FLV over RTMP)."""


def _only_source_id(value: str) -> str:
    extra = {name for name, _ in paths.fields(value)} - {"source_id"}
    if extra:
        raise ValueError(f"only {{source_id}} is filled in here, not {{{sorted(extra)[0]}}}")
    return value


class LiveVideoOutput(OutputConfig):
    """What every live video output shares: H.264 settings for low latency, and the bounded queue
    between the output stage and the encoder thread (a slow receiver never slows the pipeline)."""

    preset: str = Field(default="ultrafast", description="x264 preset: ultrafast costs the least CPU.")
    tune: str | None = Field(
        default="zerolatency", description="x264 tune; zerolatency: no frame is held back (no B-frames, no lookahead)."
    )
    bitrate_kbps: int = Field(
        default=2000, ge=50, le=200_000, description="Target bit rate (also the cap, over one second), kbit/s."
    )
    keyint: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="A key frame every this many frames (a viewer who joins waits for one). null: one "
        "every 2 s of the source's rate (hls: one per segment).",
    )
    queue_frames: int = Field(
        default=8,
        ge=1,
        le=1000,
        description="Frames waiting for the encoder thread, per source; when it is full the oldest is "
        "dropped and counted (each holds a copy of the frame).",
    )
    reconnect_backoff_s: tuple[float, float] = Field(
        default=(0.5, 10.0),
        description="First and longest wait before opening the receiver or the files again after a "
        "failure; doubles each time. Frames meanwhile are dropped and counted.",
    )
    timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=120,
        description="push to RTSP: the longest wait to connect or to send before the connection is "
        "dropped (the output process waits meanwhile); every output: the bound on ending a stream.",
    )

    @field_validator("reconnect_backoff_s")
    @classmethod
    def _backoff(cls, value: tuple[float, float]) -> tuple[float, float]:
        first, longest = value
        if not 0 < first <= longest:
            raise ValueError(f"needs 0 < first <= longest, not {list(value)}")
        return value


class PushOutput(LiveVideoOutput):
    """The composited video of each source pushed to an RTSP server (ANNOUNCE/RECORD over TCP) or
    an RTMP server (FLV), such as mediamtx or nginx-rtmp, reconnecting when the server goes away."""

    kind: Literal["push"] = Field(description="Push the composited video to an RTSP or RTMP server.")
    url: str = Field(
        description="Where to push, a template: `rtsp://host:8554/{source_id}` or "
        "`rtmp://host/live/{source_id}` (rtsps/rtmps too). `${VAR}` fills in credentials; logs show "
        "them as `***`."
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        scheme = uris.scheme(value)
        if scheme not in PUSH_SCHEMES:
            raise ValueError(f"{uris.redact(value)!r} is not an rtsp://, rtsps://, rtmp:// or rtmps:// URL")
        return _only_source_id(value)

    @property
    def muxer(self) -> str:
        return PUSH_SCHEMES[str(uris.scheme(self.url))]

    def destination(self, source_id: str) -> str | None:
        return uris.redact(self.url.replace("{source_id}", source_id))


class HlsOutput(LiveVideoOutput):
    """A live HLS stream per source: a playlist and a rolling window of MPEG-TS segments in a folder,
    served by the daemon's HTTP server at `/hls/<source_id>/index.m3u8`."""

    kind: Literal["hls"] = Field(description="Write live HLS (playlist + segments), served over HTTP.")
    path: str = Field(
        description="The folder of a source's playlist (index.m3u8) and segments, a template: "
        "`out/hls/{source_id}`. The HTTP server (`http:`) serves it at /hls/<source_id>/."
    )
    segment_s: float = Field(default=2.0, gt=0, le=60, description="Length of a segment, seconds.")
    keep_segments: int = Field(
        default=6, ge=1, le=1000, description="Segments in the live playlist; older ones are deleted."
    )

    @field_validator("path")
    @classmethod
    def _path_template(cls, value: str) -> str:
        return _only_source_id(value)

    def destination(self, source_id: str) -> str | None:
        return self.path.replace("{source_id}", source_id) + "/"
