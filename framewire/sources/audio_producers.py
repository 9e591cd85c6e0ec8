"""Where a source's audio comes from: the producers that `framewire.sources.audio.AudioFeed` runs on
its thread. A file's own track or a separate audio file (`FileAudio`), a live audio stream of its
own (`StreamAudio`), or the audio the live video source demuxes and hands over (`PushedAudioFrames`);
the ZeroMQ audio input is `framewire.sources.zmq_audio.ZmqAudio`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

from framewire.media.audio import AudioChunk, AudioDecoder
from framewire.pipeline.backoff import Backoff
from framewire.pipeline.errors import SourceError

log = logging.getLogger(__name__)


class AudioProducer(Protocol):
    """Where a source's audio comes from: `open()` (errors at start), then `chunks()` until it ends."""

    live: bool

    def open(self) -> None: ...

    def chunks(self) -> Iterator[AudioChunk]: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class FileAudio:
    """The first audio track of a file (a separate audio file, or the video file's own track)."""

    live = False

    def __init__(self, source_id: str, uri: str, rate: int, *, key: str) -> None:
        self.decoder = AudioDecoder(source_id, uri, rate, key=key)

    def open(self) -> None:
        self.decoder.open()

    def chunks(self) -> Iterator[AudioChunk]:
        return self.decoder.chunks()

    def stats(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self.decoder.close()


class StreamAudio:
    """A live audio stream (rtsp://, rtmp://, http(s):// ...) of its own, reconnecting with backoff.

    After a reconnect the stream's clock starts over: its chunks go on from where the audio stopped
    plus the time it was offline, as a live video source's frames do (sources.live)."""

    live = True

    def __init__(
        self,
        source_id: str,
        uri: str,
        rate: int,
        *,
        options: dict[str, str],
        timeout_s: float,
        backoff: Backoff,
    ) -> None:
        self.source_id, self.uri, self.rate = source_id, uri, rate
        self.options, self.timeout_s, self.backoff = options, timeout_s, backoff
        self.stopping = False
        self.reconnects = 0

    def open(self) -> None:
        return None  # connecting may take a while: it happens on the feed's thread

    def chunks(self) -> Iterator[AudioChunk]:
        offset: float | None = 0.0
        end: float | None = None
        attempt = 0
        while not self.stopping:
            decoder = AudioDecoder(
                self.source_id, self.uri, self.rate, options=self.options, timeout_s=self.timeout_s
            )
            lost_at = time.monotonic()
            try:
                decoder.open()
                attempt = 0
                for chunk in decoder.chunks():
                    if offset is None:  # the first chunk after a reconnect: go on past the gap
                        offset = (end or 0.0) + (time.monotonic() - lost_at) - chunk.time_s
                    end = chunk.time_s + offset + chunk.samples.size / self.rate
                    yield AudioChunk(chunk.samples, chunk.time_s + offset)
                    lost_at = time.monotonic()
                    if self.stopping:
                        return
            except SourceError as err:
                log.warning("%s; reconnecting", err)
            finally:
                decoder.close()
            attempt += 1
            if self.backoff.gives_up(attempt):
                raise SourceError(f"source {self.source_id}: audio.uri: gave up after {attempt} attempt(s)")
            self.reconnects += 1
            offset = None
            time.sleep(self.backoff.delay(attempt))

    def stats(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self.stopping = True


class PushedAudioFrames:
    """The audio track of the live video stream itself (`audio.uri: self` on rtsp:// ...): the video
    source hands each chunk over as it demuxes it (`push`), this producer hands them to the feed."""

    live = True

    def __init__(self, capacity_s: float, rate: int) -> None:
        self._queue: deque[AudioChunk] = deque(maxlen=max(8, int(capacity_s * rate / 512)))
        self._ready = threading.Condition()
        self.stopping = False

    def push(self, chunk: AudioChunk) -> None:
        with self._ready:
            self._queue.append(chunk)
            self._ready.notify()

    def open(self) -> None:
        return None

    def chunks(self) -> Iterator[AudioChunk]:
        while not self.stopping:
            with self._ready:
                if not self._queue:
                    self._ready.wait(0.1)
                    continue
                chunk = self._queue.popleft()
            yield chunk

    def stats(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self.stopping = True
