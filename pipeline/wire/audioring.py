"""A source's audio as a side channel: a shared-memory ring of mono float32 samples on the video's clock.

Audio is not a frame (DESIGN.md, "Per-source state and side channels"): the decode worker decodes
and resamples a source's audio into this ring, and a stage that needs the audio around a frame
(audio features, voice activity, an output that muxes live audio) reads the window it wants by time.
The hub creates the ring beside the source's frame pool and unlinks it when the source retires, so
a worker that starts late, or after a restart, still maps it by name.

Sample `n` of the ring is the sound at `origin_s + n / rate` seconds on the source's video clock
(the clock of `Frame.time_s`). The ring keeps the last `capacity` samples. One writer (the decode
worker), any number of readers, no locks: the writer stores the samples, then advances `head`; a
reader copies what it wants, then reads `head` again, and a sample overwritten meanwhile counts as
missing. A gap in the input (a chunk that starts later than the last one ended) is written as
silence marked invalid, so a reader can tell silence that was heard from silence that was filled in.

Model-free and numpy only: decoding and resampling are media.audio's job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from framewire.pipeline.wire.shm import ALIGN, OverSegment, Segment, align

_HEAD, _ENDED, _ORIGIN_SET, _ORIGIN = 0, 1, 2, 3
"""Slots of the header (8 bytes each): samples written so far, the end flag, whether the origin is
known, and the origin in seconds (a float64)."""
_HEADER_BYTES = ALIGN
JITTER_S = 0.002
"""A chunk that starts within this of where the last one ended continues it: producers' timestamps
and resampling round to a sample or two, which must not read as gaps or overlaps."""


@dataclass(frozen=True)
class AudioRingLayout:
    """Where a source's ring lives and its shape: sent to the decode worker and the stages."""

    name: str
    rate: int
    capacity: int

    @property
    def total_bytes(self) -> int:
        return _HEADER_BYTES + align(self.capacity * 4) + align(self.capacity)

    def to_wire(self) -> dict[str, Any]:
        return {"name": self.name, "rate": self.rate, "capacity": self.capacity}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> AudioRingLayout:
        return cls(str(data["name"]), int(data["rate"]), int(data["capacity"]))


@dataclass(frozen=True)
class Window:
    """Samples read for one window, and how complete they were."""

    samples: np.ndarray
    """float32, the length asked for; missing samples are zeros."""
    missing: int
    """Samples not heard: gaps in the input, past the end, overwritten, or not written yet."""
    pending: int
    """Of those, the samples not written yet (the window may still complete): the tail past `head`."""

    @property
    def complete(self) -> bool:
        return self.missing == 0


