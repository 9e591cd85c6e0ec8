"""Audio for the tests: tone bursts at known times, files of them, the light test generator, and how
to read back which output frames the generator brightened.

Plain functions, no fixtures; nothing is downloaded. The tone is the one the test generator and its
audio encoder are scaled for (bench.lipsync_models): 1 kHz at amplitude 0.5.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import av.audio.stream
import numpy as np

from bench.lipsync_models import TONE_AMPLITUDE, TONE_HZ

RATE = 16000
Bursts = Sequence[tuple[float, float]]


def bursts_over(seconds: float, *, every: float = 3.0, length: float = 0.6, first: float = 1.0) -> list[tuple[float, float]]:
    """Bursts of `length` seconds every `every` seconds from `first` to the end (the last one ends
    at least a second before it), at times that fall between frames of 25 and 29.97 fps alike."""
    out, at = [], first
    while at + length + 1.0 <= seconds:
        out.append((round(at + 0.013, 3), round(at + 0.013 + length, 3)))
        at += every
    return out


def tone_bursts(seconds: float, bursts: Bursts, *, rate: int = RATE, amplitude: float = TONE_AMPLITUDE) -> np.ndarray:
    """Float32 mono: silence, with a 1 kHz tone during each (start, end) of `bursts`."""
    t = np.arange(int(round(seconds * rate))) / rate
    on = np.zeros(t.size, bool)
    for start, end in bursts:
        on |= (t >= start) & (t < end)
    return np.where(on, amplitude * np.sin(2 * math.pi * TONE_HZ * t), 0.0).astype(np.float32)


def write_audio(
    path: str | os.PathLike[str], samples: np.ndarray, *, rate: int = RATE, channels: int = 1, codec: str | None = None
) -> Path:
    """Write mono float samples to a file; the suffix picks the container (.wav: PCM, .m4a: AAC, .mp3,
    .flac); `channels` > 1 repeats the samples on each channel; `rate` is the file's rate."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    codec = codec or {".wav": "pcm_s16le", ".m4a": "aac", ".mp3": "libmp3lame", ".flac": "flac"}[path.suffix]
    layout = "mono" if channels == 1 else "stereo" if channels == 2 else f"{channels}c"
    fmt = {".m4a": "mp4"}.get(path.suffix)
    with av.open(str(path), "w", format=fmt) as container:
        stream = container.add_stream(codec, rate=rate, layout=layout)
        assert isinstance(stream, av.audio.stream.AudioStream)
        pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16)
        interleaved = np.repeat(pcm[:, None], channels, axis=1).reshape(1, -1)
        step = 4096
        for start in range(0, pcm.size, step):
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(interleaved[:, start * channels : (start + step) * channels]), format="s16", layout=layout
            )
            frame.sample_rate, frame.pts, frame.time_base = rate, start, Fraction(1, rate)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def burst_frames(bursts: Bursts, fps: Fraction | float, frames: int, start_s: float = 0.0) -> set[int]:
    """The frames whose time lies inside a burst: a window centred on them is at least half tone,
    which is what the test generator turns into at least half its full brightening."""
    out = set()
    for k in range(frames):
        t = start_s + k / fps
        if any(a <= t < b for a, b in bursts):
            out.add(k)
    return out


def brightening(output: str | os.PathLike[str], reference: Sequence[np.ndarray]) -> np.ndarray:
    """How much brighter each frame of `output` is than frame k of `reference` (the same frames
    before the generator), in grey levels averaged over the frame; one value per output frame."""
    lift = []
    with av.open(str(output)) as container:
        for k, frame in enumerate(container.decode(video=0)):
            image = frame.to_ndarray(format="bgr24").astype(np.float32)
            base = reference[k % len(reference)].astype(np.float32)
            lift.append(float((image[: base.shape[0], : base.shape[1]] - base).mean()))
    return np.array(lift)


def bright_frames(lift: np.ndarray) -> set[int]:
    """The frames lifted by more than half of what a full burst lifts: above the midpoint between the
    frames outside bursts (the median: most frames) and inside (the median of the top decile).
    Frames re-encoded on the way (an RTSP server) sit a level or two off the reference: the midpoint
    follows them."""
    full = float(np.median(np.sort(lift)[-max(1, lift.size // 10) :]))
    base = float(np.median(lift))
    return {int(k) for k in np.nonzero(lift > (base + full) / 2)[0]}


def edges(frames: set[int]) -> list[tuple[int, int]]:
    """Runs of consecutive frame indices as (first, last)."""
    runs: list[tuple[int, int]] = []
    for k in sorted(frames):
        if runs and k == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], k)
        else:
            runs.append((k, k))
    return runs


def pingpong(frames: Sequence[np.ndarray], count: int) -> list[np.ndarray]:
    """Frame k of a ping-ponged template, for k < count."""
    order = list(range(len(frames))) + list(range(len(frames) - 2, 0, -1))
    return [frames[order[k % len(order)]] for k in range(count)]


def mux_clip(path: str | os.PathLike[str], pictures: Sequence[np.ndarray], fps: int, samples: np.ndarray) -> Path:
    """An MP4 of `pictures` (H.264, `fps`) with `samples` (16 kHz mono) muxed on as AAC: a face clip
    with its own sound track, as a camera or a phone records it."""
    path = Path(path)
    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height = pictures[0].shape[1], pictures[0].shape[0]
        video.pix_fmt = "yuv420p"
        video.options = {"preset": "ultrafast", "crf": "18"}
        sound = container.add_stream("aac", rate=RATE, layout="mono")
        assert isinstance(sound, av.audio.stream.AudioStream)
        written = 0
        for k, picture in enumerate(pictures):
            frame = av.VideoFrame.from_ndarray(picture, format="bgr24")
            frame.pts, frame.time_base = k, Fraction(1, fps)
            container.mux(video.encode(frame))
            until = min(samples.size, round((k + 1) * RATE / fps))
            if until > written:
                chunk = av.AudioFrame.from_ndarray(samples[None, written:until].astype(np.float32), format="flt", layout="mono")
                chunk.sample_rate, chunk.pts, chunk.time_base = RATE, written, Fraction(1, RATE)
                container.mux(sound.encode(chunk))
                written = until
        container.mux(video.encode(None))
        container.mux(sound.encode(None))
    return path
