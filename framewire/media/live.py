"""Live video out: one source's frames encoded to H.264 and sent by a thread of their own, to an RTSP
or RTMP server or to HLS files, reopened with backoff when the receiver goes away.

The caller (an output stage) only puts a copy of each frame in a bounded queue and returns: a dead or
slow receiver never slows the pipeline. When the queue is full the oldest frame is dropped; while the
connection is down, frames are dropped until the next try. Both are counted (`LiveCounts`). Each
connection starts a fresh encoder, so a receiver that joins again gets a key frame and the stream's
parameters first, and its timestamps start at 0.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import cast

import av
import av.container
import av.video.stream
import cv2
import numpy as np
import numpy.typing as npt

from framewire.pipeline.backoff import Backoff

log = logging.getLogger(__name__)

_BT601 = 6  # AVCOL_SPC_SMPTE170M: the matrix OpenCV's BGR->I420 uses
_TV_RANGE = 1  # AVCOL_RANGE_MPEG


@dataclass(frozen=True)
class Encoding:
    """H.264 settings for a live stream."""

    fps: Fraction
    time_base: Fraction
    preset: str = "ultrafast"
    tune: str | None = "zerolatency"
    bitrate_kbps: int = 2000
    keyint: int = 50

    def options(self) -> dict[str, str]:
        """libx264's options: the bit rate capped over one second (VBV), so a live receiver's buffer holds."""
        rate = f"{self.bitrate_kbps}k"
        found = {"preset": self.preset, "b": rate, "maxrate": rate, "bufsize": rate}
        if self.tune:
            found["tune"] = self.tune
        return found


@dataclass(frozen=True)
class Target:
    """Where a connection goes: `url` (a file path for HLS) opened with FFmpeg's `muxer`."""

    url: str
    muxer: str
    options: Mapping[str, str] = field(default_factory=dict)
    shown: str = ""
    """The URL as logs may show it (credentials redacted); the URL itself where empty."""

    def __post_init__(self) -> None:
        if not self.shown:
            object.__setattr__(self, "shown", self.url)


def push_target(url: str, muxer: str, timeout_s: float, shown: str = "") -> Target:
    """Where a push goes: RTSP over TCP (no UDP ports to open, nothing lost to a full socket buffer),
    its socket operations bounded by `timeout_s`; or FLV over RTMP, which has no end to seek back to
    for its duration. PyAV opens an RTMP output without options, so an RTMP server that takes the
    connection and never answers is waited for as long as TCP waits. PyAV connects (write_header)
    holding the GIL: a server that does not answer stalls the output process for up to `timeout_s`
    per try (docs/guides/video-out.md); a refused connection costs nothing."""
    if muxer == "rtsp":
        options = {"rtsp_transport": "tcp", "timeout": str(int(timeout_s * 1_000_000))}
    else:
        options = {"flvflags": "no_duration_filesize"}
    return Target(url, muxer, options, shown)


@dataclass
class LiveCounts:
    """What happened to one source's frames."""

    frames: int = 0
    """Frames handed to the sender."""
    sent: int = 0
    """Frames encoded and written to a receiver."""
    dropped_full: int = 0
    """Dropped because the queue was full (the encoder or the receiver is slower than the source)."""
    dropped_down: int = 0
    """Dropped while there was no connection (waiting to try again)."""
    connects: int = 0
    """Connections opened (the first one included)."""
    failures: int = 0
    """Connections that could not be opened, or were lost."""

    @property
    def dropped(self) -> int:
        return self.dropped_full + self.dropped_down

    @property
    def reconnects(self) -> int:
        return max(0, self.connects - 1)

    def add(self, other: LiveCounts) -> None:
        for key, value in vars(other).items():
            setattr(self, key, getattr(self, key) + value)

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "dropped": self.dropped, "reconnects": self.reconnects}


