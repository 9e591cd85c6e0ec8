"""Building a source that has audio (`sources[].audio`): its producer, feed and gate, around the video
source or as a template driven by the audio. Called in the decode worker, like `build_source`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from framewire.config import SourceConfig
from framewire.pipeline.backoff import Backoff
from framewire.pipeline.frame import FrameSource
from framewire.pipeline.uris import source_kind, zmq_endpoint
from framewire.sources.audio import AudioFeed, AudioGate, AudioNeed, MissingPolicy, WithAudio, mux_path_of
from framewire.sources.audio_producers import AudioProducer, FileAudio, PushedAudioFrames, StreamAudio
from framewire.sources.live import LiveSource, stream_options
from framewire.sources.template import TemplateSource
from framewire.sources.zmq_audio import ZmqAudio

LOOKBACK_MARGIN_S = 1.0
"""Besides the frames in flight, how much audio behind the last frame read the ring keeps."""


def with_audio(
    config: SourceConfig, need: AudioNeed, slots: int, video: Callable[[SourceConfig], FrameSource]
) -> FrameSource:
    """The source of `config` with its audio: `video(config)` wrapped, or a template driven by it."""
    audio = config.audio
    assert audio is not None
    missing = MissingPolicy(audio.missing.policy, audio.missing.wait_ms, audio.missing.after_wait)
    mux = mux_path_of(audio.uri, config.uri)
    inner = None if config.template is not None else video(config)
    producer = _producer(config, inner)
    feed = AudioFeed(config.id, producer, audio.buffer_s, audio.sample_rate)
    gate = AudioGate(config.id, feed, need, missing)
    # The frames in flight reach back this far (at 25 fps; a slower source's frames are fewer a second).
    lookback = slots / 25.0 + need.before_s + LOOKBACK_MARGIN_S
    if config.template is not None:
        return TemplateSource(
            config.id,
            config.uri,
            config.template,
            feed,
            gate,
            rate=audio.sample_rate,
            mux_path=mux,
            lookback_s=lookback,
        )
    assert inner is not None
    return WithAudio(inner, feed, gate, rate=audio.sample_rate, mux_path=mux, lookback_s=lookback)


def _producer(config: SourceConfig, inner: Any) -> AudioProducer:
    audio = config.audio
    assert audio is not None
    rate = audio.sample_rate
    if audio.kind == "zmq":
        return ZmqAudio(
            config.id,
            zmq_endpoint(audio.uri),
            rate,
            curve_secret_key=audio.curve_secret_key,
            curve_clients=audio.curve_clients,
        )
    if audio.kind == "stream":
        r = config.reconnect
        backoff = Backoff(r.initial_s, r.max_s, max_attempts=r.max_attempts)
        options = stream_options(audio.uri, timeout_s=config.timeout_s, extra=config.ffmpeg_options)
        return StreamAudio(
            config.id, audio.uri, rate, options=options, timeout_s=config.timeout_s, backoff=backoff
        )
    if audio.kind == "self" and isinstance(inner, LiveSource) and source_kind(config.uri) == "stream":
        return _same_stream(inner, rate, audio.buffer_s)
    uri = config.uri if audio.kind == "self" else audio.uri
    return FileAudio(config.id, uri, rate, key="audio.uri" + (" (self)" if audio.kind == "self" else ""))


def _same_stream(video: LiveSource, rate: int, buffer_s: float) -> PushedAudioFrames:
    """The live stream's own audio track: the video source demuxes it and hands it over."""
    from framewire.media.audio import ToMono

    pushed = PushedAudioFrames(buffer_s, rate)
    mono = ToMono(rate)

    def sink(frame: Any, offset_s: float) -> None:
        for chunk in mono.push(frame, offset_s):
            pushed.push(chunk)

    video.audio_sink = sink
    return pushed
