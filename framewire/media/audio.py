"""Audio with PyAV: decode a file's or a stream's audio, resample it to mono float32 at one rate, turn
windows of it into log-mel spectrograms, and encode samples into an output file.

No processes and no sockets here: sources.audio runs these in the decode worker and writes the
chunks into the source's audio ring (pipeline.audioring); stages read windows from the ring.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

import av
import av.audio.stream
import av.container
import numpy as np
from av.audio.resampler import AudioResampler

from framewire.media.video_reader import error_reason
from framewire.pipeline.wire.audioring import AudioRing
from framewire.pipeline.errors import SourceError
from framewire.pipeline.uris import local_path, redact

log = logging.getLogger(__name__)


class AudioChunk(NamedTuple):
    """Mono float32 samples at the resampler's rate, and the time of the first one in seconds."""

    samples: np.ndarray
    time_s: float


@dataclass(frozen=True)
class AudioInfo:
    """What an audio stream holds before resampling."""

    sample_rate: int
    channels: int
    codec: str
    duration_s: float | None


class ToMono:
    """Resamples audio frames (or raw PCM) to mono float32 at `rate`, keeping their timestamps.

    libswresample (through PyAV's filter graph) gives each output frame the time of the input it
    came from, so a chunk's time is where its samples sit on the input's clock; its filter holds
    back about a millisecond of samples, which `flush()` returns at the end.
    """

    def __init__(self, rate: int) -> None:
        self.rate = rate
        # Planar at the input's own layout, then the channels averaged here: libswresample's own
        # downmix adds channels at -3 dB, which makes a stereo file with two equal channels 41% louder.
        self._resampler = AudioResampler(format="fltp", rate=rate)
        self._input: tuple[str, int] | None = None
        self._next_s: float | None = None

    def push(self, frame: av.AudioFrame | None, offset_s: float = 0.0) -> list[AudioChunk]:
        """Resample one decoded frame (None: flush); its time is `pts * time_base + offset_s`."""
        out: list[AudioChunk] = []
        if frame is not None:
            shape = (frame.layout.name, frame.sample_rate)
            if self._input is not None and shape != self._input:  # a stream that changed its layout
                out += self.flush(offset_s)
                self._resampler = AudioResampler(format="fltp", rate=self.rate)
            self._input = shape
        for resampled in self._resampler.resample(frame):
            planes = resampled.to_ndarray()
            samples = (planes[0] if planes.shape[0] == 1 else planes.mean(axis=0)).astype(np.float32, copy=False)
            if resampled.pts is not None and resampled.time_base is not None:
                time_s = float(resampled.pts * resampled.time_base) + offset_s
            else:  # no timestamps upstream: the samples follow the previous ones
                time_s = self._next_s if self._next_s is not None else offset_s
            self._next_s = time_s + samples.size / self.rate
            out.append(AudioChunk(samples, time_s))
        return out

    def push_pcm(self, pcm: np.ndarray, rate: int, time_s: float) -> list[AudioChunk]:
        """Interleaved PCM (`samples x channels`, int16 or float32) that starts at `time_s`."""
        channels = pcm.shape[1]
        layout = "mono" if channels == 1 else "stereo" if channels == 2 else f"{channels}c"
        if pcm.dtype == np.int16:
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm.reshape(1, -1)), format="s16", layout=layout)
        else:
            data = np.ascontiguousarray(pcm.astype(np.float32, copy=False).reshape(1, -1))
            frame = av.AudioFrame.from_ndarray(data, format="flt", layout=layout)
        frame.sample_rate = rate
        # Microsecond timestamps: exact enough (a sample at 48 kHz is 21 us) and integers for the filter.
        frame.time_base = Fraction(1, 1_000_000)
        frame.pts = round(time_s * 1_000_000)
        return self.push(frame)

    def flush(self, offset_s: float = 0.0) -> list[AudioChunk]:
        return self.push(None, offset_s)


