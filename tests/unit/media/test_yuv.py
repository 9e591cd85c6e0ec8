"""I420 frames (framewire.media.yuv): the planes of a decoded frame copied as they are, its BGR the
very pixels the BGR path writes, boxes in each plane, and the writer encoding I420 as it is."""

from __future__ import annotations

from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from framewire.media import yuv
from framewire.media.video_reader import PendingImage, VideoReader, to_bgr
from framewire.media.video_writer import VideoFileWriter

pytestmark = pytest.mark.timeout(60)

VIDEOS = Path(__file__).resolve().parents[3] / "assets" / "videos"


def _first_frame(name: str) -> av.VideoFrame:
    with av.open(str(VIDEOS / name)) as container:
        return next(container.decode(video=0))


def test_shape_size_and_planes_of_an_i420_array() -> None:
    image = np.arange(6 * 4 * 3 // 2, dtype=np.uint8).reshape(yuv.shape(4, 6))  # width 4, height 6
    assert image.shape == (9, 4) and yuv.is_i420(image) and yuv.size(image) == (4, 6)
    y, u, v = yuv.planes(image)
    assert y.shape == (6, 4) and u.shape == v.shape == (3, 2)
    assert y.base is not None and np.shares_memory(u, image)  # views: writing them writes the frame
    assert list(u.reshape(-1)) == list(range(24, 30)) and list(v.reshape(-1)) == list(range(30, 36))
    assert yuv.size(np.zeros((6, 4, 3), np.uint8)) == (4, 6) and not yuv.is_i420(np.zeros((6, 4, 3)))


@pytest.mark.parametrize("name", ["bikes.mp4", "bigbuckbunny.mp4", "carphone_pristine.mp4"])
def test_a_decoded_frame_s_planes_and_its_bgr_are_the_bgr_path_s(name: str) -> None:
    frame = _first_frame(name)
    planes = np.empty(yuv.shape(frame.width, frame.height), np.uint8)
    PendingImage(frame).write_into(planes)
    assert np.array_equal(planes, frame.to_ndarray())  # yuv420p BT.601: copied as it is
    bgr = np.empty((frame.height, frame.width, 3), np.uint8)
    PendingImage(frame).write_into(bgr)
    assert np.array_equal(yuv.to_bgr(planes), bgr) and np.array_equal(bgr, to_bgr(frame))
    assert yuv.to_bgr(bgr) is bgr


def test_a_frame_in_another_format_is_converted_to_bt601_planes() -> None:
    frame = _first_frame("bikes.mp4")
    rgb = av.VideoFrame.from_ndarray(frame.to_ndarray(format="rgb24"), format="rgb24")
    planes = np.empty(yuv.shape(frame.width, frame.height), np.uint8)
    yuv.write_frame(rgb, planes)
    # The same picture: within the rounding of two conversions.
    assert np.abs(yuv.to_bgr(planes).astype(int) - to_bgr(frame).astype(int)).mean() < 2.0


def _scaled_picture(frame: av.VideoFrame, width: int, height: int) -> np.ndarray:
    """An I420 picture of another size made from a decoded frame's planes (real content at any size)."""
    out = np.empty(yuv.shape(width, height), np.uint8)
    for plane, target in zip(yuv.planes(frame.to_ndarray()), yuv.planes(out), strict=True):
        target[...] = cv2.resize(plane, (target.shape[1], target.shape[0]), interpolation=cv2.INTER_AREA)
    return out


@pytest.mark.parametrize(
    ("picture", "size"),
    [
        ((1280, 720), (640, 360)),
        ((1920, 1080), (640, 360)),
        ((640, 480), (320, 240)),
        ((1284, 722), (642, 361)),
    ],
)
def test_scaled_before_converted_gives_the_pixels_of_converted_then_scaled(
    picture: tuple[int, int], size: tuple[int, int]
) -> None:
    image = _scaled_picture(_first_frame("bigbuckbunny.mp4"), *picture)
    reference = cv2.resize(yuv.to_bgr(image), size, interpolation=cv2.INTER_LINEAR).astype(int)
    scaled = yuv.to_bgr_resized(image, size)
    assert scaled.shape == (size[1], size[0], 3) and scaled.dtype == np.uint8
    assert yuv._chroma_picks(picture[1], size[1]) is not None  # the planes were scaled, not the BGR
    off = np.abs(scaled.astype(int) - reference)
    # Rounding apart, the same pixels: off by more than a level only where the conversion clips.
    assert off.mean() < 0.3 and (off > 1).mean() < 0.001


@pytest.mark.parametrize(
    ("picture", "size"), [((1280, 720), (640, 384)), ((768, 576), (640, 480)), ((640, 360), (640, 360))]
)
def test_other_sizes_are_converted_first_as_before(picture: tuple[int, int], size: tuple[int, int]) -> None:
    """Sizes where INTER_LINEAR blends pixels of two chroma samples: the planes alone cannot give them."""
    image = _scaled_picture(_first_frame("bigbuckbunny.mp4"), *picture)
    assert yuv._chroma_picks(picture[1], size[1]) is None or yuv._chroma_picks(picture[0], size[0]) is None
    reference = cv2.resize(yuv.to_bgr(image), size, interpolation=cv2.INTER_LINEAR)
    assert np.array_equal(yuv.to_bgr_resized(image, size), reference)


def test_a_saturated_colour_differs_only_where_the_conversion_clips() -> None:
    """Pure red, green, blue and grey squares (BT.601 limited range) come out the same either way."""
    bgr = np.zeros((64, 64, 3), np.uint8)
    bgr[:32, :32] = (0, 0, 255)
    bgr[:32, 32:] = (0, 255, 0)
    bgr[32:, :32] = (255, 0, 0)
    bgr[32:, 32:] = (128, 128, 128)
    image = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
    reference = cv2.resize(yuv.to_bgr(image), (32, 32), interpolation=cv2.INTER_LINEAR).astype(int)
    assert np.abs(yuv.to_bgr_resized(image, (32, 32)).astype(int) - reference).max() <= 1


def test_a_box_is_found_in_each_plane_at_its_scale() -> None:
    image = np.zeros(yuv.shape(8, 8), np.uint8)
    boxes = list(yuv.plane_boxes(image, 2, 3, 7, 8))
    assert [(b.shape, s) for b, s in boxes] == [((5, 5), 1.0), ((3, 3), 0.5), ((3, 3), 0.5)]
    for box, _ in boxes:
        box[...] = 200
    y, u, v = yuv.planes(image)
    assert y[3:8, 2:7].min() == 200 and y.sum() == 200 * 25
    assert u[1:4, 1:4].min() == 200 and u.sum() == v.sum() == 200 * 9


def test_the_writer_encodes_i420_as_it_is(tmp_path: Path) -> None:
    source = VIDEOS / "bikes.mp4"
    with VideoReader("one", str(source)) as reader:
        frame = next(reader.pending_frames())[0].frame
        planes = frame.to_ndarray()
        writer = VideoFileWriter(str(tmp_path / "out.mp4"), reader.info, preset="ultrafast", crf=10)
        writer.open()
        writer.write(planes, 0)
        with pytest.raises(Exception, match="expected"):
            writer.write(planes[:-2], 1)  # not this stream's size
        writer.close()
    with av.open(str(tmp_path / "out.mp4")) as container:
        back = next(container.decode(video=0)).to_ndarray()
    assert back.shape == planes.shape
    assert cv2.PSNR(back, planes) > 40  # crf 10: the same picture, no colour round trip
