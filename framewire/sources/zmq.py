"""Frames another program pushes over ZeroMQ, as a `framewire.pipeline.frame.LiveFrameSource`.

The socket and the message checks are `framewire.sources.zmq_wire`; here the checked bytes become a BGR
frame (a JPEG is decoded with OpenCV).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import cv2
import numpy as np

from framewire.config import SourceConfig
from framewire.media.video_reader import next_pts
from framewire.pipeline.errors import SourceError
from framewire.pipeline.frame import SourceInterrupted
from framewire.pipeline.uris import zmq_endpoint
from framewire.sources.live import WAIT_SLICE_S
from framewire.sources.zmq_wire import EOS, PushedFrame, ZmqReceiver

log = logging.getLogger(__name__)


class ZmqSource:
    """Frames another program pushes to a `zmq+tcp://` or `zmq+ipc://` endpoint, as BGR.

    The socket and the message checks are `framewire.sources.zmq_wire`; here the bytes become a frame
    (a JPEG is decoded with OpenCV). `open()` waits for the first valid frame, which fixes the
    stream's size; a later frame of another size is dropped and counted (reason "size"). The time
    base is microseconds; the frame rate in the stream info is a nominal 25.
    """

    FPS = Fraction(25)
    TIME_BASE = Fraction(1, 1_000_000)
    Config = SourceConfig  # kind zmq (the framewire.sources entry)

    @classmethod
    def from_config(cls, config: SourceConfig) -> ZmqSource:
        return cls(config.id, config.uri, curve_secret_key=config.curve_secret_key, curve_clients=config.curve_clients)

    def __init__(
        self, source_id: str, uri: str, *, curve_secret_key: str | None = None, curve_clients: str | None = None
    ) -> None:
        self.source_id = source_id
        self.uri = uri
        self.receiver = ZmqReceiver(
            source_id, zmq_endpoint(uri), curve_secret_key=curve_secret_key, curve_clients_dir=curve_clients
        )
        self._interrupted: Callable[[], bool] = lambda: False
        self._size: tuple[int, int] | None = None
        self._pending: tuple[np.ndarray, int] | None = None
        self._last_pts: int | None = None
        self._started = 0.0

    def set_interrupt(self, interrupted: Callable[[], bool]) -> None:
        self._interrupted = interrupted

    def open(self) -> dict[str, Any]:
        """Bind, then wait for the first valid frame; SourceInterrupted if told to stop first."""
        self.receiver.open()
        self._started = time.monotonic()
        log.info("source %s: waiting for frames on %s", self.source_id, self.receiver.endpoint)
        while self._pending is None:
            if self._interrupted():
                raise SourceInterrupted(self.source_id)
            got = self.receiver.receive(int(WAIT_SLICE_S * 1000))
            if got == EOS:
                raise SourceError(
                    f"source {self.source_id}: the producer ended the stream before its first frame"
                )
            if isinstance(got, PushedFrame):
                self._pending = self._decode(got)
        image = self._pending[0]
        return {
            "source_id": self.source_id,
            "uri": self.uri,
            "width": int(image.shape[1]),
            "height": int(image.shape[0]),
            "fps": f"{self.FPS.numerator}/{self.FPS.denominator}",
            "time_base": f"{self.TIME_BASE.numerator}/{self.TIME_BASE.denominator}",
            "frame_count": None,
            "duration_s": None,
            "has_audio": False,
            "audio_codec": None,
            "is_file": False,
            "live": True,
        }

    def frames(self) -> Iterator[tuple[np.ndarray, int, float]]:
        if self._pending is not None:
            image, pts = self._pending
            self._pending = None
            yield image, pts, float(pts * self.TIME_BASE)
        while True:
            got = self.receiver.receive(int(WAIT_SLICE_S * 1000))
            if got is None:
                if self._interrupted():
                    return
                continue
            if not isinstance(got, PushedFrame):  # EOS
                log.info("source %s: the producer ended the stream", self.source_id)
                return
            decoded = self._decode(got)
            if decoded is not None:
                image, pts = decoded
                yield image, pts, float(pts * self.TIME_BASE)

    def stats(self) -> dict[str, Any]:
        return {"rejected": dict(self.receiver.rejected)}

    def close(self) -> None:
        self.receiver.close()

    def _decode(self, got: PushedFrame) -> tuple[np.ndarray, int] | None:
        """The frame as BGR and its pts, or None (counted) when it cannot be used."""
        if self._size is not None and (got.width, got.height) != self._size:
            self.receiver.reject(
                "size", f"a {got.width}x{got.height} frame in a {self._size[0]}x{self._size[1]} stream"
            )
            return None
        image: np.ndarray
        if got.format == "bgr24":
            image = np.frombuffer(got.data, dtype=np.uint8).reshape(got.height, got.width, 3)
        else:
            decoded = cv2.imdecode(np.frombuffer(got.data, dtype=np.uint8), cv2.IMREAD_COLOR)
            if decoded is None or decoded.shape[:2] != (got.height, got.width):
                self.receiver.reject("payload", "the JPEG does not decode")
                return None
            image = decoded
        self._size = (got.width, got.height)
        raw = got.pts if got.pts is not None else int((time.monotonic() - self._started) * 1_000_000)
        pts = next_pts(raw, self._last_pts, round(1 / (self.FPS * self.TIME_BASE)))
        self._last_pts = pts
        return image, pts
