"""Audio pushed to framewire over ZeroMQ by another program: PCM chunks with timestamps.

A source's `audio.uri: zmq+tcp://host:port` (or `zmq+ipc:///path`) binds a ZeroMQ PULL socket there,
as the ZeroMQ frame input does; a producer connects a PUSH socket and sends one multipart message
per chunk (the README's "The ZeroMQ audio input"):

    [header: UTF-8 JSON object, payload: bytes]
    header  = {"rate": 16000, "channels": 1, "format": "s16le" | "f32le", "pts": int}
    payload = interleaved samples, little-endian, `channels` per sample instant

`pts` is the time of the chunk's first sample in microseconds, on the same clock as the `pts` of
the source's video frames (the producer's clock): that is what keeps the two in sync when they
arrive separately. It is required. The first valid chunk fixes the rate and the channel count; a
later chunk that differs is dropped (reason `mismatch`). A one-part `{"eos": true}` ends the audio.
Every message is checked before use; a bad one is dropped and counted by reason, never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from framewire.media.audio import AudioChunk, ToMono
from framewire.sources.zmq_wire import EOS, Rejected, ZmqReceiver, parse_header

log = logging.getLogger(__name__)

FORMATS: dict[str, np.dtype[Any]] = {"s16le": np.dtype("<i2"), "f32le": np.dtype("<f4")}
MAX_CHANNELS = 8
MAX_CHUNK_S = 10.0
"""A chunk longer than this is refused: the ring holds seconds, not minutes."""
RATES = (8000, 192000)
REASONS = ("parts", "header", "format", "pts", "size", "mismatch")
WAIT_MS = 100


@dataclass(frozen=True)
class PushedAudio:
    """One checked chunk: samples x channels, in the producer's format."""

    rate: int
    channels: int
    pts: int
    samples: np.ndarray


def parse_audio(parts: Sequence[bytes]) -> PushedAudio | Literal["eos"]:
    """Check one message; raises Rejected naming what is wrong."""
    header = parse_header(parts)
    if header == EOS:
        return EOS
    rate, channels, fmt, pts = header.get("rate"), header.get("channels", 1), header.get("format"), header.get("pts")
    if not isinstance(rate, int) or isinstance(rate, bool) or not RATES[0] <= rate <= RATES[1]:
        raise Rejected("format", f"rate must be an integer in {RATES[0]}..{RATES[1]} Hz, got {_short(rate)}")
    if not isinstance(channels, int) or isinstance(channels, bool) or not 1 <= channels <= MAX_CHANNELS:
        raise Rejected("format", f"channels must be an integer in 1..{MAX_CHANNELS}, got {_short(channels)}")
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise Rejected("format", f"format must be one of {', '.join(FORMATS)}, got {_short(fmt)}")
    if not isinstance(pts, int) or isinstance(pts, bool) or not 0 <= pts < 2**62:
        raise Rejected("pts", f"pts must be a non-negative integer (microseconds), got {_short(pts)}")
    dtype: np.dtype[Any] = FORMATS[fmt]
    data = parts[1]
    step = dtype.itemsize * channels
    if not data or len(data) % step or len(data) // step > MAX_CHUNK_S * rate:
        raise Rejected("size", f"{len(data)} bytes is not a whole number of {fmt} x {channels} samples up to {MAX_CHUNK_S:g} s")
    samples = np.frombuffer(data, dtype=dtype).reshape(-1, channels)
    if samples.dtype.kind == "f" and not np.isfinite(samples).all():
        raise Rejected("size", "samples that are not finite numbers")
    return PushedAudio(rate, channels, pts, samples)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class ZmqAudio:
    """An audio producer for sources.audio.AudioFeed: chunks from a PUSH peer, resampled to mono."""

    live = True

    def __init__(
        self,
        source_id: str,
        endpoint: str,
        rate: int,
        *,
        curve_secret_key: str | None = None,
        curve_clients: str | None = None,
    ) -> None:
        self.source_id = source_id
        self.rate = rate
        self.receiver = ZmqReceiver(
            f"{source_id} (audio)", endpoint, hwm=1000, curve_secret_key=curve_secret_key,
            curve_clients_dir=curve_clients, parser=parse_audio,
        )
        self._format: tuple[int, int] | None = None
        self.stopping = False

    def open(self) -> None:
        self.receiver.open()
        log.info("source %s: waiting for audio on %s", self.source_id, self.receiver.endpoint)

    def chunks(self) -> Iterator[AudioChunk]:
        """Chunks as they arrive, until the producer says eos (or `stopping` is set)."""
        mono = ToMono(self.rate)
        while not self.stopping:
            got = self.receiver.receive(WAIT_MS)
            if got is None:
                continue
            if got == EOS:
                log.info("source %s: the audio producer ended the stream", self.source_id)
                break
            assert isinstance(got, PushedAudio)
            if self._format is not None and (got.rate, got.channels) != self._format:
                self.receiver.reject(
                    "mismatch", f"a {got.rate} Hz x {got.channels} chunk in a {self._format[0]} Hz x {self._format[1]} stream"
                )
                continue
            self._format = (got.rate, got.channels)
            yield from mono.push_pcm(got.samples, got.rate, got.pts / 1_000_000)
        yield from mono.flush()

    def stats(self) -> dict[str, Any]:
        return {"rejected": {f"audio_{k}": v for k, v in self.receiver.rejected.items()}}

    def close(self) -> None:
        self.stopping = True
        self.receiver.close()
