"""Preview frames for the web console: a source's annotated frame as a JPEG, made only while
someone watches it.

Where the frames are: the composite stage draws into the `output` region of the frame's slot in
the shared-memory pool, and the hub learns when every output is done with the frame, just before
its slot goes back to the source. So the supervisor's process, where the HTTP server also runs,
can see every finished frame without another process or message: at that moment the hub calls
`frame_done`. With nobody watching the source it costs one dict lookup. With a viewer, at most
`fps` times a second and only when the encoder is idle for that source, the frame is copied out of
the slot (a memcpy: the slot must go back at once) and a thread encodes it (the encoder is the
plan's, cv2 in practice, which lets go of the GIL while it works, so the hub loop keeps turning).

A viewer is a lease: each request for a frame (`wait_frame`) renews it for LEASE_S; when the page
closes the requests stop and so does the encoding. Counted: `framewire_preview_frames_total` and
`framewire_preview_encode_seconds_total`, per source.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
import numpy as np

from framewire.pipeline.ops.metrics import Metrics
from framewire.pipeline.wire.framepool import FramePool

log = logging.getLogger(__name__)

LEASE_S = 3.0
"""A source is watched for this long after a viewer last asked for one of its frames."""
WAIT_S = 2.0
"""The longest a request for the next frame waits (a paused or ended source answers 204 then)."""

Encoder = Callable[[np.ndarray], bytes]
"""An image (BGR uint8, H x W x 3) to JPEG bytes."""


@dataclass
class _Watched:
    """One watched source: until when, its copy buffer, and the latest JPEG."""

    until: float
    due: float = 0.0
    busy: bool = False
    buffer: np.ndarray | None = None
    number: int = 0
    jpeg: bytes = b""
    stale_upto: int = 0
    """Frames up to this number were made before the lease last lapsed: too old to show."""
    ready: threading.Condition = field(default_factory=threading.Condition)
    waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = field(default_factory=list)
    """Requests waiting on an event loop (`next_frame`), woken with the next frame."""


class Previews:
    """The console's preview frames. `frame_done` is the hub's (its loop); `wait_frame` the HTTP
    threads'; the encoding runs on a thread of its own, started with the first viewer."""

    def __init__(self, encode: Encoder, fps: float, metrics: Metrics | None = None, lease_s: float = LEASE_S) -> None:
        self.encode = encode
        self.interval = 1.0 / fps if fps > 0 else 0.0
        self.lease_s = lease_s
        self.metrics = metrics
        if metrics is not None:
            metrics.declare("framewire_preview_frames_total", "counter",
                            "Console preview frames encoded as JPEG (only while someone watches the source).")  # fmt: skip
            metrics.declare("framewire_preview_encode_seconds_total", "counter",
                            "Seconds spent encoding console preview frames, per source.")  # fmt: skip
        self._watched: dict[str, _Watched] = {}
        self._work: queue.Queue[tuple[str, _Watched] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.encoded = 0
        """Frames encoded so far, every source together."""

    # --- the hub's side ------------------------------------------------------------------------

    def frame_done(self, source: str, pool: FramePool, slot: int, written: Collection[str]) -> None:
        """Every output is done with this frame; its slot goes back right after this returns."""
        watched = self._watched.get(source)
        if watched is None:
            return
        now = time.monotonic()
        if now > watched.until or now < watched.due or watched.busy or slot < 0:
            return
        try:
            self._hand_over(source, watched, pool, slot, written, now)
        except Exception as exc:  # the hub loop must go on whatever a preview does
            log.warning("console: preview of source %s: %s", source, exc)

    def _hand_over(
        self, source: str, watched: _Watched, pool: FramePool, slot: int, written: Collection[str], now: float
    ) -> None:
        """Copy the frame out of its slot and queue it for the encoder."""
        region = "output" if "output" in written and pool.has("output") else "image"
        view = pool.view(slot, region)
        if watched.buffer is None or watched.buffer.shape != view.shape or watched.buffer.dtype != view.dtype:
            watched.buffer = np.empty_like(view)
        np.copyto(watched.buffer, view)
        watched.busy = True
        watched.due = now + self.interval
        self._work.put((source, watched))

    # --- the viewers' side ---------------------------------------------------------------------

    def watch(self, source: str) -> _Watched:
        """Renew the lease on `source` (start watching it)."""
        now = time.monotonic()
        with self._lock:
            watched = self._watched.get(source)
            if watched is None:
                watched = self._watched[source] = _Watched(now)
            if watched.until <= now:
                log.info("console: preview of source %s watched", source)
                watched.stale_upto = watched.number
            watched.until = now + self.lease_s
            if self._thread is None:
                self._thread = threading.Thread(target=self._encode_loop, name="framewire-preview", daemon=True)
                self._thread.start()
        return watched

    def wait_frame(self, source: str, after: int, timeout: float = WAIT_S) -> tuple[int, bytes] | None:
        """The source's latest JPEG once it is newer than number `after` (its number and bytes), or
        None after `timeout`. Asking is watching: the lease is renewed."""
        watched = self.watch(source)
        deadline = time.monotonic() + timeout
        with watched.ready:
            while watched.number <= max(after, watched.stale_upto):
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                watched.ready.wait(min(left, self.lease_s / 2))
                watched.until = max(watched.until, time.monotonic() + self.lease_s)
            return watched.number, watched.jpeg

    async def next_frame(self, source: str, after: int, timeout: float = WAIT_S) -> tuple[int, bytes] | None:
        """`wait_frame` for an event loop: the same answer, waited for without holding a thread (so
        a hundred viewers' long polls take no thread of the server's pool)."""
        watched = self.watch(source)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            with watched.ready:
                if watched.number > max(after, watched.stale_upto):
                    return watched.number, watched.jpeg
                woken: asyncio.Future[None] = loop.create_future()
                watched.waiting.append((loop, woken))
            left = deadline - loop.time()
            try:
                if left > 0:
                    await asyncio.wait_for(woken, min(left, self.lease_s / 2))
            except asyncio.TimeoutError:
                pass
            finally:
                with watched.ready:
                    if (loop, woken) in watched.waiting:
                        watched.waiting.remove((loop, woken))
            if left <= 0:
                return None
            watched.until = max(watched.until, time.monotonic() + self.lease_s)

    def watching(self) -> list[str]:
        """The sources watched now."""
        now = time.monotonic()
        return sorted(s for s, w in list(self._watched.items()) if w.until >= now)

    def forget(self, source: str) -> None:
        with self._lock:
            self._watched.pop(source, None)

    def close(self) -> None:
        if self._thread is not None:
            self._work.put(None)
            self._thread.join(timeout=5)

    # --- the encoder ---------------------------------------------------------------------------

    def _encode_loop(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            source, watched = item
            try:
                self._encode(source, watched)
            except Exception as exc:  # a frame it cannot encode must not end the previews
                log.warning("console: preview of source %s: %s", source, exc)
            finally:
                watched.busy = False

    def _encode(self, source: str, watched: _Watched) -> None:
        assert watched.buffer is not None
        started = time.perf_counter()
        jpeg = self.encode(watched.buffer)  # BGR or I420: the plan's encoder reads either
        spent = time.perf_counter() - started
        with watched.ready:
            watched.number += 1
            watched.jpeg = jpeg
            watched.ready.notify_all()
            for loop, woken in watched.waiting:
                loop.call_soon_threadsafe(_wake, woken)
            watched.waiting.clear()
        self.encoded += 1
        if self.metrics is not None:
            self.metrics.inc("framewire_preview_frames_total", source=source)
            self.metrics.inc("framewire_preview_encode_seconds_total", spent, source=source)


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():  # a request that timed out or went away meanwhile
        woken.set_result(None)
