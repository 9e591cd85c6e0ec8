"""JPEG stills of frames: the web console's previews (pipeline.ops.preview), made with OpenCV.

A preview is shrunk to at most `max_width` pixels wide before it is encoded: a browser tile shows no
more, the JPEG stays near 20 KiB, and 1080p costs 3.6-5.9 ms shrunk and encoded here against 0.4 ms
for a 640x272 frame (docs/benchmarks.md, "The web console's previews").
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import cv2
import numpy as np

if TYPE_CHECKING:  # the workers import this module: not the preview's HTTP side and its metrics
    from framewire.pipeline.ops.preview import Encoder


def encode_jpeg(image: np.ndarray, max_width: int = 640, quality: int = 75) -> bytes:
    """`image` (BGR or grey, uint8) as JPEG bytes, no wider than `max_width` (aspect kept)."""
    height, width = image.shape[:2]
    if width > max_width:
        image = cv2.resize(image, (max_width, max(1, round(height * max_width / width))), interpolation=cv2.INTER_AREA)
    ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError(f"OpenCV could not encode a {width}x{height} image as JPEG")
    return data.tobytes()


def jpeg_encoder(max_width: int, quality: int) -> Encoder:
    """The console's encoder with these settings (a partial: it pickles, unlike a lambda)."""
    return functools.partial(encode_jpeg, max_width=max_width, quality=quality)
