"""A source's audio in the decode worker: read it, write it into the source's audio ring, and hold
each frame back until the audio around it is there (or apply the source's missing-audio policy).

- `AudioFeed` runs an audio producer (`framewire.sources.audio_producers`) on a thread of the
  decode worker: a file (the video's own track, or a separate WAV/MP3/AAC/M4A file), a live stream,
  the ZeroMQ audio input (`framewire.sources.zmq_audio.ZmqAudio`) or the audio track of the live
  video stream itself (`framewire.sources.live.LiveSource` hands its packets over). Chunks are
  written into the ring (pipeline.audioring) at their time on the video clock. A file's audio is
  read ahead of the video, but never further than the ring can hold for the frames still in flight.
- `AudioGate` decides, frame by frame, when the audio window around the frame is complete: for
  a file it waits for the audio (a file is never late); for a live source the policy says what a
  late or missing window means (`silence`, `wait` up to `wait_ms`, `drop`), and it is counted.
- `WithAudio` wraps any FrameSource with both, and tells the hub (in the stream info) to make the
  ring and what the video_file output should mux.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from framewire.media.audio import AudioChunk
from framewire.pipeline.wire.audioring import AudioRing
from framewire.pipeline.errors import SourceError
from framewire.pipeline.frame import FrameSource, PendingPixels
from framewire.pipeline.uris import local_path
from framewire.sources.audio_producers import AudioProducer, PushedAudioFrames

log = logging.getLogger(__name__)

POLL_S = 0.002
"""How often a frame waiting for its audio looks again (a 25 fps frame lasts 40 ms)."""
PIECE_S = 0.25
"""The most audio written into a ring at once (the read-ahead limit is checked before each piece)."""
INTERLEAVING_S = 0.5
"""How far a stream's audio may come after its frames, beyond the window (muxers interleave by this)."""


@dataclass(frozen=True)
class AudioNeed:
    """The span of audio the job's steps read around a frame's time: [t - before_s, t + after_s]."""

    before_s: float = 0.0
    after_s: float = 0.0


@dataclass(frozen=True)
class MissingPolicy:
    """What a frame whose audio window is incomplete gets (`sources[].audio.missing`)."""

    policy: str = "silence"
    """silence: go on, the missing samples read as silence; drop: drop the frame; wait: wait up to
    wait_ms for late audio, then `after_wait`."""
    wait_ms: float = 200.0
    after_wait: str = "silence"


@dataclass
class _FeedState:
    ring: AudioRing | None = None
    limit: Callable[[], float | None] = lambda: None
    early: deque[AudioChunk] = field(default_factory=deque)
    ended: bool = False
    gap_s: float = 0.0
    overlap_s: float = 0.0


