"""FaceDetection (YuNet): geometry, exact decoding, and agreement with cv2.FaceDetectorYN on real frames."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest
from pydantic import ValidationError

from framewire.engines.onnx_model import describe
from framewire.engines.onnxruntime import OnnxRuntimeEngine
from framewire.media import yuv
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages.tasks import resolve_task
from framewire.stages.tasks.face_detection import OUTPUT_NAMES, FaceDetection, FaceDetectionParams

pytestmark = pytest.mark.timeout(60)

YUNET = Path(__file__).resolve().parents[3] / "assets/models/yunet/face_detection_yunet_2023mar.onnx"


def _task(**params: object) -> FaceDetection:
    task = resolve_task("face_detection", params)
    assert isinstance(task, FaceDetection)
    return task


@pytest.fixture(scope="module")
def engine() -> Iterator[OnnxRuntimeEngine]:
    eng = OnnxRuntimeEngine(str(YUNET), threads=2, dynamic_axes={"input": (2, 3)})
    yield eng
    eng.close()


def _iou(a: list[float], b: np.ndarray) -> float:
    ix = max(0.0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def _prepare(frame: np.ndarray, how: str) -> np.ndarray:
    if how == "enlarge":
        return cv2.resize(frame, None, fx=2, fy=2, interpolation=cv2.INTER_LINEAR)
    if how == "tile":  # 2x2 copies: four faces in one frame, so NMS keeps several
        return np.vstack([np.hstack([frame, frame[:, ::-1]])] * 2)
    return frame


@pytest.mark.parametrize(
    ("video", "indices", "how", "input_size", "min_faces"),
    [
        ("carphone_pristine.mp4", [0, 1, 2, 3, 4], "as is", "auto", 5),  # 176x144: padded, not scaled
        ("bikes.mp4", [0, 30, 31, 32, 33], "as is", "auto", 4),  # 640x272: padded to 640x288
        ("bikes.mp4", [30, 31, 32], "enlarge", "auto", 3),  # 1280x544: scaled by 0.5 first
        ("carphone_pristine.mp4", [0, 1], "as is", [640, 640], 2),  # explicit size: scaled up to fit
        ("carphone_pristine.mp4", [0, 60], "tile", "auto", 8),  # 352x288, four faces each
    ],
)
def test_matches_opencv_face_detector_on_real_frames(
    decode_frames, engine, video, indices, how, input_size, min_faces
) -> None:
    task = _task(input_size=input_size)
    task.check_model(engine.inputs, engine.outputs)
    total = 0
    for decoded in decode_frames(video, indices):
        frame = np.ascontiguousarray(_prepare(decoded, how))
        height, width = frame.shape[:2]
        spec = task.input_spec(width, height)
        buffer = np.empty(spec.shape, dtype=np.float32)
        meta = task.preprocess(frame, buffer)
        outputs = engine.infer({task.input_name: buffer}, task.output_names)
        faces = task.postprocess(outputs, meta, width, height).data["detections"]

        scale = meta["scale"]
        size = (round(width * scale), round(height * scale))
        resized = frame if size == (width, height) else cv2.resize(frame, size)
        detector = cv2.FaceDetectorYN.create(str(YUNET), "", size, 0.9, 0.3, 5000)
        _, expected = detector.detect(resized)
        expected = np.zeros((0, 15), np.float32) if expected is None else expected

        assert len(faces) == len(expected)
        for face, ref in zip(faces, expected):
            ref_coords = ref[:14] / scale
            assert _iou(face["box"], ref_coords[:4]) >= 0.9
            assert np.abs(np.array(face["landmarks"]).ravel() - ref_coords[4:]).max() <= 2.0
            assert abs(face["score"] - float(ref[14])) <= 0.02
        total += len(faces)
    assert total >= min_faces


def test_auto_scales_720p_down_to_640_wide_and_pads_to_32() -> None:
    task = _task()
    assert task.input_spec(1280, 720) == TensorSpec("input", np.dtype(np.float32), (1, 3, 384, 640))

    frame = np.random.default_rng(0).integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    buffer = np.full((1, 3, 384, 640), -1.0, dtype=np.float32)
    meta = task.preprocess(frame, buffer)

    assert meta == {"scale": 0.5}
    expected = cv2.resize(frame, (640, 360), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(buffer[0, :, :360, :], expected.transpose(2, 0, 1))
    assert not buffer[0, :, 360:, :].any()


def _i420_frames(video: str, count: int) -> list[np.ndarray]:
    import av

    with av.open(str(YUNET.parents[2] / "videos" / video)) as container:
        return [frame.to_ndarray() for _, frame in zip(range(count), container.decode(video=0))]


def test_an_i420_frame_is_scaled_before_it_is_converted_and_finds_the_same_faces(engine) -> None:
    """720p to 640x360: the planes are scaled, then converted (yuv.to_bgr_resized). The model's
    input is within rounding of the BGR path's, and the faces are the same ones."""
    task = _task(score_threshold=0.5)
    faces = 0
    for image in _i420_frames("bigbuckbunny.mp4", 40)[::4]:
        spec = task.input_spec(1280, 720)
        scaled, converted = np.empty(spec.shape, np.float32), np.empty(spec.shape, np.float32)
        assert task.preprocess_i420(image, scaled) == task.preprocess(yuv.to_bgr(image), converted)
        off = np.abs(scaled - converted)
        assert off.mean() < 0.3 and (off > 1).mean() < 0.002
        outputs = [engine.infer({task.input_name: b}, task.output_names) for b in (scaled, converted)]
        found = [task.postprocess(out, {"scale": 0.5}, 1280, 720).data for out in outputs]
        assert len(found[0]["detections"]) == len(found[1]["detections"])
        for a, b in zip(found[0]["detections"], found[1]["detections"], strict=True):
            assert _iou(a["box"], np.asarray(b["box"])) >= 0.9 and abs(a["score"] - b["score"]) <= 0.02
        faces += len(found[0]["detections"])
    assert faces >= 2