class _Connection:
    """One open output: a container with one H.264 stream, pts counted from its first frame."""

    def __init__(self, target: Target, encoding: Encoding, width: int, height: int, timeout_s: float) -> None:
        self.target = target
        self.width, self.height = width + width % 2, height + height % 2  # 4:2:0 needs even sides
        self._first: int | None = None
        self._last = -1
        self.container = av.open(
            target.url,
            mode="w",
            format=target.muxer,
            options=dict(target.options),
            timeout=(timeout_s, timeout_s),
        )
        try:
            self.stream = self._add_stream(encoding)
            # connects (RTSP, RTMP) and writes the header now, not at the first frame
            self.container.start_encoding()
        except BaseException:
            self.container.close()
            raise

    def _add_stream(self, encoding: Encoding) -> av.video.stream.VideoStream:
        stream = self.container.add_stream("libx264", rate=encoding.fps)
        if not isinstance(stream, av.video.stream.VideoStream):
            raise ValueError("libx264 is not a video encoder here")
        stream.width, stream.height, stream.pix_fmt = self.width, self.height, "yuv420p"
        stream.time_base = encoding.time_base
        stream.codec_context.time_base = encoding.time_base
        stream.codec_context.colorspace = _BT601
        stream.codec_context.color_range = _TV_RANGE
        stream.codec_context.gop_size = encoding.keyint
        stream.options = {**encoding.options()}
        return stream

    def write(self, image: np.ndarray, pts: int) -> None:
        """Encode and send one BGR frame; the first frame of the connection is at 0, and a pts that
        does not increase (a live source's clock that jumped back) is moved just after the last one."""
        if self._first is None:
            self._first = pts
        out_pts = max(pts - self._first, self._last + 1)
        self._last = out_pts
        if image.shape[0] != self.height or image.shape[1] != self.width:
            image = cv2.copyMakeBorder(
                image, 0, self.height - image.shape[0], 0, self.width - image.shape[1], cv2.BORDER_REPLICATE
            )
        yuv = cast("npt.NDArray[np.uint8]", cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420))
        frame = av.VideoFrame.from_ndarray(yuv, format="yuv420p")
        frame.pts = out_pts
        frame.time_base = self.stream.codec_context.time_base
        self.container.mux(self.stream.encode(frame))

    def close(self, finish: bool) -> None:
        """Flush the encoder and end the stream (`finish`), or only let go of it (a lost connection)."""
        try:
            if finish:
                self.container.mux(self.stream.encode(None))
        finally:
            self.container.close()


