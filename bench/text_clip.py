"""A clip of words moving over a textured background, with its ground truth: for OCR and tracking.

Every word moves in a straight line at its own speed; two of them cross, so a tracker has to keep
them apart. `text_frames` gives the frames and, per frame, each word's box (corners, as
cv2.getTextSize measures the rendered text), so tests can count a tracker's identity switches
against the truth. `assets/videos/signs.mp4` (configs/ocr.yaml, configs/tracking.yaml) was written by
`write_text_clip` with the defaults: `python -m bench.text_clip assets/videos/signs.mp4`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import av.video.stream
import cv2
import numpy as np

WORDS = ("EXIT 12", "Platform 9", "Bus 42", "framewire", "Speed 50", "NO PARKING")


@dataclass(frozen=True)
class Word:
    text: str
    start: tuple[float, float]
    """Bottom-left of the text at frame 0 (cv2.putText's origin)."""
    velocity: tuple[float, float]
    """Pixels per frame."""
    scale: float
    color: tuple[int, int, int]


def layout(width: int = 640, height: int = 360) -> list[Word]:
    """The words and their paths, fixed: "Platform 9" and "Bus 42" pass each other in opposite
    directions on neighbouring lines (their boxes almost touch) in the middle of the clip."""
    return [
        Word(WORDS[0], (20.0, 60.0), (2.0, 0.3), 1.3, (20, 20, 140)),
        Word(WORDS[1], (430.0, 140.0), (-3.0, 0.0), 1.1, (30, 30, 30)),
        Word(WORDS[2], (40.0, 172.0), (3.5, 0.0), 1.1, (10, 60, 150)),
        Word(WORDS[3], (60.0, 250.0), (1.2, 0.6), 1.2, (120, 40, 20)),
        Word(WORDS[4], (420.0, 320.0), (0.6, -1.0), 1.2, (10, 90, 10)),
        Word(WORDS[5], (40.0, 345.0), (1.0, 0.0), 1.0, (60, 10, 90)),
    ]


def _background(width: int, height: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:height, 0:width]
    base = np.stack([170 + 40 * xs / width, 185 + 30 * ys / height, 200 - 30 * xs / width], axis=2)
    return np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)


def text_frames(
    count: int = 100, width: int = 640, height: int = 360, seed: int = 0
) -> tuple[list[np.ndarray], list[dict[str, tuple[float, float, float, float]]]]:
    """`count` BGR frames and, per frame, {word: (x1, y1, x2, y2)} of every word drawn."""
    background = _background(width, height, seed)
    frames, truth = [], []
    for index in range(count):
        image = background.copy()
        boxes: dict[str, tuple[float, float, float, float]] = {}
        for word in layout(width, height):
            x = word.start[0] + word.velocity[0] * index
            y = word.start[1] + word.velocity[1] * index
            origin = (int(round(x)), int(round(y)))
            (w, h), baseline = cv2.getTextSize(word.text, cv2.FONT_HERSHEY_SIMPLEX, word.scale, 2)
            cv2.putText(
                image, word.text, origin, cv2.FONT_HERSHEY_SIMPLEX, word.scale, word.color, 2, cv2.LINE_AA
            )
            boxes[word.text] = (origin[0], origin[1] - h, origin[0] + w, origin[1] + baseline)
        frames.append(image)
        truth.append(boxes)
    return frames, truth


def write_text_clip(
    path: str | Path, count: int = 100, width: int = 640, height: int = 360, fps: int = 25
) -> Path:
    """The frames of `text_frames` as an H.264 MP4 (crf 18: the letters stay sharp)."""
    frames, _ = text_frames(count, width, height)
    return write_frames(path, frames, fps)


def write_frames(path: str | Path, frames: list[np.ndarray], fps: int = 25) -> Path:
    """BGR frames (of one size, even sides) as an H.264 MP4 at crf 18."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    height, width = frames[0].shape[:2]
    with av.open(str(path), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=Fraction(fps))
        assert isinstance(stream, av.video.stream.VideoStream)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "medium", "crf": "18"}
        for index, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(image, format="bgr24")
            frame.pts = index
            frame.time_base = Fraction(1, fps)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


if __name__ == "__main__":
    print(write_text_clip(sys.argv[1] if len(sys.argv) > 1 else "signs.mp4"))