def test_an_i420_frame_the_model_takes_at_its_size_is_converted_as_the_decoder_would() -> None:
    task = _task()
    image = _i420_frames("bikes.mp4", 1)[0]  # 640x272: padded, not scaled
    spec = task.input_spec(640, 272)
    a, b = np.empty(spec.shape, np.float32), np.empty(spec.shape, np.float32)
    task.preprocess_i420(image, a)
    task.preprocess(yuv.to_bgr(image), b)
    np.testing.assert_array_equal(a, b)


def test_auto_never_upscales_and_copies_small_frames_exactly() -> None:
    task = _task()
    frame = np.random.default_rng(1).integers(0, 256, (144, 176, 3), dtype=np.uint8)
    spec = task.input_spec(176, 144)
    assert spec.shape == (1, 3, 160, 192)
    buffer = np.full(spec.shape, 7.0, dtype=np.float32)

    assert task.preprocess(frame, buffer) == {"scale": 1.0}
    np.testing.assert_array_equal(buffer[0, :, :144, :176], frame.transpose(2, 0, 1))
    assert not buffer[0, :, 144:, :].any()
    assert not buffer[0, :, :, 176:].any()


def test_explicit_input_size_fits_keeping_aspect_and_pads() -> None:
    task = _task(input_size=[320, 320])
    frame = np.full((272, 640, 3), 200, dtype=np.uint8)
    buffer = np.empty((1, 3, 320, 320), dtype=np.float32)

    assert task.input_spec(640, 272).shape == (1, 3, 320, 320)
    assert task.preprocess(frame, buffer) == {"scale": 0.5}
    assert (buffer[0, :, :136, :] == 200.0).all()
    assert not buffer[0, :, 136:, :].any()


def test_preprocess_gives_each_frame_its_own_pixels_whatever_came_before() -> None:
    # The planes OpenCV splits into are kept from frame to frame (and made anew for another size):
    # each input must still be that frame's, planar and padded, never an earlier frame's.
    task = _task()
    rng = np.random.default_rng(3)
    for width, height in [(640, 272), (640, 272), (176, 144), (640, 272)]:
        frame = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        spec = task.input_spec(width, height)
        buffer = np.full(spec.shape, -1.0, np.float32)
        task.preprocess(frame, buffer)
        expected = np.zeros(spec.shape, np.float32)
        expected[0, :, :height, :width] = frame.transpose(2, 0, 1)
        assert np.array_equal(buffer, expected), (width, height)


def test_preprocess_rejects_a_buffer_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match=r"\(1, 3, 160, 192\)"):
        _task().preprocess(np.zeros((144, 176, 3), np.uint8), np.empty((1, 3, 144, 176), np.float32))


def test_dynamic_axes_unless_the_size_is_the_one_in_the_file() -> None:
    assert _task().dynamic_axes() == {"input": (2, 3)}
    assert _task(input_size=[320, 320]).dynamic_axes() == {"input": (2, 3)}
    assert _task(input_size=[640, 640]).dynamic_axes() == {}


