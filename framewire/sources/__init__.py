"""Sources: what the decode worker reads. A file (`framewire.sources.file`), a network stream or camera that
reconnects (`framewire.sources.live`), or frames another program pushes over ZeroMQ (`framewire.sources.zmq`); with
`audio:`, any of them plus its audio (`framewire.sources.audio`), and a template video driven by audio
(`framewire.sources.template`).

`build_source(config)` picks one from a `sources:` item; it is called inside the decode worker
(through the plan's factory), so nothing is opened in the supervisor.
"""

from __future__ import annotations

from framewire.config import SourceConfig
from framewire.pipeline.frame import FrameSource
from framewire.pipeline.uris import source_kind
from framewire.sources.audio import AudioNeed
from framewire.sources.file import FileSource
from framewire.sources.live import Backoff, LiveSource, camera_options, stream_options
from framewire.sources.with_audio import with_audio
from framewire.sources.zmq import ZmqSource

__all__ = ["AudioNeed", "build_source"]


def build_source(config: SourceConfig, need: AudioNeed | None = None, slots: int = 16) -> FrameSource:
    """The FrameSource for a `sources:` item: a file, a live stream or camera, or a ZeroMQ source;
    with `audio:`, its audio too, held to cover `need` around each frame (`slots`: the frames a
    source may have in flight, whose audio must stay in the ring)."""
    if config.audio is not None:
        return with_audio(config, need or AudioNeed(), slots, _video)
    return _video(config)


def _video(config: SourceConfig) -> FrameSource:
    kind = source_kind(config.uri)
    r = config.reconnect
    backoff = Backoff(r.initial_s, r.max_s, r.max_attempts, r.jitter)
    if kind == "zmq":
        return ZmqSource(
            config.id, config.uri, curve_secret_key=config.curve_secret_key, curve_clients=config.curve_clients
        )
    if kind == "camera":
        options = camera_options(config.camera, config.ffmpeg_options)
        return LiveSource(config.id, config.uri, options=options, format="v4l2", timeout_s=config.timeout_s,
                          backoff=backoff)
    if kind == "stream":
        options = stream_options(
            config.uri,
            timeout_s=config.timeout_s,
            rtsp_transport=config.rtsp_transport,
            extra=config.ffmpeg_options,
        )
        if config.is_live:
            return LiveSource(
                config.id, config.uri, options=options, timeout_s=config.timeout_s, backoff=backoff
            )
        return FileSource(config.id, config.uri, options=options)
    if config.is_live:  # a file said to be live: read again from the start each time it ends
        return LiveSource(config.id, config.uri, options={}, timeout_s=None, backoff=backoff)
    return FileSource(config.id, config.uri)
