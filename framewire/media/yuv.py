"""Frames kept as YUV 4:2:0 (I420) instead of BGR, for jobs whose every stage takes them
(`framewire.app.compose.frames.yuv_frames`): a face-blur job that writes H.264 skips the
conversion back from BGR for x264 and draws on 1.5 bytes a pixel instead of 3 (docs/results/history.md,
framewire's own cost); the model's input is converted from the planes as the decoder would have.

An I420 image is one C-contiguous uint8 array of (height * 3 / 2, width): the Y plane's rows, then
the U plane's and the V plane's (each a quarter of Y), as OpenCV's COLOR_YUV2BGR_I420 and PyAV's
`VideoFrame.from_ndarray(format="yuv420p")` read it. Width and height are even. BT.601 limited range,
what the video writer tags its output as.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import av
import cv2
import numpy as np

BT601_COLORSPACES = frozenset({2, 5, 6})  # unspecified, bt470bg, smpte170m
"""AVColorSpace values whose matrix is BT.601, the one OpenCV's I420 conversions use."""
JPEG_RANGE = 2  # AVCOL_RANGE_JPEG (full range)
_BT601_TO_BGR = np.array(
    [
        [1.164, 2.018, 0.0, -1.164 * 16 - 2.018 * 128],
        [1.164, -0.391, -0.813, -1.164 * 16 + (0.391 + 0.813) * 128],
        [1.164, 0.0, 1.596, -1.164 * 16 - 1.596 * 128],
    ],
    dtype=np.float32,
)
"""B, G and R from Y, U and V: the BT.601 limited-range coefficients OpenCV's I420 conversion uses."""


def shape(width: int, height: int) -> tuple[int, int]:
    """The array shape of a width x height I420 image."""
    return height * 3 // 2, width


def is_i420(image: np.ndarray) -> bool:
    """Whether an image array is I420 (two dimensions) rather than BGR (height x width x 3)."""
    return image.ndim == 2


def size(image: np.ndarray) -> tuple[int, int]:
    """(width, height) of the picture an I420 or BGR array holds."""
    if is_i420(image):
        return image.shape[1], image.shape[0] * 2 // 3
    return image.shape[1], image.shape[0]


def planes(image: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views of the Y, U and V planes of an I420 array (writable when it is)."""
    width, height = size(image)
    flat = image.reshape(-1)
    luma = width * height
    quarter = luma // 4
    y = flat[:luma].reshape(height, width)
    u = flat[luma : luma + quarter].reshape(height // 2, width // 2)
    v = flat[luma + quarter : luma + 2 * quarter].reshape(height // 2, width // 2)
    return y, u, v


def plain_bt601(frame: av.VideoFrame) -> bool:
    """Whether a decoded frame is 8-bit 4:2:0 BT.601 limited range: what OpenCV's I420 conversions
    and the video writer's tags take as they are."""
    return (
        frame.format.name == "yuv420p"
        and frame.colorspace in BT601_COLORSPACES
        and frame.color_range != JPEG_RANGE
    )


def write_frame(frame: av.VideoFrame, out: np.ndarray) -> None:
    """A decoded frame into `out` (I420 of its size), converted by libswscale unless it is already
    8-bit 4:2:0 BT.601 limited range (then its planes are copied as they are)."""
    if not plain_bt601(frame):
        frame = frame.reformat(format="yuv420p", dst_colorspace="ITU601", dst_color_range="MPEG")
    for plane, view in zip(frame.planes, planes(out), strict=True):
        rows, cols = view.shape
        src = np.frombuffer(memoryview(plane), np.uint8).reshape(-1, plane.line_size)[:rows, :cols]
        np.copyto(view, src)


def to_bgr(image: np.ndarray) -> np.ndarray:
    """BGR of an I420 array (a BGR array is returned as it is)."""
    if not is_i420(image):
        return image
    return cv2.cvtColor(image, cv2.COLOR_YUV2BGR_I420)


def to_bgr_resized(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """BGR of an I420 array scaled to `size` (width, height): what `cv2.resize` of its `to_bgr`
    gives with INTER_LINEAR, within a level but for colours at the edge of the gamut (the conversion
    clips them before the scaling, this after it). Where `size` is half the picture's or a third of
    it (1280x720 or 1920x1080 to 640x360), the planes are scaled first and converted at the small
    size, for about half the cost (docs/results/history.md); other sizes go through `to_bgr`.

    It gives the model the same pixels, not other chroma: OpenCV's conversion takes each chroma
    sample for the 2x2 pixels it covers, INTER_LINEAR at these sizes takes every pixel from one
    such block (at a third: the middle pixel of each 3x3; at half: the mean of each 2x2), and both
    the scaling and the conversion are linear."""
    luma, u, v = planes(image)
    height, width = luma.shape
    rows, cols = _chroma_picks(height, size[1]), _chroma_picks(width, size[0])
    if rows is None or cols is None:  # not scaled_from_planes
        return cv2.resize(to_bgr(image), size, interpolation=cv2.INTER_LINEAR)
    scaled = cv2.resize(luma, size, interpolation=cv2.INTER_LINEAR)
    halved = (len(rows), len(cols)) == u.shape  # the planes are the chroma at this size as they are
    chroma = [plane if halved else plane.take(rows, 0).take(cols, 1) for plane in (u, v)]
    return cv2.transform(cv2.merge([scaled, *chroma]), _BT601_TO_BGR)


def scaled_from_planes(picture: tuple[int, int], size: tuple[int, int]) -> bool:
    """Whether `to_bgr_resized` scales the planes of a `picture` (width, height) to `size` before
    converting them (half or a third of its sides), rather than converting the whole picture first."""
    return _chroma_picks(picture[1], size[1]) is not None and _chroma_picks(picture[0], size[0]) is not None


@functools.lru_cache(maxsize=16)
def _chroma_picks(length: int, scaled: int) -> np.ndarray | None:
    """The chroma row (or column) of each of `scaled` pixels along an axis of `length` pixels, when
    INTER_LINEAR takes each of them from the pixels of one chroma sample; None when it blends two.

    OpenCV's INTER_LINEAR reads output pixel i at (i + 0.5) * length / scaled - 0.5 and blends the
    two pixels around it: halving, those are 2i and 2i + 1 (one sample, i); at a third, the blend's
    weight is nil and the pixel is 3i + 1 alone."""
    if length % 2 or scaled >= length:
        return None
    at = (np.arange(scaled, dtype=np.float64) + 0.5) * (length / scaled) - 0.5
    first = np.floor(at + 1e-9)
    alone = np.all(np.abs(at - first) < 1e-9)  # no blend: the pixel itself
    if alone or np.all(first % 2 == 0):  # or two pixels of one sample, whatever the weight
        return (first.astype(np.int64) // 2).astype(np.intp)
    return None


def plane_boxes(image: np.ndarray, x0: int, y0: int, x1: int, y1: int) -> Iterator[tuple[np.ndarray, float]]:
    """The box (x0, y0)-(x1, y1) of the picture in each plane of an I420 array, with the plane's
    scale (1 for Y, 0.5 for U and V): what a composite does to a box it does to each of these."""
    for index, plane in enumerate(planes(image)):
        if index == 0:
            yield plane[y0:y1, x0:x1], 1.0
        else:
            yield plane[y0 // 2 : (y1 + 1) // 2, x0 // 2 : (x1 + 1) // 2], 0.5