class AudioFeed:
    """Runs an `AudioProducer` on a thread and writes its chunks into the ring once it is attached.

    Chunks that come before the ring (a live producer that starts before the first frame) wait,
    bounded by the ring's capacity. `limit()` bounds how far ahead a file's audio is written: past
    it, the thread waits, so samples the frames in flight still need are never overwritten.
    """

    def __init__(self, source_id: str, producer: AudioProducer, capacity_s: float, rate: int = 16000) -> None:
        self.source_id = source_id
        self.producer = producer
        self.capacity_s = capacity_s
        self.rate_hint = rate
        """The producer's sample rate (the ring's), to cut its chunks into pieces."""
        self.error: str | None = None
        self._state = _FeedState()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def live(self) -> bool:
        return self.producer.live

    @property
    def ring(self) -> AudioRing | None:
        return self._state.ring

    def open(self) -> None:
        """Open the producer (a missing file or track fails here, at start) and start reading."""
        self.producer.open()
        self._thread = threading.Thread(target=self._run, name=f"audio-{self.source_id}", daemon=True)
        self._thread.start()

    def attach(self, ring: AudioRing, limit: Callable[[], float | None]) -> None:
        with self._lock:
            self._state.ring, self._state.limit = ring, limit
            while self._state.early:
                self._write(self._state.early.popleft())
            if self._state.ended:
                ring.end()

    def ended(self) -> bool:
        """The producer has ended (or failed): no more audio will come."""
        return self._state.ended

    def stats(self) -> dict[str, Any]:
        out = dict(self.producer.stats())
        out["audio"] = {"gap_s": round(self._state.gap_s, 3)}
        return out

    def close(self) -> None:
        """Stop the thread, then close the producer. Closing a file's container while the thread
        still decodes from it crashed the decode worker (SIGSEGV in FFmpeg, seen when `max_frames`
        ended a source with audio before its audio did): the thread sees the stop between chunks. A
        live producer blocked in a read is unblocked by its close, so it is closed after a short wait."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        self.producer.close()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        with self._lock:
            self._state.ended = True

    def _run(self) -> None:
        try:
            for chunk in self.producer.chunks():
                if self._stop.is_set():
                    break
                for piece in _pieces(chunk, self.rate_hint):
                    self._hold_back(piece.time_s)
                    with self._lock:
                        if self._state.ring is None:
                            self._keep_early(piece)
                        else:
                            self._write(piece)
        except Exception as exc:  # ends the audio; the video source reports it (AudioGate)
            self.error = (
                str(exc) if isinstance(exc, SourceError) else f"source {self.source_id}: audio: {exc}"
            )
            log.debug("audio of source %s failed", self.source_id, exc_info=True)
        finally:
            with self._lock:
                self._state.ended = True
                if self._state.ring is not None:
                    self._state.ring.end()

    def _hold_back(self, time_s: float) -> None:
        """Wait while `time_s` is past the read-ahead limit. A file waits for the ring too: read
        ahead into the early queue, it would lose what does not fit there."""
        while not self._stop.is_set():
            if self._state.ring is None and not self.producer.live:
                time.sleep(0.005)
                continue
            limit = self._state.limit()
            if limit is None or time_s <= limit:
                return
            time.sleep(0.005)

    def _keep_early(self, chunk: AudioChunk) -> None:
        early = self._state.early
        early.append(chunk)
        while early and chunk.time_s - early[0].time_s > self.capacity_s:
            early.popleft()

    def _write(self, chunk: AudioChunk) -> None:
        ring = self._state.ring
        assert ring is not None
        gap, overlap = ring.write(chunk.samples, chunk.time_s)
        if gap:
            self._state.gap_s += gap / ring.rate
            log.debug(
                "source %s: %.3f s of audio missing before %.3f s",
                self.source_id,
                gap / ring.rate,
                chunk.time_s,
            )
        self._state.overlap_s += overlap / ring.rate


def _pieces(chunk: AudioChunk, rate: int) -> Iterator[AudioChunk]:
    """A chunk in pieces of at most PIECE_S: a decoder may hand over seconds at once (one WAV packet
    can hold the whole file), which would overrun the ring in one write."""
    step = max(1, int(PIECE_S * rate))
    for start in range(0, chunk.samples.size, step):
        yield AudioChunk(chunk.samples[start : start + step], chunk.time_s + start / rate)


class AudioGate:
    """Holds each frame until the audio window around it is there, or applies the missing-audio policy.

    `admit(t)` says whether the frame at time `t` goes on (True) or is dropped (False). A file's
    audio is never late: its frames wait for it (its feed reads ahead). A live source's frame waits
    at most until `due` (now for `silence` and `drop`, `wait_ms` later for `wait`). An incomplete
    window that cannot complete (a gap, the audio ended) gets the policy at once. Counted by action.
    """

    def __init__(self, source_id: str, feed: AudioFeed, need: AudioNeed, policy: MissingPolicy) -> None:
        self.source_id = source_id
        self.feed = feed
        self.need = need
        self.policy = policy
        self.counts = {"silence": 0, "drop": 0, "waited": 0}
        self.interrupted: Callable[[], bool] = lambda: False

    def admit(self, time_s: float, *, due: float | None = None, clip_to_end: bool = False) -> bool:
        """Whether the frame at `time_s` (video clock) goes on; `due` (monotonic) overrides how long
        a live source's frame may wait for its audio. `clip_to_end`: once the audio has ended, the
        part of the window past its end is not missing (a template driven by the audio ends there)."""
        if due is None:
            due = time.monotonic() + self.wait_s()
        waited = False
        while True:
            decided = self.ready(time_s, due, clip_to_end=clip_to_end)
            if decided is not None:
                self.counts["waited"] += waited and decided
                return decided
            waited = True
            time.sleep(POLL_S)

    def wait_s(self) -> float:
        """How long a live frame may wait for late audio by the policy (0 but for `wait`)."""
        return self.policy.wait_ms / 1000.0 if self.policy.policy == "wait" else 0.0

    def ready(
        self, time_s: float, due: float, *, clip_to_end: bool = False, final: bool = False
    ) -> bool | None:
        """`admit` without waiting: True or False once decided, None while the window may still
        complete (before `due` for a live source; ever, for a file). `final`: no more will come."""
        if self.feed.error:
            raise SourceError(self.feed.error)
        ring = self.feed.ring
        window = self._window(ring, time_s, clip_to_end) if ring is not None else None
        if window is not None and window.complete:
            return True
        end = ring.end_s() if ring is not None and clip_to_end else None
        if end is not None and time_s >= end:
            return False  # past the end of the audio: a template driven by it ends here
        pending = window is None or window.pending > 0
        if not pending or final or self.interrupted() or (self.feed.live and time.monotonic() >= due):
            return self._missing()
        return None

    def _window(self, ring: AudioRing, time_s: float, clip_to_end: bool) -> Any:
        # Before the audio began there is nothing to wait for: not missing, only silent.
        origin = ring.origin_s
        start = time_s - self.need.before_s if origin is None else max(time_s - self.need.before_s, origin)
        stop = time_s + self.need.after_s
        end = ring.end_s() if clip_to_end else None
        if end is not None:
            stop = max(min(stop, end), start + 1 / ring.rate)
        return ring.window(start, max(1, int(round((stop - start) * ring.rate))))

    def _missing(self) -> bool:
        action = self.policy.after_wait if self.policy.policy == "wait" else self.policy.policy
        self.counts[action] += 1
        if self.counts[action] == 1:
            log.warning(
                "source %s: a frame's audio window is incomplete: %s (further ones are counted in "
                "framewire_audio_windows_missing_total)",
                self.source_id,
                "dropped" if action == "drop" else "silence",
            )
        return action != "drop"


class WithAudio:
    """A FrameSource plus its audio: the ring is asked for in `open()`'s info, filled by the feed,
    and every frame goes through the gate. It is live (stops when told to while it waits) either way."""

    def __init__(
        self,
        inner: FrameSource,
        feed: AudioFeed,
        gate: AudioGate,
        *,
        rate: int,
        mux_path: str | None,
        lookback_s: float,
    ) -> None:
        """`mux_path`: the file whose audio the video_file output copies (None: the ring's audio, for
        a live source). `lookback_s`: how far behind the last frame read a frame may still be in
        flight, which the feed must not overwrite."""
        self.inner = inner
        self.feed = feed
        self.gate = gate
        self.rate = rate
        self.mux_path = mux_path
        self.lookback_s = lookback_s
        self._last_s: float | None = None

    def set_interrupt(self, interrupted: Callable[[], bool]) -> None:
        self.gate.interrupted = interrupted
        setter = getattr(self.inner, "set_interrupt", None)
        if setter is not None:
            setter(interrupted)

    def open(self) -> dict[str, Any]:
        self.feed.open()
        info = dict(self.inner.open())
        return with_audio_info(info, self.rate, self.feed.capacity_s, self.mux_path)

    def attach_audio(self, ring: AudioRing) -> None:
        self.feed.attach(ring, self._limit)

    def _limit(self) -> float | None:
        return read_ahead_limit(self.feed, self._last_s, self.lookback_s, self.gate.need)

    def frames(self) -> Iterator[tuple[np.ndarray | PendingPixels, int, float]]:
        if isinstance(self.feed.producer, PushedAudioFrames):
            yield from self._interleaved()
            return
        for image, pts, time_s in self.inner.frames():
            self._last_s = time_s
            if self.gate.admit(time_s):
                yield image, pts, time_s

    def _interleaved(self) -> Iterator[tuple[np.ndarray | PendingPixels, int, float]]:
        """The stream's own audio comes in the same stream as its frames, after them by the window's
        length: waiting for it in the reading thread would stop it from coming. Frames wait in a
        queue instead, while the stream is read on, until their window is complete or too late:
        the window's length plus the policy's wait plus half a second of the stream's interleaving."""
        queue: deque[tuple[np.ndarray | PendingPixels, int, float, float]] = deque()
        hold = self.gate.need.after_s + self.gate.wait_s() + INTERLEAVING_S
        for image, pts, time_s in self.inner.frames():
            self._last_s = time_s
            queue.append((image, pts, time_s, time.monotonic() + hold))
            yield from self._release(queue, final=False)
        yield from self._release(queue, final=True)

    def _release(
        self, queue: deque[Any], *, final: bool
    ) -> Iterator[tuple[np.ndarray | PendingPixels, int, float]]:
        while queue:
            image, pts, time_s, due = queue[0]
            decided = self.gate.ready(time_s, due, final=final)
            if decided is None:
                return
            queue.popleft()
            if decided:
                yield image, pts, time_s

    def stats(self) -> dict[str, Any]:
        inner = getattr(self.inner, "stats", None)
        out = dict(inner()) if inner is not None else {}
        feed = self.feed.stats()
        out["audio"] = {**feed.pop("audio"), **self.gate.counts}
        for key, value in feed.items():
            if isinstance(value, dict):
                out[key] = {**out.get(key, {}), **value}
        return out

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            self.feed.close()