class LiveSender:
    """One source's live stream: `put` queues a frame (never blocks), a thread encodes and sends it.

    `target` gives where each connection goes; `prepare` (optional) runs before each open (HLS:
    make the folder). `close` ends the stream properly and returns the counts.
    """

    def __init__(
        self,
        name: str,
        target: Callable[[], Target],
        encoding: Encoding,
        *,
        queue_frames: int = 8,
        backoff_s: tuple[float, float] = (0.5, 10.0),
        timeout_s: float = 5.0,
        prepare: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.target = target
        self.encoding = encoding
        self.timeout_s = timeout_s
        self.prepare = prepare
        self.counts = LiveCounts()
        self._queue: queue.Queue[tuple[np.ndarray, int]] = queue.Queue(maxsize=queue_frames)
        self._ending = threading.Event()
        self._abandon = threading.Event()
        self._lock = threading.Lock()
        self._connection: _Connection | None = None
        self._retry_at = 0.0
        self._backoff = Backoff(*backoff_s)
        self._thread = threading.Thread(target=self._run, name=f"framewire-live-{name}", daemon=True)
        self._thread.start()

    def put(self, image: np.ndarray, pts: int) -> None:
        """Queue a copy of `image` (BGR) at `pts` (the source's time base); drops the oldest when full."""
        item = (np.array(image, copy=True), pts)
        with self._lock:  # one producer; the lock keeps the drop-then-put pair whole
            self.counts.frames += 1
            while True:
                try:
                    self._queue.put_nowait(item)
                    return
                except queue.Full:
                    try:
                        self._queue.get_nowait()
                        self.counts.dropped_full += 1
                    except queue.Empty:
                        pass

    def end(self) -> None:
        """Ask the thread to send what is queued, end the stream and stop (returns at once)."""
        self._ending.set()

    def join(self, timeout_s: float) -> LiveCounts:
        """Wait for the thread after `end()`; past `timeout_s` the frames still queued are dropped
        (counted) and the stream ended, without waiting for that."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning(
                "%s: the sender did not finish within %.1f s: dropping what is queued", self.name, timeout_s
            )
            self._abandon.set()
            self._thread.join(self.timeout_s * 2)
        return self.counts

    def close(self, timeout_s: float = 10.0) -> LiveCounts:
        """Send what is queued, end the stream, stop the thread (see `join`)."""
        self.end()
        return self.join(timeout_s)

    # --- the sender thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                image, pts = self._queue.get(timeout=0.05)
            except queue.Empty:
                if self._ending.is_set():
                    break
                continue
            if self._abandon.is_set():
                self.counts.dropped_down += 1
                continue
            self._send(image, pts)
        if self._connection is not None:
            try:
                self._connection.close(finish=True)
            except (OSError, av.FFmpegError) as exc:
                log.warning("%s: could not end the stream cleanly: %s", self.name, exc)
            self._connection = None

    def _send(self, image: np.ndarray, pts: int) -> None:
        connection = self._connection or self._connect(image)
        if connection is None:
            self.counts.dropped_down += 1
            return
        try:
            connection.write(image, pts)
            self.counts.sent += 1
            self._backoff.reset()
        except (OSError, av.FFmpegError, ValueError) as exc:
            self.counts.dropped_down += 1
            self._lost(f"lost: {_reason(exc, connection.target)}")
            self._drop(connection)

    def _connect(self, image: np.ndarray) -> _Connection | None:
        """A new connection, or None while waiting to try again (after a failure, with backoff)."""
        if time.monotonic() < self._retry_at:
            return None
        target = self.target()
        try:
            if self.prepare is not None:
                self.prepare()
            self._connection = _Connection(
                target, self.encoding, image.shape[1], image.shape[0], self.timeout_s
            )
        except (OSError, av.FFmpegError, ValueError) as exc:
            self._lost(f"cannot open {target.shown}: {_reason(exc, target)}")
            return None
        self.counts.connects += 1
        if self.counts.connects > 1 or self.counts.failures:
            log.warning("%s: connected to %s (connection %d)", self.name, target.shown, self.counts.connects)
        else:
            log.info("%s: connected to %s", self.name, target.shown)
        return self._connection

    def _drop(self, connection: _Connection) -> None:
        self._connection = None
        try:
            connection.close(finish=False)
        except (OSError, av.FFmpegError) as exc:
            log.debug("%s: closing a lost connection: %s", self.name, exc)

    def _lost(self, why: str) -> None:
        self.counts.failures += 1
        delay = self._backoff.next()
        self._retry_at = time.monotonic() + delay
        log.warning(
            "%s: %s; trying again in %.1f s (failure %d)", self.name, why, delay, self.counts.failures
        )


def _reason(exc: BaseException, target: Target) -> str:
    """The error without the URL's credentials (FFmpeg's errors quote the URL they were given)."""
    return str(exc).replace(target.url, target.shown)


def counts_line(counts: LiveCounts) -> str:
    """One line for the logs: what was sent, dropped and how often it reconnected."""
    c = counts
    return (
        f"{c.sent}/{c.frames} frames sent, {c.dropped} dropped ({c.dropped_full} queue full, "
        f"{c.dropped_down} disconnected), {c.reconnects} reconnect(s), {c.failures} failure(s)"
    )