class AudioDecoder:
    """The first audio stream of a file (WAV, MP3, AAC, M4A, a video's own track) or of a stream,
    as mono float32 chunks at `rate`, on the file's own clock (the clock of its video frames)."""

    def __init__(
        self,
        source_id: str,
        uri: str,
        rate: int,
        *,
        options: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        key: str = "audio.uri",
    ) -> None:
        """Cheap: nothing is opened. `key` names the config key in errors (sources.N.audio.uri)."""
        self.source_id = source_id
        self.uri = uri
        self.rate = rate
        self.options = dict(options or {})
        self.timeout_s = timeout_s
        self.key = key
        self._container: av.container.InputContainer | None = None
        self._stream: av.audio.stream.AudioStream | None = None

    def open(self) -> AudioInfo:
        """Open and describe the audio; SourceError naming the source and the file when there is none."""
        shown = redact(self.uri)
        path = local_path(self.uri)
        if path is not None and not os.path.isfile(path):
            raise SourceError(f"source {self.source_id}: {self.key}: audio file not found: {shown}")
        try:
            if path is not None:
                container = av.open(path, mode="r")
            else:
                container = av.open(self.uri, mode="r", options=self.options, timeout=self.timeout_s)
        except (av.FFmpegError, OSError) as err:
            raise SourceError(
                f"source {self.source_id}: {self.key}: cannot open {shown}: {error_reason(err, self.timeout_s)}"
            ) from None
        if not container.streams.audio:
            container.close()
            raise SourceError(f"source {self.source_id}: {self.key}: no audio track in {shown}")
        stream = container.streams.audio[0]
        self._container, self._stream = container, stream
        ctx = stream.codec_context
        duration = float(stream.duration * stream.time_base) if stream.duration and stream.time_base else None
        if duration is None and container.duration:
            duration = container.duration / av.time_base
        info = AudioInfo(int(ctx.sample_rate), int(ctx.layout.nb_channels), ctx.codec.canonical_name, duration)
        log.info(
            "source %s: audio %s: %s, %d Hz, %d channel(s), resampled to %d Hz mono",
            self.source_id, shown, info.codec, info.sample_rate, info.channels, self.rate,
        )
        return info

    def chunks(self) -> Iterator[AudioChunk]:
        """Every chunk in order, then the resampler's tail; SourceError on corrupt data."""
        container, stream = self._container, self._stream
        if container is None or stream is None:
            raise SourceError(f"source {self.source_id}: {self.key}: chunks() before open()")
        mono = ToMono(self.rate)
        try:
            for frame in container.decode(stream):
                yield from mono.push(frame)
        except av.FFmpegError as err:
            raise SourceError(
                f"source {self.source_id}: {self.key}: decode error in {redact(self.uri)}: "
                f"{error_reason(err, self.timeout_s)}"
            ) from None
        yield from mono.flush()

    def close(self) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None
            self._stream = None


# --- features -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MelSettings:
    """A log-mel spectrogram's parameters (`steps: - kind: audio_features ... logmel:` in the config)."""

    rate: int = 16000
    n_fft: int = 512
    win_length: int = 400
    hop_length: int = 160
    n_mels: int = 80
    fmin: float = 0.0
    fmax: float | None = None
    preemphasis: float = 0.0
    scale: str = "ln"
    """ln: natural log; log10; db: 20 * log10 of the magnitude (10 * log10 of the power)."""
    power: float = 2.0
    """2: power spectrum; 1: magnitude."""
    floor: float = 1e-10
    center: bool = True
    """Pad the window by n_fft / 2 on each side (reflecting), as librosa and torchaudio do."""


