"""A template video driven by audio: the talking-avatar source.

The template's frames are played in a loop (`loop`) or back and forth (`pingpong`) at the template's
own frame rate, for exactly as long as the audio lasts: frame k is at `t0 + k / fps` on the audio's
clock, and it is read only once the audio around it is there (sources.audio.AudioGate). A file's
audio makes a file job (every frame, as fast as the stages go, or paced with `realtime`); a live
audio source (the ZeroMQ audio input, a stream) makes frames come out as the audio arrives, in real
time. The video_file output muxes the driving audio, so the file is as long as the audio.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

from framewire.media.video_reader import PendingImage, StreamInfo, VideoReader
from framewire.pipeline.errors import SourceError
from framewire.pipeline.frame import SourceInterrupted
from framewire.sources.audio import AudioFeed, AudioGate, read_ahead_limit, with_audio_info

log = logging.getLogger(__name__)

MAX_PINGPONG_BYTES = 2 * 1024**3
"""A ping-ponged template is held decoded in memory (it is played backwards); this much at most."""


class TemplateSource:
    """Frames of a template video, as many as the audio lasts (`sources[].template`)."""

    def __init__(
        self,
        source_id: str,
        uri: str,
        mode: str,
        feed: AudioFeed,
        gate: AudioGate,
        *,
        rate: int,
        mux_path: str | None,
        lookback_s: float,
    ) -> None:
        self.source_id = source_id
        self.uri = uri
        self.mode = mode
        self.feed = feed
        self.gate = gate
        self.rate = rate
        self.mux_path = mux_path
        self.lookback_s = lookback_s
        self._info: StreamInfo | None = None
        self._frames: list[PendingImage] = []
        self._last_s: float | None = None
        self._interrupted: Callable[[], bool] = lambda: False

    def set_interrupt(self, interrupted: Callable[[], bool]) -> None:
        self._interrupted = interrupted
        self.gate.interrupted = interrupted

    def open(self) -> dict[str, Any]:
        with VideoReader(self.source_id, self.uri) as reader:
            self._info = reader.info
            if self.mode == "pingpong":
                self._frames = self._hold(reader)
        self.feed.open()
        info = self._info.to_dict()
        # Its length is the audio's, unknown here; it is no file that could be truncated.
        info.update(frame_count=None, duration_s=None, is_file=False, has_audio=False, audio_codec=None, template=self.mode)
        return with_audio_info(info, self.rate, self.feed.capacity_s, self.mux_path)

    def attach_audio(self, ring: Any) -> None:
        self.feed.attach(ring, self._limit)

    def _limit(self) -> float | None:
        return read_ahead_limit(self.feed, self._last_s, self.lookback_s, self.gate.need)

    def frames(self) -> Iterator[tuple[PendingImage, int, float]]:
        info = self._info
        if info is None:
            raise SourceError(f"source {self.source_id}: frames() before open()")
        t0, started = self._start()
        step = 1 / info.fps
        pictures = self._pictures()
        for k in range(2**62):
            time_s = float(t0 + k * step)
            due = started + float(k * step) + self.gate.need.after_s if self.feed.live else None
            if due is not None and self.gate.policy.policy == "wait":
                due += self.gate.policy.wait_ms / 1000.0
            self._last_s = time_s
            admitted = self.gate.admit(time_s, due=due, clip_to_end=True)
            end = self.feed.ring.end_s() if self.feed.ring is not None else None
            if (end is not None and time_s >= end) or (self._interrupted() and self.feed.live):
                return
            image = next(pictures)
            if admitted:
                pts = round(time_s / info.time_base)
                yield image, pts, float(pts * info.time_base)

    def _start(self) -> tuple[Fraction, float]:
        """The audio's clock at frame 0 (0 for a file: its own clock starts there; the first chunk's
        time for a live source), and when frame 0 is due (monotonic)."""
        if not self.feed.live:
            return Fraction(0), time.monotonic()
        while self.feed.ring is None or self.feed.ring.origin_s is None:
            if self._interrupted() or self.feed.ended():
                if self.feed.error:
                    raise SourceError(self.feed.error)
                raise SourceInterrupted(self.source_id)
            time.sleep(0.01)
        origin = self.feed.ring.origin_s
        return Fraction(origin).limit_denominator(1_000_000), time.monotonic()

    def _pictures(self) -> Iterator[PendingImage]:
        """The template's frames forever: looped, or forwards then backwards. Decoded, not yet
        converted: each one writes itself into its slot, as BGR or as the I420 planes of a job that
        keeps YUV frames (a file source's frames do the same)."""
        if self.mode == "pingpong":
            order = list(range(len(self._frames))) + list(range(len(self._frames) - 2, 0, -1))
            while True:
                for index in order or [0]:
                    yield self._frames[index]
        for loop in range(2**62):
            count = 0
            with VideoReader(self.source_id, self.uri) as reader:
                reader.warn_derived_pts = loop == 0  # the same file every time: its first read says it
                for image, _, _ in reader.pending_frames():
                    count += 1
                    yield image
            if not count:
                raise SourceError(f"source {self.source_id}: the template {self.uri} has no frames")

    def _hold(self, reader: VideoReader) -> list[PendingImage]:
        frames: list[PendingImage] = []
        limit = MAX_PINGPONG_BYTES // max(1, reader.info.width * reader.info.height * 3)
        for image, _, _ in reader.pending_frames():
            frames.append(image)
            if len(frames) > limit:
                raise SourceError(
                    f"source {self.source_id}: the template {self.uri} is too long to ping-pong "
                    f"(over {limit} frames of {reader.info.width}x{reader.info.height}); use template: loop"
                )
        if not frames:
            raise SourceError(f"source {self.source_id}: the template {self.uri} has no frames")
        return frames

    def stats(self) -> dict[str, Any]:
        feed = self.feed.stats()
        out: dict[str, Any] = {"audio": {**feed.pop("audio"), **self.gate.counts}}
        out.update({k: v for k, v in feed.items() if isinstance(v, dict)})
        return out

    def close(self) -> None:
        self.feed.close()


def frames_for(duration_s: float, fps: Fraction) -> int:
    """How many frames a template driven by `duration_s` of audio gives: every frame that starts
    before the audio ends."""
    return math.ceil(duration_s * fps - 1e-9)
