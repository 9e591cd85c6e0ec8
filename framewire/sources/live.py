"""Live sources: network streams and V4L2 cameras read by PyAV, and frames pushed over ZeroMQ.

A live source is a `framewire.pipeline.frame.LiveFrameSource`: it does not end when its stream does. When a
read fails, times out or reaches the end, it closes the stream and opens it again, waiting
`initial_s`, then twice as long each time up to `max_s`, for as long as `max_attempts` allows,
while the decode worker and the rest of the pipeline keep going. It counts its reconnects and the
seconds it spent offline (`stats()`, sent to the hub). The frames after a reconnect continue the
same timeline: their pts go on from the last one, past the gap. A stream that comes back at another
size ends the source with an error (the frame pool and the outputs are sized for the first one).

Credentials in a URI appear only as `***` in every log line and error (`framewire.pipeline.uris.redact`).
Frames pushed over ZeroMQ are `framewire.sources.zmq`.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from framewire.media.video_reader import PendingImage, StreamInfo, VideoReader
from framewire.config import CameraConfig, SourceConfig
from framewire.pipeline.backoff import Backoff
from framewire.pipeline.errors import SourceError
from framewire.pipeline.frame import SourceInterrupted
from framewire.pipeline.uris import redact, scheme

log = logging.getLogger(__name__)

WAIT_SLICE_S = 0.1
"""How often a source that waits (to reconnect, for a producer) asks whether it should stop."""
DEFAULT_FIRST_S, DEFAULT_LONGEST_S = 0.5, 30.0
"""Reconnect waits of a source built without a config (the config's own defaults are in `reconnect:`)."""


def stream_options(
    uri: str,
    *,
    timeout_s: float,
    rtsp_transport: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """FFmpeg options for a network stream: its protocol's own socket timeout, in microseconds.

    Checked against the FFmpeg in PyAV 18 (FFmpeg 8): RTSP takes `timeout` (called `stimeout`
    before FFmpeg 5, which now ignores that name); HTTP takes `timeout` and the generic `rw_timeout`;
    RTMP takes `rw_timeout` only (its `timeout` is a listen timeout in seconds). PyAV's own
    open/read timeout (`timeout_s` of the reader) backs these up for every protocol.
    """
    micros = str(int(timeout_s * 1_000_000))
    found = scheme(uri)
    options: dict[str, str] = {}
    if found in ("rtsp", "rtsps"):
        options["rtsp_transport"] = rtsp_transport or "tcp"
        options["timeout"] = micros
    elif found in ("http", "https"):
        options["timeout"] = micros
        options["rw_timeout"] = micros
    else:
        options["rw_timeout"] = micros
    options.update(extra or {})
    return options


def camera_options(camera: CameraConfig | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """FFmpeg v4l2 input options from a source's `camera:` keys (video_size, framerate, input_format)."""
    options: dict[str, str] = {}
    if camera is not None:
        if camera.width is not None and camera.height is not None:
            options["video_size"] = f"{camera.width}x{camera.height}"
        if camera.fps is not None:
            options["framerate"] = f"{camera.fps:g}"
        if camera.input_format is not None:
            options["input_format"] = camera.input_format
    options.update(extra or {})
    return options


V4L2_MAJOR = 81
"""The character-device major number Linux gives every video4linux device (/dev/video*)."""


def v4l2_problem(path: str) -> str | None:
    """Why `path` is not a V4L2 camera (missing, a file, another kind of device), or None if it is one."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return f"no camera at {path}"
    except OSError as err:
        return f"cannot read {path}: {err.strerror}"
    if stat.S_ISCHR(found.st_mode) and os.major(found.st_rdev) == V4L2_MAJOR:
        return None
    mode, device = found.st_mode, found.st_rdev
    if stat.S_ISCHR(mode):
        what = f"character device {os.major(device)}:{os.minor(device)}, not video4linux ({V4L2_MAJOR})"
    else:
        what = "a directory" if stat.S_ISDIR(mode) else "a file" if stat.S_ISREG(mode) else "not a device"
    return f"{path} is not a camera (a V4L2 video device such as /dev/video0): it is {what}"


class LiveSource:
    """A network stream (RTSP, RTMP, HTTP(S)/HLS, SRT, ...) or a V4L2 camera, reconnecting as it
    drops. Build it cheaply; `open()` connects (retrying like a reconnect) in the decode worker."""

    def __init__(
        self,
        source_id: str,
        uri: str,
        *,
        options: Mapping[str, str],
        format: str | None = None,
        timeout_s: float | None = 5.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.source_id = source_id
        self.uri = uri
        self.shown = redact(uri)
        self.options = dict(options)
        self.format = format
        self.timeout_s = timeout_s
        self.backoff = backoff if backoff is not None else Backoff(DEFAULT_FIRST_S, DEFAULT_LONGEST_S)
        self._interrupted: Callable[[], bool] = lambda: False
        self._reader: VideoReader | None = None
        self._first: StreamInfo | None = None
        self._reconnects = 0
        self._offline_s = 0.0
        self._online = False
        self._corrupt = 0
        self._last_pts: int | None = None
        self._offset: int | None = None
        self._gap_s = 0.0
        self._time_base: Fraction | None = None
        self._rescale: Fraction | None = None
        """The current connection's time_base over the first's; None when they are the same."""
        self._step = 1
        self.packet_sink: Any = None
        """Set before `open()`: each connection's reader shows it its packets (sources.packets)."""
        self.audio_sink: Callable[[Any, float], None] | None = None
        """Set before `open()`: receives the stream's own audio frames and the offset (seconds) that
        puts them on the source's timeline, the one its frames' pts follow across reconnects."""

    Config = SourceConfig  # kind camera, and live files and streams (FileSource hands them over)

    @classmethod
    def from_config(cls, config: SourceConfig) -> LiveSource:
        """A camera, a live stream, or a file said to be live (read again from the start each time it
        ends)."""
        r = config.reconnect
        backoff = Backoff(r.initial_s, r.max_s, jitter=r.jitter, max_attempts=r.max_attempts)
        if config.kind == "camera":
            options = camera_options(config.camera, config.ffmpeg_options)
            return cls(
                config.id,
                config.uri,
                options=options,
                format="v4l2",
                timeout_s=config.timeout_s,
                backoff=backoff,
            )
        if config.kind == "stream":
            options = stream_options(
                config.uri,
                timeout_s=config.timeout_s,
                rtsp_transport=config.rtsp_transport,
                extra=config.ffmpeg_options,
            )
            return cls(config.id, config.uri, options=options, timeout_s=config.timeout_s, backoff=backoff)
        return cls(config.id, config.uri, options={}, timeout_s=None, backoff=backoff)

    def set_interrupt(self, interrupted: Callable[[], bool]) -> None:
        self._interrupted = interrupted

    def open(self) -> dict[str, Any]:
        """Connect (retrying with backoff) and describe the stream; SourceInterrupted if told to
        stop first. A camera that is not there at all fails at once: that is a config mistake."""
        problem = v4l2_problem(self.uri) if self.format == "v4l2" else None
        if problem:  # a mistake in the config, which no retry mends (/dev/null would be retried for ever)
            raise SourceError(f"source {self.source_id}: {problem}")
        reader = self._connect()
        self._first = reader.info
        info = reader.info.to_dict()
        info["live"] = True
        return info

    def frames(self) -> Iterator[tuple[np.ndarray | PendingImage, int, float]]:
        first = self._first
        if first is None or self._reader is None:
            raise SourceError(f"source {self.source_id}: frames() before open()")
        while True:
            reader = self._reader
            assert reader is not None
            try:
                num, den = first.time_base.numerator, first.time_base.denominator  # ints: no Fraction a frame
                for image, raw_pts, _ in reader.pending_frames():  # converted straight into the slot
                    pts = self._retime(raw_pts, reader.info.time_base)
                    yield image, pts, pts * num / den
                why = f"source {self.source_id}: the stream ended"
            except SourceError as err:
                why = str(err)
            self._corrupt += reader.corrupt
            reader.close()
            self._reader = None
            self._online = False
            lost_at = time.monotonic()
            log.warning("%s; reconnecting to %s", why, self.shown)
            try:
                reader = self._connect()
            except SourceInterrupted:
                return
            new = reader.info
            if (new.width, new.height) != (first.width, first.height):
                raise SourceError(
                    f"source {self.source_id}: {self.shown} came back at {new.width}x{new.height}, "
                    f"it started at {first.width}x{first.height}; a live source cannot change size"
                )
            self._gap_s = time.monotonic() - lost_at
            self._reconnects += 1
            self._offline_s += self._gap_s
            self._offset = None
            log.warning(
                "source %s: reconnected to %s after %.1f s offline (%d reconnect(s) so far)",
                self.source_id,
                self.shown,
                self._gap_s,
                self._reconnects,
            )

    def stats(self) -> dict[str, Any]:
        current = self._reader.corrupt if self._reader is not None else 0
        return {
            "reconnects": self._reconnects,
            "offline_s": round(self._offline_s, 3),
            "online": self._online,
            "corrupt": self._corrupt + current,
        }

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._online = False

    def _connect(self) -> VideoReader:
        attempt = 0
        while True:
            if self._interrupted():
                raise SourceInterrupted(self.source_id)
            reader = VideoReader(
                self.source_id,
                self.uri,
                options=self.options,
                format=self.format,
                timeout_s=self.timeout_s,
                live=True,
            )
            if self.audio_sink is not None:
                reader.audio_sink = self._audio
            reader.packet_sink = self.packet_sink
            try:
                if self.format == "v4l2" and not os.path.exists(self.uri):
                    raise SourceError(f"source {self.source_id}: no camera at {self.shown}")
                reader.open()
            except SourceError as err:
                reader.close()
                attempt += 1
                if self.backoff.gives_up(attempt):
                    raise SourceError(f"{err} (gave up after {attempt} attempt(s))") from None
                delay = self.backoff.delay(attempt)
                log.warning("%s; retrying in %.1f s (attempt %d)", err, delay, attempt)
                self._wait(delay)
                continue
            self._reader = reader
            self._online = True
            return reader

    def _audio(self, frame: Any) -> None:
        """An audio frame of the current connection, on the source's timeline: its clock is the
        video's, shifted as `_retime` shifts the frames (unknown right after a reconnect until the
        first frame: such audio is left out, a gap in the ring)."""
        offset = self._offset if self._offset is not None else (0 if self._last_pts is None else None)
        if self.audio_sink is None or self._first is None or offset is None:
            return
        self.audio_sink(frame, float(offset * self._first.time_base))

    def _wait(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while True:
            if self._interrupted():
                raise SourceInterrupted(self.source_id)
            left = until - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(WAIT_SLICE_S, left))

    def _retime(self, pts: int, time_base: Fraction) -> int:
        """`pts` of the current connection on the first connection's timeline: after a reconnect
        the stream's clock starts over, so the frames go on from the last pts plus the gap."""
        assert self._first is not None
        if time_base is not self._time_base:  # a new connection's: compared once, not each frame
            self._time_base = time_base
            self._rescale = None if time_base == self._first.time_base else time_base / self._first.time_base
            self._step = self._first.frame_duration
        raw = pts if self._rescale is None else round(pts * self._rescale)
        step = self._step
        if self._offset is None:
            if self._last_pts is None:
                self._offset = 0
            else:
                self._offset = self._last_pts + max(step, round(self._gap_s / self._first.time_base)) - raw
        out = raw + self._offset
        if self._last_pts is not None and out <= self._last_pts:
            out = self._last_pts + step
        self._last_pts = out
        return out