class LogMel:
    """Log-mel spectrogram of a window of samples: [n_mels, frames] float32, numpy only.

    Triangular filters on the HTK mel scale, Slaney-normalised (each filter's area is 1), a periodic
    Hann window: the defaults of torchaudio's MelSpectrogram with `norm="slaney"`.
    """

    def __init__(self, settings: MelSettings) -> None:
        self.settings = s = settings
        self.window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(s.win_length) / s.win_length)).astype(np.float32)
        pad = (s.n_fft - s.win_length) // 2
        self.window = np.pad(self.window, (pad, s.n_fft - s.win_length - pad))
        self.filters = mel_filters(s.rate, s.n_fft, s.n_mels, s.fmin, s.fmax if s.fmax is not None else s.rate / 2)

    def frames_for(self, samples: int) -> int:
        """How many spectrogram frames a window of `samples` gives."""
        s = self.settings
        length = samples + (s.n_fft if s.center else 0)
        return 1 + max(0, length - s.n_fft) // s.hop_length

    def __call__(self, samples: np.ndarray) -> np.ndarray:
        s = self.settings
        x = np.asarray(samples, dtype=np.float32)
        if s.preemphasis:
            x = np.append(x[:1], x[1:] - np.float32(s.preemphasis) * x[:-1])
        if s.center:
            x = np.pad(x, s.n_fft // 2, mode="reflect" if x.size > s.n_fft // 2 else "constant")
        count = 1 + max(0, x.size - s.n_fft) // s.hop_length
        strides = (x.strides[0] * s.hop_length, x.strides[0])
        frames = np.lib.stride_tricks.as_strided(x, (count, s.n_fft), strides, writeable=False)
        spectrum = np.abs(np.fft.rfft(frames * self.window, axis=1)).astype(np.float32)
        if s.power != 1.0:
            spectrum = spectrum**s.power
        mel = self.filters @ spectrum.T
        mel = np.maximum(mel, np.float32(s.floor))
        if s.scale == "ln":
            return np.log(mel).astype(np.float32)
        if s.scale == "log10":
            return np.log10(mel).astype(np.float32)
        return ((20.0 if s.power == 1.0 else 10.0) * np.log10(mel)).astype(np.float32)


def mel_filters(rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] triangular filters on the HTK mel scale, Slaney-normalised."""

    def to_mel(hz: np.ndarray) -> np.ndarray:
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    def to_hz(mel: np.ndarray) -> np.ndarray:
        return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)

    bins = np.linspace(0.0, rate / 2, n_fft // 2 + 1)
    edges = to_hz(np.linspace(to_mel(np.array(fmin)), to_mel(np.array(fmax)), n_mels + 2))
    rising = (bins[None, :] - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    falling = (edges[2:, None] - bins[None, :]) / (edges[2:] - edges[1:-1])[:, None]
    filters = np.maximum(0.0, np.minimum(rising, falling))
    filters *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return filters.astype(np.float32)


def energy(samples: np.ndarray) -> float:
    """Mean square of the samples (0 for none)."""
    return float(np.mean(np.square(samples, dtype=np.float64))) if samples.size else 0.0


# --- output ---------------------------------------------------------------------------------------


class RingTrack:
    """An output file's audio taken from a source's audio ring (a live source's audio, which has no
    file to copy from): the ring's samples encoded as AAC at the ring's rate, mono, each sample at
    its own time on the video clock, so the file keeps the sync the ring has.

    `copy_until(t)` encodes what the ring holds up to `t` (the writer calls it before each frame);
    samples that are missing (gaps, late audio, overwritten) are written as silence, so the track
    stays continuous and never shifts.
    """

    def __init__(
        self, ring: AudioRing, output: av.container.OutputContainer, frame_duration_s: float, start_s: float
    ) -> None:
        self.ring = ring
        self.output = output
        self.frame_duration_s = frame_duration_s
        stream = output.add_stream("aac", rate=ring.rate, layout="mono")
        assert isinstance(stream, av.audio.stream.AudioStream)
        self.stream = stream
        self.mode = f"aac from the audio ring ({ring.rate} Hz mono)"
        self._next: int | None = None
        self._start_s = start_s
        self._last_s = start_s

    def copy_until(self, time_s: float) -> None:
        self._last_s = max(self._last_s, time_s)
        if self.ring.origin_s is None:
            return
        if self._next is None:  # the track starts with the first frame, not with older audio
            self._next = max(0, self.ring.index_of(self._start_s))
        until = min(self.ring.index_of(time_s), self.ring.head)
        self._encode(until)

    def finish(self, until_s: float | None = None) -> None:
        """Encode up to the end of the last frame (or `until_s`, where the next segment of a
        recording starts: the rest is its audio), what the ring has, then flush the encoder."""
        if self.ring.origin_s is not None:
            if self._next is None:
                self._next = max(0, self.ring.index_of(self._start_s))
            end = self._last_s + self.frame_duration_s if until_s is None else until_s
            self._encode(min(self.ring.index_of(end), self.ring.head))
        self.output.mux(self.stream.encode(None))

    def close(self) -> None:
        return None

    def _encode(self, until: int) -> None:
        assert self._next is not None
        origin = self.ring.origin_s
        assert origin is not None
        while self._next < until:
            count = min(until - self._next, self.ring.rate)  # at most a second per frame
            window = self.ring.read(self._next, count)
            frame = av.AudioFrame.from_ndarray(window.samples.reshape(1, -1), format="flt", layout="mono")
            frame.sample_rate = self.ring.rate
            frame.time_base = Fraction(1, self.ring.rate)
            frame.pts = round(origin * self.ring.rate) + self._next
            self.output.mux(self.stream.encode(frame))
            self._next += count


def has_audio_track(path: str) -> bool:
    """Whether a local file holds an audio stream; ValueError (its reason) when it cannot be read."""
    try:
        with av.open(path) as container:
            return bool(container.streams.audio)
    except (av.FFmpegError, OSError) as err:
        raise ValueError(getattr(err, "strerror", None) or str(err)) from None