def read_ahead_limit(
    feed: AudioFeed, last_s: float | None, lookback_s: float, need: AudioNeed
) -> float | None:
    """How far a file's audio may be written: the ring's capacity ahead of the frames still in flight
    (`lookback_s` behind the last frame read), and at least the window of the next frame, so a ring
    too small for the lookback loses old windows (counted as missing) rather than stalling."""
    if feed.live:
        return None
    last = last_s if last_s is not None else 0.0
    return last + max(feed.capacity_s - lookback_s, need.after_s + 1.0)


def with_audio_info(
    info: dict[str, Any], rate: int, capacity_s: float, mux_path: str | None
) -> dict[str, Any]:
    """A stream's info that asks the hub for an audio ring and tells the outputs what to mux."""
    info["audio"] = {"rate": rate, "capacity_s": capacity_s}
    if mux_path is not None:
        info["audio_path"] = os.path.abspath(mux_path)
        info["has_audio"] = True
    else:
        info["audio_mux"] = "ring"
        info["has_audio"] = True
    return info


def mux_path_of(uri: str, video_uri: str) -> str | None:
    """The file whose audio an output copies: the audio file, or the video file for its own track;
    None for a live audio source (the output takes the ring's audio)."""
    return local_path(video_uri if uri == "self" else uri)