def _synthetic_outputs(width: int, height: int) -> dict[str, np.ndarray]:
    """All-zero YuNet outputs (score 0 everywhere) for a padded input of this size."""
    outputs = {}
    for name in OUTPUT_NAMES:
        kind, stride = name.split("_")
        cells = (width // int(stride)) * (height // int(stride))
        depth = {"cls": 1, "obj": 1, "bbox": 4, "kps": 10}[kind]
        outputs[name] = np.zeros((1, cells, depth), dtype=np.float32)
    return outputs


def test_postprocess_decodes_grid_cells_and_suppresses_duplicates_exactly() -> None:
    task = _task(input_size=[64, 64])  # a 128x128 frame is scaled by 0.5 into a 64x64 input
    out = _synthetic_outputs(64, 64)
    # Stride 8 (8x8 grid), cell row 2 col 3: score sqrt(0.95 * 0.95), centre (3.5, 2.25) * 8,
    # size (2, 3) * 8, every landmark at the cell corner.
    cell = 2 * 8 + 3
    out["cls_8"][0, cell] = out["obj_8"][0, cell] = 0.95
    out["bbox_8"][0, cell] = [0.5, 0.25, math.log(2.0), math.log(3.0)]
    # Its neighbour predicts the same box with a lower score: NMS drops it.
    out["cls_8"][0, cell + 1] = out["obj_8"][0, cell + 1] = 0.92
    out["bbox_8"][0, cell + 1] = [-0.5, 0.25, math.log(2.0), math.log(3.0)]
    # Below the threshold: ignored.
    out["cls_8"][0, 60] = out["obj_8"][0, 60] = 0.8
    # Stride 32 (2x2 grid), cell row 1 col 1: cls above 1 is clipped, score sqrt(1 * 0.9801).
    out["cls_32"][0, 3] = 1.5
    out["obj_32"][0, 3] = 0.9801
    out["bbox_32"][0, 3] = [0.5, 0.5, 0.0, 0.0]
    out["kps_32"][0, 3] = [0.5] * 10

    faces = task.postprocess(out, {"scale": 0.5}, 128, 128).data["detections"]

    assert faces == [
        {"box": [64.0, 64.0, 64.0, 64.0], "score": 0.99, "class_id": 0, "label": "face", "landmarks": [[96.0, 96.0]] * 5},
        {"box": [40.0, 12.0, 32.0, 48.0], "score": 0.95, "class_id": 0, "label": "face", "landmarks": [[48.0, 32.0]] * 5},
    ]
    assert all(type(v) is float for face in faces for v in face["box"])


def test_postprocess_with_no_face_gives_an_empty_list() -> None:
    result = _task().postprocess(_synthetic_outputs(64, 64), {"scale": 1.0}, 64, 64)
    assert result.data == {"detections": []}
    assert result.arrays == {}


def test_postprocess_names_an_output_that_does_not_fit_the_grid() -> None:
    out = _synthetic_outputs(64, 32)
    with pytest.raises(ConfigError, match="cls_8"):
        _task().postprocess(out, {"scale": 1.0}, 64, 64)


def test_check_model_accepts_yunet_loaded_with_dynamic_size(engine) -> None:
    _task().check_model(engine.inputs, engine.outputs)


def _yunet_specs(height: object = "h", width: object = "w") -> tuple[list[TensorSpec], list[TensorSpec]]:
    f32 = np.dtype(np.float32)
    inputs = [TensorSpec("input", f32, (1, 3, height, width))]
    depth = {"cls": 1, "obj": 1, "bbox": 4, "kps": 10}
    outputs = [TensorSpec(n, f32, (1, "n", depth[n.split("_")[0]])) for n in OUTPUT_NAMES]
    return inputs, outputs


def test_check_model_names_a_missing_output() -> None:
    inputs, outputs = _yunet_specs()
    with pytest.raises(ConfigError, match="'kps_32'"):
        _task().check_model(inputs, [o for o in outputs if o.name != "kps_32"])


def test_check_model_names_an_input_that_is_not_yunet() -> None:
    f32 = np.dtype(np.float32)
    _, outputs = _yunet_specs()
    with pytest.raises(ConfigError, match="'input.1'"):
        _task().check_model([TensorSpec("input.1", f32, (1, 3, 320, 320))], outputs)
    with pytest.raises(ConfigError, match=r"'input' float32 \[1, 3, H, W\]"):
        _task().check_model([TensorSpec("input", f32, (1, 1, "h", "w"))], outputs)


def test_check_model_accepts_the_file_as_validate_reads_it() -> None:
    # Read without a session the file says 640x640; the engine will make it dynamic.
    inputs, outputs = describe(YUNET)
    _task().check_model(inputs, outputs)
    _task(input_size=[320, 256]).check_model(inputs, outputs)
    _task(input_size=[640, 640]).check_model(inputs, outputs)


def test_check_model_without_a_rewrite_needs_the_size_of_the_file() -> None:
    inputs, outputs = _yunet_specs(320, 320)
    with pytest.raises(ConfigError, match=r"'input' is 320x320 but model.input_size is \[640, 640\]"):
        _task(input_size=[640, 640]).check_model(inputs, outputs)


def test_params_are_frozen_and_documented() -> None:
    params = FaceDetectionParams()
    assert (params.score_threshold, params.nms_threshold, params.top_k) == (0.9, 0.3, 5000)
    assert params.input_size == "auto"
    with pytest.raises(ValidationError):
        params.top_k = 1  # type: ignore[misc]
    assert all(field.description for field in FaceDetectionParams.model_fields.values())
