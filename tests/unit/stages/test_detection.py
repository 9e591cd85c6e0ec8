"""The generic detection task: formats from shapes and metadata, decoding of each format, the
preprocessing keys, labels and class filters, NMS, and the one-line errors at start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from framewire.media import yuv
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages import detections
from framewire.stages.tasks import resolve_task
from framewire.stages.tasks.base import ModelInfo
from framewire.stages.tasks.detection import Detection
from framewire.stages.tasks.detection_formats import detector_evidence, find_layout

pytestmark = pytest.mark.timeout(60)

F32 = np.dtype(np.float32)
IMAGES = TensorSpec("images", F32, (1, 3, 64, 64))


def _info(*outputs: TensorSpec, inputs: tuple[TensorSpec, ...] = (IMAGES,), **metadata: str) -> ModelInfo:
    return ModelInfo("model.onnx", inputs, tuple(outputs), metadata)


def _task(info: ModelInfo, **params: Any) -> Detection:
    task = resolve_task("detection", params)
    assert isinstance(task, Detection)
    task.use_model(info)
    return task


@pytest.mark.parametrize(
    ("shape", "metadata", "expected", "classes"),
    [
        ((1, 84, 8400), {}, "yolov8", 80),
        ((1, 22, "anchors"), {"author": "Ultralytics"}, "yolov8", 18),
        ((1, 25200, 85), {}, "yolov5", 80),
        ((1, 84, 6), {}, "yolox", 1),  # 64x64 at strides 8/16/32: 64 + 16 + 4 = 84 cells
        ((1, 300, 6), {}, "end2end", None),
        ((1, 300, 6), {"author": "Ultralytics", "end2end": "True"}, "end2end", None),
    ],
)
def test_the_format_comes_from_the_output_shape_and_metadata(
    shape: tuple[Any, ...], metadata: dict[str, str], expected: str, classes: int | None
) -> None:
    layout = find_layout([TensorSpec("out", F32, shape)], metadata, (64, 64), (8, 16, 32), "auto")
    assert (layout.format, layout.outputs, layout.classes) == (expected, ("out",), classes)


def test_separate_outputs_are_found_by_name() -> None:
    outputs = [
        TensorSpec("num_dets", np.dtype(np.int32), (1, 1)),
        TensorSpec("det_boxes", F32, (1, 100, 4)),
        TensorSpec("det_scores", F32, (1, 100)),
        TensorSpec("det_classes", np.dtype(np.int32), (1, 100)),
    ]
    layout = find_layout(outputs, {}, (64, 64), (8, 16, 32), "auto")
    assert layout.format == "separate"
    assert layout.outputs == ("det_boxes", "det_scores", "det_classes", "num_dets")


@pytest.mark.parametrize(
    ("outputs", "fragment"),
    [
        (
            [TensorSpec("output0", F32, (1, 3, 80, 80, 85))],
            "the model's output 'output0' [1, 3, 80, 80, 85] fit no",
        ),
        (
            [TensorSpec("out", F32, ("n", "rows", 6))],
            "the model's output 'out' ['n', 'rows', 6] cannot be told apart",
        ),
        (
            [TensorSpec("a", F32, (1, 10)), TensorSpec("b", F32, (1, 20))],
            "the model's outputs 'a' [1, 10], 'b' [1, 20] fit no",
        ),
    ],
)
def test_a_model_that_fits_no_format_is_refused_in_one_line_naming_the_output(
    outputs: list[TensorSpec], fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _task(_info(*outputs))
    message = str(info.value)
    assert message.startswith("model.format: ") and fragment in message and "\n" not in message


def test_a_named_format_is_checked_against_the_shape() -> None:
    with pytest.raises(
        ConfigError, match=r"^model.format: yolov8 needs output 'out' as \[B, 4\+C, N\], found \[1, 2, 10\]$"
    ):
        _task(_info(TensorSpec("out", F32, (1, 2, 10))), format="yolov8")
    with pytest.raises(
        ConfigError, match=r"yolox output 'out' \[1, 90, 6\] has 90 rows, but the grid .* has 84 cells"
    ):
        _task(_info(TensorSpec("out", F32, (1, 90, 6))), format="yolox")


def _decode(
    task: Detection, name: str, value: np.ndarray, frame: tuple[int, int] = (64, 64)
) -> list[dict[str, Any]]:
    return task.postprocess({name: value.astype(np.float32)[None]}, {}, *frame).data[detections.KEY]


def test_yolov8_rows_decode_to_frame_boxes_with_labels() -> None:
    task = _task(
        _info(TensorSpec("out", F32, (1, 6, 4))), format="yolov8", labels=("cat", "dog"), score_threshold=0.5
    )
    rows = np.array(
        [  # per anchor: cx, cy, w, h, score(cat), score(dog)
            [32.0, 16.0, 20.0, 10.0, 0.9, 0.1],
            [10.0, 10.0, 4.0, 4.0, 0.2, 0.3],  # below the threshold
            [40.0, 40.0, 8.0, 8.0, 0.1, 0.7],
            [32.5, 16.0, 20.0, 10.0, 0.6, 0.0],  # a worse copy of the first: suppressed
        ]
    )
    found = _decode(task, "out", rows.T)
    assert [(d["label"], d["class_id"], d["score"]) for d in found] == [("cat", 0, 0.9), ("dog", 1, 0.7)]
    assert found[0]["box"] == [22.0, 11.0, 20.0, 10.0] and found[1]["box"] == [36.0, 36.0, 8.0, 8.0]


def test_yolov5_scores_are_objectness_times_class() -> None:
    task = _task(_info(TensorSpec("out", F32, (1, 2, 7))), format="yolov5", score_threshold=0.3)
    rows = np.array([[20.0, 20.0, 10.0, 10.0, 0.5, 0.9, 0.2], [40.0, 40.0, 10.0, 10.0, 0.9, 0.3, 0.2]])
    found = _decode(task, "out", rows)
    assert [(d["class_id"], d["score"]) for d in found] == [(0, 0.45)]  # 0.9*0.3 = 0.27 falls below


def test_yolox_grid_outputs_decode_with_strides() -> None:
    task = _task(_info(TensorSpec("out", F32, (1, 84, 6))), score_threshold=0.5)
    rows = np.zeros((84, 6), dtype=np.float32)
    # Stride 8 has an 8x8 grid first; cell 10 is column 2, row 1. Stride 16 starts at row 64.
    rows[10] = [0.5, 0.25, np.log(2.0), 0.0, 0.9, 0.8]
    rows[64 + 5] = [0.0, 0.0, 0.0, np.log(0.5), 1.0, 0.6]  # stride 16, column 1, row 1
    found = _decode(task, "out", rows)
    centre, size = (2.5 * 8, 1.25 * 8), (2.0 * 8, 1.0 * 8)
    assert found[0]["box"] == [centre[0] - size[0] / 2, centre[1] - size[1] / 2, size[0], size[1]]
    assert found[1]["box"] == [16.0 - 8.0, 16.0 - 4.0, 16.0, 8.0] and found[1]["score"] == 0.6


def test_end2end_rows_keep_their_order_and_skip_nms() -> None:
    task = _task(_info(TensorSpec("out", F32, (1, 3, 6))), score_threshold=0.3)
    rows = np.array([[0, 0, 10, 10, 0.9, 2], [1, 1, 11, 11, 0.8, 2], [5, 5, 6, 6, 0.1, 0]])
    found = _decode(task, "out", rows)
    assert [(d["box"], d["score"], d["class_id"]) for d in found] == [
        ([0.0, 0.0, 10.0, 10.0], 0.9, 2),
        ([1.0, 1.0, 10.0, 10.0], 0.8, 2),
    ]  # overlapping, both kept


def test_separate_outputs_with_a_count_and_normalised_centre_boxes() -> None:
    outputs = (
        TensorSpec("boxes", F32, (1, 3, 4)),
        TensorSpec("scores", F32, (1, 3)),
        TensorSpec("labels", np.dtype(np.int64), (1, 3)),
        TensorSpec("num", np.dtype(np.int64), (1, 1)),
    )
    task = _task(_info(*outputs), box_format="cxcywh", box_units="normalized", resize="stretch")
    arrays = {
        "boxes": np.array([[[0.5, 0.5, 0.25, 0.5], [0.1, 0.1, 0.1, 0.1], [0.9, 0.9, 0.1, 0.1]]], np.float32),
        "scores": np.array([[0.9, 0.8, 0.95]], np.float32),
        "labels": np.array([[3, 1, 2]]),
        "num": np.array([[2]]),
    }
    found = task.postprocess(arrays, {}, 128, 64).data[detections.KEY]
    # Stretch 128x64 -> 64x64: x back at twice the scale; the third row is past the count.
    assert [(d["box"], d["class_id"]) for d in found] == [
        ([48.0, 16.0, 32.0, 32.0], 3),
        ([6.4, 3.2, 12.8, 6.4], 1),
    ]


def test_nms_is_class_aware_or_agnostic() -> None:
    rows = np.array(
        [[20.0, 20.0, 20.0, 20.0, 0.9, 0.0], [21.0, 20.0, 20.0, 20.0, 0.0, 0.8]]
    )  # two classes, one place
    aware = _task(_info(TensorSpec("out", F32, (1, 6, 2))), format="yolov8", nms="class")
    agnostic = _task(_info(TensorSpec("out", F32, (1, 6, 2))), format="yolov8", nms="agnostic")
    assert len(_decode(aware, "out", rows.T)) == 2
    assert [d["class_id"] for d in _decode(agnostic, "out", rows.T)] == [0]
    capped = _task(_info(TensorSpec("out", F32, (1, 6, 2))), format="yolov8", max_detections=1)
    assert len(_decode(capped, "out", rows.T)) == 1


def test_class_filter_by_label_or_id() -> None:
    rows = np.array([[20.0, 20.0, 10.0, 10.0, 0.9, 0.0], [45.0, 45.0, 10.0, 10.0, 0.0, 0.8]])
    spec = TensorSpec("out", F32, (1, 6, 2))
    named = _task(_info(spec), format="yolov8", labels=("a", "b"), classes=("b",))
    assert [d["label"] for d in _decode(named, "out", rows.T)] == ["b"]
    assert [
        d["class_id"] for d in _decode(_task(_info(spec), format="yolov8", classes=(0,)), "out", rows.T)
    ] == [0]


def test_labels_from_a_file_the_metadata_or_the_config(tmp_path: Path) -> None:
    spec = TensorSpec("out", F32, (1, 7, 10))
    labels = tmp_path / "labels.txt"
    labels.write_text("person\n\nbicycle\ncar\n")
    assert _task(_info(spec), labels=str(labels)).labels() == ("person", "bicycle", "car")
    names = "{0: 'person', 1: 'bicycle', 2: 'car'}"
    assert _task(_info(spec, names=names)).labels() == ("person", "bicycle", "car")
    assert _task(_info(spec, names=names), labels=("a", "b", "c")).labels() == ("a", "b", "c")
    assert _task(_info(spec)).labels() is None


def test_labels_that_do_not_match_the_class_count_are_refused(tmp_path: Path) -> None:
    labels = tmp_path / "coco.txt"
    labels.write_text("\n".join(f"c{i}" for i in range(80)))
    with pytest.raises(ConfigError) as info:
        _task(_info(TensorSpec("output0", F32, (1, 22, "n"))), labels=str(labels))
    assert str(info.value) == (
        f"model.labels: 80 labels (file {labels}) but the model's output 'output0' has 18 classes"
    )


def test_class_filter_names_must_be_labels() -> None:
    with pytest.raises(
        ConfigError, match=r"^model.classes: 'persn' is not a label of the model \(labels: person, car\)$"
    ):
        _task(_info(TensorSpec("out", F32, (1, 6, 10))), labels=("person", "car"), classes=("persn",))
    with pytest.raises(
        ConfigError, match=r"^model.classes: class id 5 is out of range \(the model has 2 classes\)$"
    ):
        _task(_info(TensorSpec("out", F32, (1, 6, 10))), classes=(5,))


def test_a_model_without_a_fixed_size_needs_one_given() -> None:
    dynamic = TensorSpec("images", F32, ("b", 3, "h", "w"))
    out = TensorSpec("out", F32, (1, 6, "n"))
    with pytest.raises(
        ConfigError, match=r"^model.input_size: the model's input 'images' .* has no fixed size"
    ):
        _task(_info(out, inputs=(dynamic,)))
    assert _task(_info(out, inputs=(dynamic,), imgsz="[320, 320]")).input_spec(640, 480).shape == (
        1,
        3,
        320,
        320,
    )
    assert _task(_info(out, inputs=(dynamic,)), input_size=[96, 64]).input_spec(640, 480).shape == (
        1,
        3,
        64,
        96,
    )


def test_input_size_given_or_auto_makes_fixed_dims_dynamic() -> None:
    out = TensorSpec("out", F32, (1, 6, "n"))
    assert _task(_info(out)).dynamic_axes() == {}
    assert _task(_info(out), input_size=[64, 64]).dynamic_axes() == {}
    assert _task(_info(out), input_size=[128, 96]).dynamic_axes() == {"images": (2, 3)}
    auto = _task(_info(out), input_size="auto", max_side=128)
    assert auto.dynamic_axes() == {"images": (2, 3)}
    assert auto.input_spec(640, 272).shape == (1, 3, 64, 128)  # 128 x 54.4 -> padded to 64


@pytest.mark.parametrize(("pad", "offset"), [("center", (16, 0)), ("top_left", (0, 0))])
def test_letterbox_fill_places_scales_and_normalises(pad: str, offset: tuple[int, int]) -> None:
    """A 32x64 frame (w x h) into 64x64: scale 1, padded in x. RGB, 1/255, mean/std per channel."""
    task = _task(
        _info(TensorSpec("out", F32, (1, 6, 84))),
        pad=pad,
        pad_value=100,
        mean=(0.5, 0.0, 0.0),
        std=(0.5, 1.0, 2.0),
    )
    frame = np.zeros((64, 32, 3), dtype=np.uint8)
    frame[..., 0], frame[..., 1], frame[..., 2] = 10, 20, 255  # B, G, R
    buffer = np.full((1, 3, 64, 64), np.nan, dtype=np.float32)
    task.preprocess(frame, buffer)
    x0 = offset[0]
    inside = buffer[0, :, :, x0 : x0 + 32]
    np.testing.assert_allclose(inside[0], (255 / 255 - 0.5) / 0.5, rtol=1e-6)  # R first
    np.testing.assert_allclose(inside[1], 20 / 255, rtol=1e-6)
    np.testing.assert_allclose(inside[2], 10 / 255 / 2.0, rtol=1e-6)
    outside = np.delete(buffer[0], np.s_[x0 : x0 + 32], axis=2)
    np.testing.assert_allclose(outside[0], (100 / 255 - 0.5) / 0.5, rtol=1e-6)
    np.testing.assert_allclose(outside[2], 100 / 255 / 2.0, rtol=1e-6)
    # A box found at the padded input maps back to the frame.
    g = task.image.geometry(32, 64)
    assert g.to_frame(np.array([[x0 + 4, 8, x0 + 12, 24]]), 32, 64).tolist() == [[4.0, 8.0, 12.0, 24.0]]


@pytest.mark.parametrize(
    ("size", "planes_first"), [((128, 72), True), ((192, 108), True), ((100, 60), False)]
)
def test_an_i420_frame_fills_the_input_as_its_bgr_does(size: tuple[int, int], planes_first: bool) -> None:
    """Into 64x64: halved or a third, the planes are scaled first (yuv.to_bgr_resized); at any
    other scale the frame is converted first. Either way the input is the BGR frame's, within rounding."""
    task = _task(_info(TensorSpec("out", F32, (1, 6, 84))), mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    image = np.empty(yuv.shape(*size), np.uint8)
    rng = np.random.default_rng(3)
    for plane, (low, high) in zip(yuv.planes(image), ((60, 190), (110, 146), (110, 146)), strict=True):
        # Smooth content in the gamut: nothing for the conversion to clip.
        coarse = rng.integers(low, high, (plane.shape[0] // 4 + 1, plane.shape[1] // 4 + 1), dtype=np.uint8)
        plane[...] = cv2.resize(coarse, (plane.shape[1], plane.shape[0]), interpolation=cv2.INTER_LINEAR)
    g = task.image.geometry(*size)
    assert (yuv._chroma_picks(size[1], g.resized_height) is not None) is planes_first
    from_i420, from_bgr = np.empty((1, 3, 64, 64), F32), np.empty((1, 3, 64, 64), F32)
    task.preprocess_i420(image, from_i420)
    task.preprocess(yuv.to_bgr(image), from_bgr)
    assert np.abs(from_i420 - from_bgr).max() <= 1.5 / 255


def test_resize_to_the_height_pads_on_the_right_as_paddleocr_does() -> None:
    spec = TensorSpec("out", F32, (1, 6, 84))
    task = _task(_info(spec, inputs=(TensorSpec("images", F32, (1, 3, 48, 192)),)), resize="height")
    assert task.image.geometry(100, 20).resized_width == 192  # ceil(48 * 5) = 240, capped
    g = task.image.geometry(60, 30)  # ceil(48 * 2) = 96 wide, 48 high
    assert (g.resized_width, g.resized_height, g.pad_x, g.pad_y, g.scale_x, g.scale_y) == (
        96,
        48,
        0,
        0,
        1.6,
        1.6,
    )


def test_bgr_raw_pixels_and_floor_rounding_as_yolox_does() -> None:
    task = _task(
        _info(TensorSpec("out", F32, (1, 84, 6))),
        channels="bgr",
        scale="none",
        pad="top_left",
        rounding="floor",
    )
    frame = np.zeros((27, 64, 3), dtype=np.uint8)  # scale 1: 27 rows, floor and round agree
    frame[..., 0] = 7
    buffer = np.zeros((1, 3, 64, 64), dtype=np.float32)
    task.preprocess(frame, buffer)
    assert buffer[0, 0, 0, 0] == 7.0 and buffer[0, 0, 27, 0] == 114.0
    g = task.image.geometry(100, 43)  # 0.64 * 43 = 27.52: floored to 27 (rounded would be 28)
    assert (g.resized_width, g.resized_height) == (64, 27)


@pytest.mark.parametrize(
    ("output", "inputs", "metadata", "found"),
    [
        # YOLOv8's head: channels first, one column per grid cell at strides 8/16/32 (64x64: 84 cells).
        ((1, 6, 84), (1, 3, 64, 64), {}, True),
        ((1, 84, 8400), (1, 3, 640, 640), {}, True),
        ((1, 22, 2100), (1, 3, 320, 320), {}, True),
        # Dynamic everything: only the Ultralytics metadata (nudenet's 320n.onnx) tells.
        ((1, 22, "anchors"), ("batch", 3, "height", "width"), {"author": "Ultralytics", "task": "detect"}, True),
        ((1, 22, "anchors"), ("batch", 3, "height", "width"), {}, False),
        ((1, 56, 8400), (1, 3, 640, 640), {"author": "Ultralytics", "task": "pose"}, False),
        ((1, 84, 8000), (1, 3, 640, 640), {}, False),  # not the grid's count
        ((1, 40, 6625), (1, 3, 48, 320), {}, False),  # a text recogniser: steps x characters
        ((1, 8400, 84), (1, 3, 640, 640), {}, False),  # rows last: YOLOv5/YOLOX-like, other families too
        ((1, 1000), (1, 3, 224, 224), {}, False),
    ],
)  # fmt: skip
def test_a_detector_is_told_from_its_file_only_beyond_doubt(
    output: tuple[Any, ...], inputs: tuple[Any, ...], metadata: dict[str, str], found: bool
) -> None:
    ok, why = detector_evidence((TensorSpec("images", F32, inputs),), (TensorSpec("out", F32, output),), metadata)
    assert ok is found, why
    if metadata.get("task") == "pose":
        assert why == "the model is an Ultralytics 'pose' export, not a detector"