class AudioRing(OverSegment[AudioRingLayout]):
    """A mapped ring; `create` makes it (the hub), `attach` maps an existing one (decode worker,
    stages). A new ring's segment is zero-filled: head 0, no origin, not ended."""

    def __init__(self, layout: AudioRingLayout, segment: Segment) -> None:
        super().__init__(layout, segment)
        self.rate = layout.rate
        self.capacity = layout.capacity
        buffer = segment.buffer
        self._header = buffer[:_HEADER_BYTES].view(np.int64)
        self._origin = buffer[:_HEADER_BYTES].view(np.float64)
        start = _HEADER_BYTES
        self._data = buffer[start : start + layout.capacity * 4].view(np.float32)
        start += align(layout.capacity * 4)
        self._valid = buffer[start : start + layout.capacity]

    # --- state -----------------------------------------------------------------------------------

    @property
    def head(self) -> int:
        """Samples written so far (the index of the next one)."""
        return int(self._header[_HEAD])

    @property
    def ended(self) -> bool:
        """The audio ended: nothing will be written past `head`."""
        return bool(self._header[_ENDED])

    @property
    def origin_s(self) -> float | None:
        """The time of sample 0 on the video clock; None until the first chunk arrives."""
        return float(self._origin[_ORIGIN]) if self._header[_ORIGIN_SET] else None

    def index_of(self, time_s: float) -> int:
        """The sample at `time_s` (may lie before 0 or past `head`); the origin must be known."""
        origin = self.origin_s
        if origin is None:
            raise RuntimeError(f"audio ring {self.layout.name}: no audio yet")
        return int(np.floor((time_s - origin) * self.rate + 0.5))

    def written_until_s(self) -> float | None:
        """The time up to which audio has been written; None before the first chunk."""
        origin = self.origin_s
        return None if origin is None else origin + self.head / self.rate

    def end_s(self) -> float | None:
        """When the audio ends, once it has ended; None while it goes on."""
        return self.written_until_s() if self.ended else None

    # --- writing (the decode worker) ---------------------------------------------------------------

    def write(self, samples: np.ndarray, time_s: float) -> tuple[int, int]:
        """Append mono samples that start at `time_s`; returns (gap samples filled with silence,
        samples dropped because they overlapped what was already written)."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if not self._header[_ORIGIN_SET]:
            self._origin[_ORIGIN] = time_s
            self._header[_ORIGIN_SET] = 1
        head = self.head
        start = self.index_of(time_s)
        gap = dropped = 0
        if abs(start - head) <= JITTER_S * self.rate:
            start = head
        if start > head:
            gap = start - head
            self._store(
                head,
                np.zeros(min(gap, self.capacity), np.float32),
                valid=False,
                skip=max(0, gap - self.capacity),
            )
            head = start
        elif start < head:
            dropped = min(head - start, samples.size)
            samples = samples[dropped:]
        if samples.size:
            self._store(head, samples, valid=True)
        return gap, dropped

    def _store(self, at: int, samples: np.ndarray, *, valid: bool, skip: int = 0) -> None:
        """Write `samples` as ring samples `at + skip ...` and advance the head past them."""
        at += skip
        count = samples.size
        if count > self.capacity:  # only the last lap survives
            at += count - self.capacity
            samples = samples[-self.capacity :]
            count = self.capacity
        first = at % self.capacity
        split = min(count, self.capacity - first)
        self._data[first : first + split] = samples[:split]
        self._valid[first : first + split] = 1 if valid else 0
        if split < count:
            self._data[: count - split] = samples[split:]
            self._valid[: count - split] = 1 if valid else 0
        self._header[_HEAD] = at + count  # after the samples: a reader never sees a head ahead of them

    def end(self) -> None:
        """No more audio: windows past the head are final (missing, not pending)."""
        self._header[_ENDED] = 1

    # --- reading (stages, outputs) -----------------------------------------------------------------

    def read(self, start: int, count: int) -> Window:
        """Samples `start ... start + count` (indices may lie outside what the ring holds)."""
        out = np.zeros(count, np.float32)
        valid = np.zeros(count, bool)
        head = self.head
        ended = self.ended
        low, high = max(start, head - self.capacity, 0), min(start + count, head)
        if high > low:
            self._copy(low, high, out[low - start : high - start], valid[low - start : high - start])
            lost = self.head - self.capacity - low  # overwritten while copying
            if lost > 0:
                out[: min(count, low - start + lost)] = 0.0
                valid[: min(count, low - start + lost)] = False
        pending = 0 if ended else max(0, start + count - max(head, start))
        return Window(out, int(count - np.count_nonzero(valid)), pending)

    def window(self, start_s: float, count: int) -> Window:
        """`count` samples from `start_s`; all pending before the first chunk (unless ended)."""
        if self.origin_s is None:
            return Window(np.zeros(count, np.float32), count, 0 if self.ended else count)
        return self.read(self.index_of(start_s), count)

    def _copy(self, low: int, high: int, out: np.ndarray, valid: np.ndarray) -> None:
        first = low % self.capacity
        count = high - low
        split = min(count, self.capacity - first)
        out[:split] = self._data[first : first + split]
        valid[:split] = self._valid[first : first + split] != 0
        if split < count:
            out[split:] = self._data[: count - split]
            valid[split:] = self._valid[: count - split] != 0
        out[~valid] = 0.0

    def close(self) -> None:
        """Unmap; the owner also removes the file."""
        self._header, self._origin = np.zeros(8, np.int64), np.zeros(8, np.float64)
        self._data, self._valid = np.empty(0, np.float32), np.empty(0, np.uint8)
        self.segment.close()


class RingCache:
    """Rings a process has mapped, by name, so each is mapped once (stages read many frames of one source)."""

    def __init__(self) -> None:
        self._rings: dict[str, AudioRing] = {}

    def get(self, wire: Mapping[str, Any]) -> AudioRing:
        name = str(wire["name"])
        ring = self._rings.get(name)
        if ring is None:
            ring = AudioRing.attach(AudioRingLayout.from_wire(wire))
            self._rings[name] = ring
        return ring

    def drop(self, name: str) -> None:
        ring = self._rings.pop(name, None)
        if ring is not None:
            ring.close()

    def close(self) -> None:
        for name in list(self._rings):
            self.drop(name)


def ring_of(pool_wire: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The audio ring a frame's pool names (`pool["audio"]`, set by the hub); None: no audio."""
    if not pool_wire:
        return None
    audio = pool_wire.get("audio")
    return audio if isinstance(audio, Mapping) else None
