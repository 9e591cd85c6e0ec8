"""Small video clips made on the spot with PyAV, and probes to check what a file holds.

Plain functions, no fixtures: a test makes the clip it needs in its `tmp_path`. Nothing is downloaded.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction
from pathlib import Path

import av
import av.audio.stream
import av.container
import av.video.stream
import numpy as np

_CONTAINERS = {".mp4": "mp4", ".mov": "mov", ".mkv": "matroska", ".avi": "avi", ".h264": "h264"}
_ENCODERS = {"h264": "libx264", "mpeg4": "mpeg4", "mjpeg": "mjpeg"}
_SAMPLE_RATE = 48000


def make_clip(
    path: str | os.PathLike[str],
    *,
    codec: str = "h264",
    width: int = 160,
    height: int = 120,
    frames: int = 30,
    fps: int | Fraction = 25,
    audio: bool = False,
    audio_codec: str | None = None,
    pattern: str = "moving",
    faststart: bool = False,
    from_clip: str | os.PathLike[str] | None = None,
) -> Path:
    """Write a clip of `frames` frames (container from the suffix) and return its path.

    Suffixes: .mp4, .mov, .mkv, .avi, and .h264 (a raw H.264 stream: its frames have no pts).

    `codec` is "h264", "mpeg4" or "mjpeg"; h264 at an odd size is encoded as yuv444p, which libx264
    accepts. `pattern="moving"` draws a bright square moving over a gradient, so every frame differs;
    "flat" is a plain grey. `audio` adds a 440 Hz tone as long as the video: AAC in mp4/mkv/mov and
    pcm_s16le in avi unless `audio_codec` says otherwise. `faststart` puts an MP4's index first, so a
    truncated copy still opens. `from_clip` takes the pictures from that clip instead (resized to
    `width` x `height`, at most `frames` of them), so a real face can travel in any container.
    """
    pictures = _pictures(from_clip, width, height, frames) if from_clip is not None else None
    if pictures is not None:
        frames = len(pictures)
    path = Path(path)
    fmt = _CONTAINERS[path.suffix.lower()]
    rate = Fraction(fps)
    path.parent.mkdir(parents=True, exist_ok=True)
    options = {"movflags": "faststart"} if faststart and fmt in ("mp4", "mov") else {}
    with av.open(str(path), mode="w", format=fmt, options=options) as container:
        video = container.add_stream(_ENCODERS[codec], rate=rate)
        assert isinstance(video, av.video.stream.VideoStream)
        video.width = width
        video.height = height
        video.pix_fmt = _pix_fmt(codec, width, height)
        if codec == "h264":
            video.options = {"preset": "ultrafast", "crf": "28", "bf": "2"}
        elif codec == "mpeg4":
            # B-frames make the AVI case realistic: its frames come out with missing pts.
            video.options = {"bf": "2"}
            video.bit_rate = 2_000_000
        sound: av.audio.stream.AudioStream | None = None
        if audio:
            name = audio_codec or ("pcm_s16le" if fmt == "avi" else "aac")
            added = container.add_stream(name, rate=_SAMPLE_RATE, layout="mono")
            assert isinstance(added, av.audio.stream.AudioStream)
            sound = added
        samples_written = 0
        for index in range(frames):
            image = pictures[index] if pictures is not None else draw_frame(index, width, height, pattern)
            frame = av.VideoFrame.from_ndarray(image, format="bgr24")
            frame.pts = index
            frame.time_base = 1 / rate
            container.mux(video.encode(frame))
            if sound is not None:
                until = round((index + 1) / rate * _SAMPLE_RATE)
                samples_written = _write_tone(container, sound, samples_written, until)
        container.mux(video.encode(None))
        if sound is not None:
            container.mux(sound.encode(None))
    return path


def make_audio_only(path: str | os.PathLike[str], *, seconds: float = 1.0) -> Path:
    """Write an AAC-only file (an .m4a or .mp4 with no video stream)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w", format="mp4") as container:
        sound = container.add_stream("aac", rate=_SAMPLE_RATE, layout="mono")
        _write_tone(container, sound, 0, round(seconds * _SAMPLE_RATE))
        container.mux(sound.encode(None))
    return path


def count_frames(path: str | os.PathLike[str]) -> int:
    """Decode every video frame of `path` and count them."""
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def video_pts(path: str | os.PathLike[str]) -> list[int | None]:
    """The pts of every decoded video frame, in the stream's time_base, in output order."""
    with av.open(str(path)) as container:
        return [frame.pts for frame in container.decode(video=0)]


