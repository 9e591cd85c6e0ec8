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
