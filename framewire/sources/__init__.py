"""Sources: what the decode worker reads, by kind (framewire.registry.SOURCES, the `framewire.sources`
entry-point group): a file (`framewire.sources.file`), a network stream or camera that reconnects
(`framewire.sources.live`), frames another program pushes over ZeroMQ (`framewire.sources.zmq`), or a
plug-in's source; with `audio:`, any uri source plus its audio (`framewire.sources.audio`), and a
template video driven by audio (`framewire.sources.template`).

`build_source(config)` builds one from a `sources:` item; it is called inside the decode worker
(through the plan's factory), so nothing is opened in the supervisor.
"""

from __future__ import annotations

from framewire.config import SourceBase, SourceConfig
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import FrameSource
from framewire.registry import SOURCES
from framewire.sources.audio import AudioNeed
from framewire.sources.with_audio import with_audio

__all__ = ["AudioNeed", "build_source"]


def build_source(config: SourceBase, need: AudioNeed | None = None, slots: int = 16) -> FrameSource:
    """The FrameSource for a `sources:` item, by the class its kind names (`cls.from_config(config)`);
    with `audio:`, its audio too, held to cover `need` around each frame (`slots`: the frames a
    source may have in flight, whose audio must stay in the ring)."""
    if config.audio is not None and isinstance(config, SourceConfig):
        return with_audio(config, need or AudioNeed(), slots, _video)
    return _video(config)


def _video(config: SourceBase) -> FrameSource:
    cls = SOURCES.get(config.kind, f"sources.{config.id}.kind")
    if not callable(getattr(cls, "from_config", None)):
        raise ConfigError(f"sources.{config.id}.kind: source {config.kind!r} ({cls!r}) has no from_config(config)")
    source: FrameSource = cls.from_config(config)
    return source