def video_times(path: str | os.PathLike[str]) -> list[float]:
    """The time of every decoded video frame, in seconds, in output order."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.time_base is not None
        return [float(frame.pts * stream.time_base) for frame in container.decode(stream) if frame.pts is not None]


def has_audio(path: str | os.PathLike[str]) -> bool:
    """Whether `path` holds an audio stream."""
    with av.open(str(path)) as container:
        return len(container.streams.audio) > 0


def audio_codec(path: str | os.PathLike[str]) -> str | None:
    """The codec name of the first audio stream, or None."""
    with av.open(str(path)) as container:
        streams = container.streams.audio
        return streams[0].codec_context.name if streams else None


def audio_duration_s(path: str | os.PathLike[str]) -> float:
    """Seconds of audio in `path`, counted from the decoded samples (0.0 without audio)."""
    with av.open(str(path)) as container:
        if not container.streams.audio:
            return 0.0
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        return samples / stream.codec_context.sample_rate


def make_truncated_copy(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], fraction: float = 0.5
) -> Path:
    """Copy the first `fraction` of the bytes of `src` to `dst`, like a download cut short."""
    data = Path(src).read_bytes()
    Path(dst).write_bytes(data[: int(len(data) * fraction)])
    return Path(dst)


def make_corrupt_copy(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], *, seed: int = 1234
) -> Path:
    """Copy `src` to `dst` with a chunk in the middle (a quarter of the file) overwritten by noise."""
    data = bytearray(Path(src).read_bytes())
    size = max(1, len(data) // 4)
    start = (len(data) - size) // 2
    noise = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
    data[start : start + size] = noise.tobytes()
    Path(dst).write_bytes(bytes(data))
    return Path(dst)


def _pix_fmt(codec: str, width: int, height: int) -> str:
    if codec == "mjpeg":
        return "yuvj420p"
    if codec == "h264" and (width % 2 or height % 2):
        return "yuv444p"
    return "yuv420p"


def draw_frame(index: int, width: int, height: int, pattern: str = "moving") -> np.ndarray:
    """Frame `index` of a clip as BGR: a gradient (blue grows rightwards, green downwards) with a
    white square that moves a few pixels per frame."""
    if pattern == "flat":
        return np.full((height, width, 3), 128, dtype=np.uint8)
    xs = np.linspace(0, 200, width, dtype=np.float32)
    ys = np.linspace(0, 120, height, dtype=np.float32)
    image = np.empty((height, width, 3), dtype=np.uint8)
    image[..., 0] = xs[None, :].astype(np.uint8)
    image[..., 1] = ys[:, None].astype(np.uint8)
    image[..., 2] = 60
    side = max(4, min(width, height) // 5)
    x = (index * 3) % max(1, width - side)
    y = (index * 2) % max(1, height - side)
    image[y : y + side, x : x + side] = 255
    return image


def _write_tone(
    container: av.container.OutputContainer,
    stream: av.audio.stream.AudioStream,
    start: int,
    until: int,
) -> int:
    """Encode a 440 Hz tone for samples [start, until) and return `until`."""
    if until <= start:
        return start
    t = np.arange(start, until, dtype=np.float64) / _SAMPLE_RATE
    tone = 0.3 * np.sin(2 * math.pi * 440.0 * t)
    fmt = stream.codec_context.format.name
    if fmt.startswith("s16"):
        pcm = (tone * 32767).astype(np.int16)[None, :]
        frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
    else:
        floats = tone.astype(np.float32)[None, :]
        frame = av.AudioFrame.from_ndarray(floats, format="fltp", layout="mono")
    frame.sample_rate = _SAMPLE_RATE
    frame.pts = start
    frame.time_base = Fraction(1, _SAMPLE_RATE)
    container.mux(stream.encode(frame))
    return until


def _pictures(path: str | os.PathLike[str], width: int, height: int, limit: int) -> list[np.ndarray]:
    import cv2

    out = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            image = frame.to_ndarray(format="bgr24")
            if image.shape[:2] != (height, width):
                image = cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)
            out.append(np.ascontiguousarray(image))
            if len(out) >= limit:
                break
    return out



def splice_gops(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], pieces: list[tuple[float, float]]
) -> Path:
    """`src`'s own video packets, copied (no re-encoding), as the pieces given one after the other:
    each `(from_s, to_s)` is every packet from the key frame at `from_s` (in decode order) up to the
    next key frame at or after `to_s` (or the end), moved in time to follow the piece before."""
    with av.open(str(src)) as container:
        stream = container.streams.video[0]
        assert stream.time_base is not None
        tb = stream.time_base
        packets = [p for p in container.demux(stream) if p.size]
        step = round(1 / (float(stream.average_rate or 25) * tb))
        with av.open(str(dst), mode="w", format=_CONTAINERS[Path(dst).suffix]) as out:
            copy = out.add_stream_from_template(stream)
            offset = 0
            for from_s, to_s in pieces:
                keys = [i for i, p in enumerate(packets) if p.is_keyframe]
                first = next(i for i in keys if abs(float(packets[i].pts * tb) - from_s) < 1e-3)
                last = next((i for i in keys if float(packets[i].pts * tb) >= to_s - 1e-3), len(packets))
                piece = packets[first:last]
                base = min(p.pts for p in piece)
                for packet in piece:
                    moved = av.Packet(bytes(packet))
                    moved.pts = packet.pts - base + offset
                    moved.dts = packet.dts - base + offset
                    moved.is_keyframe = packet.is_keyframe
                    moved.time_base = tb
                    moved.stream = copy
                    out.mux(moved)
                offset += max(p.pts for p in piece) - base + step
    return Path(dst)
