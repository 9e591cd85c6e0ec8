"""`stages.frame_format: auto`: a job keeps its frames as I420 only where every stage takes them and
it saves a conversion: a video output, or a model that scales the frames to half or a third (the
planes are scaled before they are converted); the slot layout follows (even sizes only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from framewire.app.compose.frames import slot_layout, yuv_frames
from framewire.config import validate_config

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
BIKES = str(ROOT / "assets" / "videos" / "bikes.mp4")
YUNET = {"path": str(ROOT / "assets" / "models" / "yunet" / "face_detection_yunet_2023mar.onnx"), "task": "face_detection"}
YOLOX = {"path": str(ROOT / "assets" / "models" / "yolox_ddddocr" / "common_det.onnx"), "task": "detection",
         "labels": ["target"]}  # fmt: skip
VIDEO = {"kind": "video_file", "path": "/tmp/{source_id}.mp4"}
JSONL = {"kind": "jsonl", "path": "/tmp/{source_id}.jsonl"}


def _config(outputs: Any = (VIDEO, JSONL), composite: Any = ({"kind": "blur"},), model: Any = YUNET, **stages: Any) -> Any:
    return validate_config({
        "sources": [{"id": "a", "uri": BIKES}], "model": model, "engine": {"providers": ["cpu"]},
        "stages": stages, "outputs": list(outputs), "composite": list(composite),
    }, "test.yaml")  # fmt: skip


def test_a_blur_job_with_a_video_output_keeps_yuv_frames() -> None:
    config = _config()
    assert yuv_frames(config)
    layout = slot_layout(config, "a", {"width": 640, "height": 272})
    assert layout["image"] == ((408, 640), "uint8") and layout["output"] == ((408, 640), "uint8")
    assert layout["input"][0] == (1, 3, 288, 640)  # the model's input is BGR planes as before
    odd = slot_layout(config, "a", {"width": 641, "height": 272})  # I420 needs even sizes: BGR
    assert odd["image"] == ((272, 641, 3), "uint8")
    assert yuv_frames(_config(composite=({"kind": "pixelate"},))) and yuv_frames(_config(model=YOLOX))


@pytest.mark.parametrize(
    "changes",
    [
        {"frame_format": "bgr"},
        {"composite": ({"kind": "boxes"},)},  # draws in BGR colours
        {"outputs": (JSONL,)},  # no video output, and YuNet takes 640x272 as it is: nothing saved
        {"outputs": (VIDEO, {"kind": "zmq", "endpoint": "ipc:///tmp/fw-never-bound", "jpeg": True})},
        {"outputs": (VIDEO, {"kind": "hls", "path": "/tmp/hls/{source_id}"})},
    ],
)
def test_bgr_where_a_stage_needs_it_or_nothing_is_saved(changes: dict[str, Any]) -> None:
    stages = {k: v for k, v in changes.items() if k == "frame_format"}
    rest = {k: v for k, v in changes.items() if k != "frame_format"}
    config = _config(**rest, **stages)
    assert not yuv_frames(config)
    assert slot_layout(config, "a", {"width": 640, "height": 272})["image"] == ((272, 640, 3), "uint8")


def test_a_console_preview_of_an_i420_frame_is_its_picture() -> None:
    import cv2
    import numpy as np

    from framewire.app.compose.http import _preview
    from framewire.media.jpeg import jpeg_encoder

    bgr = np.zeros((272, 640, 3), np.uint8)
    bgr[:, 320:] = (0, 0, 255)  # red on the right
    jpeg = _preview(jpeg_encoder(320, 90), cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420))
    back = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert back.shape == (136, 320, 3)
    assert back[:, 200:, 2].mean() > 200 and back[:, 200:, 0].mean() < 40 and back[:, :120].mean() < 20


def test_a_fused_job_keeps_the_model_input_in_the_infer_worker_unless_tensorrt_reads_the_pool() -> None:
    from framewire.app.compose.model import own_model_input

    assert not own_model_input(_config())  # stages apart: preprocess hands the input on in the slot
    fused = _config(fuse=True)
    assert own_model_input(fused)
    layout = slot_layout(fused, "a", {"width": 640, "height": 272})
    assert "input" not in layout and layout["image"] == ((408, 640), "uint8")
    trt = validate_config({
        "sources": [{"id": "a", "uri": BIKES}], "model": YUNET, "engine": {"backend": "tensorrt"},
        "stages": {"fuse": True}, "outputs": [JSONL],
    }, "test.yaml")  # fmt: skip
    assert not own_model_input(trt)  # TensorRT copies the input straight from the pool, pinned
    assert slot_layout(trt, "a", {"width": 640, "height": 272})["input"][0] == (1, 3, 288, 640)


@pytest.mark.parametrize(
    ("size", "model", "kept"),
    [
        ((1280, 720), YUNET, True),  # to 640x360: the planes halved, then converted
        ((1920, 1080), YUNET, True),  # to 640x360: a third
        ((640, 272), YUNET, False),  # taken as it is: the conversion is the same either way
        ((768, 576), YUNET, False),  # to 640x480: scaled from the whole BGR picture as before
        ((1280, 720), YOLOX, False),  # letterboxed into 416x416 (0.325): from the BGR picture
        ((832, 832), YOLOX, True),  # halved into 416x416
    ],
)
def test_without_a_video_output_a_source_the_model_scales_down_keeps_yuv_frames(
    size: tuple[int, int], model: dict[str, Any], kept: bool
) -> None:
    config = _config(outputs=(JSONL,), model=model)
    assert yuv_frames(config, size) is kept
    image = slot_layout(config, "a", {"width": size[0], "height": size[1]})["image"]
    assert image == (((size[1] * 3 // 2, size[0]), "uint8") if kept else ((size[1], size[0], 3), "uint8"))
    assert not yuv_frames(_config(outputs=(JSONL,), model=model, frame_format="bgr"), size)
