"""Text detection (DB post-processing), text recognition (crops, batches, CTC decoding) and
classification (top-k, softmax, embeddings), on synthetic maps and outputs."""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
import pytest

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages import detections
from framewire.stages.tasks import resolve_object_task, resolve_task
from framewire.stages.tasks.base import ModelInfo
from framewire.stages.tasks.classification import Classification
from framewire.stages.tasks.text_detection import TextDetection
from framewire.stages.tasks.text_recognition import TextRecognition

pytestmark = pytest.mark.timeout(60)

F32 = np.dtype(np.float32)
DET_INFO = ModelInfo(
    "det.onnx", (TensorSpec("x", F32, ("n", 3, "h", "w")),), (TensorSpec("map", F32, ("n", 1, "h", "w")),)
)


def _detector(**params: Any) -> TextDetection:
    task = resolve_task("text_detection", params)
    assert isinstance(task, TextDetection)
    task.use_model(DET_INFO)
    return task


def test_input_size_follows_rapidocr_resize() -> None:
    task = _detector()
    assert task.input_spec(640, 360).shape == (1, 3, 736, 1312)  # short side to 736: 1308 -> 1312
    assert task.input_spec(1280, 800).shape == (1, 3, 800, 1280)  # already above: kept
    assert _detector(limit="max", limit_side=640).input_spec(1280, 720).shape == (1, 3, 352, 640)


def test_db_boxes_from_a_probability_map() -> None:
    probability = np.zeros((64, 128), dtype=np.float32)
    probability[10:30, 20:60] = 0.9  # a confident text line
    probability[40:52, 80:120] = 0.4  # above the pixel threshold, below the box threshold: dropped
    found = _detector().postprocess({"map": probability[None, None]}, {}, 256, 128).data[detections.KEY]
    assert len(found) == 1
    box = found[0]
    # The score is the mean inside the box, whose edge takes in the dilated (zero) border.
    assert box["label"] == "text" and 0.8 < box["score"] < 0.9
    # The map's region (x 20-60, y 10-30 after dilation) grown by area * 1.6 / perimeter = 10.7 map px
    # on every side, then doubled into frame pixels and clipped.
    x, y, w, h = box["box"]
    assert abs(x - 19) <= 1 and y == 0 and abs(x + w - 141) <= 1 and abs(y + h - 81) <= 1
    assert len(box["quad"]) == 4 and box["quad"][0] == [int(x), int(y)]


def test_db_boxes_come_in_reading_order() -> None:
    probability = np.zeros((64, 128), dtype=np.float32)
    probability[30:40, 70:100] = 0.9  # second line
    probability[10:20, 60:100] = 0.9  # first line, right
    probability[11:21, 5:40] = 0.9  # first line, left, one pixel lower
    found = (
        _detector(unclip_ratio=0.5)
        .postprocess({"map": probability[None, None]}, {}, 128, 64)
        .data[detections.KEY]
    )
    assert [round(d["box"][0] / 10) for d in found] == [0, 6, 7]


def _recogniser(characters: str = "a\nb\nc", classes: int = 5, **params: Any) -> TextRecognition:
    info = ModelInfo(
        "rec.onnx",
        (TensorSpec("x", F32, ("n", 3, 48, "w")),),
        (TensorSpec("y", F32, ("n", "t", classes)),),
        {"character": characters},
    )
    task = resolve_object_task("text_recognition", params, "secondary.0")
    assert isinstance(task, TextRecognition)
    task.use_model(info)
    return task


def _steps(indices: list[int], classes: int = 5, probability: float = 0.9) -> np.ndarray:
    out = np.full((len(indices), classes), (1 - probability) / (classes - 1), dtype=np.float32)
    out[np.arange(len(indices)), indices] = probability
    return out


def test_ctc_decoding_merges_repeats_and_drops_blanks() -> None:
    task = _recogniser()
    # blank 0, a 1, b 2, c 3, space 4: "a a _ b _ b space c" -> "abb c"
    preds = np.stack(
        [_steps([1, 1, 0, 2, 0, 2, 4, 3]), _steps([0, 0, 0, 0, 0, 0, 0, 0]), _steps([3] * 8, probability=0.4)]
    )
    results = task.decode({"y": preds}, 3)
    assert results[0].attributes == {"text": "abb c", "score": 0.9}
    assert results[1].attributes is None  # nothing read
    assert results[2].attributes is None  # "c" at 0.4, under min_score 0.5
    assert _recogniser(min_score=0.3).decode({"y": preds}, 3)[2].attributes == {"text": "c", "score": 0.4}


def test_characters_that_do_not_fit_the_output_are_refused() -> None:
    with pytest.raises(ConfigError) as info:
        _recogniser("a\nb", classes=6)
    assert str(info.value) == (
        "secondary.0.characters: 2 characters (model metadata 'character') but the model's output 'y' "
        "has 6 classes (characters + blank + space)"
    )


def test_crops_are_batched_by_width_and_zero_padded() -> None:
    task = _recogniser()
    crops = [np.full((20, w, 3), 255, dtype=np.uint8) for w in (400, 30, 60)]  # aspects 20, 1.5, 3
    batches = task.batches(crops, 2)
    assert [b.indices for b in batches] == [[1, 2], [0]]
    narrow, wide = batches
    assert narrow.feeds.shape == (2, 3, 48, 320)  # at least 320 wide
    assert wide.feeds.shape == (1, 3, 48, 960)  # 48 * 20
    assert (narrow.feeds[0, :, :, :72] == 1.0).all() and (
        narrow.feeds[0, :, :, 72:] == 0.0
    ).all()  # ceil(48*1.5)


def test_text_is_cut_along_its_quad_and_turned_upright() -> None:
    task = _recogniser()
    image = np.zeros((100, 200, 3), dtype=np.uint8)
    quad = [[50, 20], [150, 20], [150, 50], [50, 50]]
    image[20:50, 50:150] = 200
    crop = task.crop(image, {"box": [50, 20, 100, 30], "quad": quad}, 0.0)
    assert crop is not None and crop.shape == (30, 100, 3) and crop.mean() > 190
    tall = task.crop(image, {"box": [10, 10, 20, 60], "quad": [[10, 10], [30, 10], [30, 70], [10, 70]]}, 0.0)
    assert tall is not None and tall.shape[:2] == (20, 60)  # 60 tall, 20 wide: rotated
    plain = task.crop(image, {"box": [50.0, 20.0, 100.0, 30.0]}, 0.1)
    assert plain is not None and plain.shape[:2] == (36, 120)


def _classifier(classes: int = 3, **params: Any) -> Classification:
    info = ModelInfo(
        "cls.onnx", (TensorSpec("input", F32, (1, 3, 8, 8)),), (TensorSpec("logits", F32, (1, classes)),)
    )
    task = resolve_task("classification", params)
    assert isinstance(task, Classification)
    task.use_model(info)
    return task


def test_classification_top_k_with_softmax_when_given_logits() -> None:
    task = _classifier(labels=("cat", "dog", "fox"), top_k=2)
    result = task.postprocess({"logits": np.array([[1.0, 3.0, 2.0]], np.float32)}, {}, 64, 64).data
    expected = np.exp([3.0, 2.0]) / np.exp([1.0, 2.0, 3.0]).sum()
    assert [c["label"] for c in result["classes"]] == ["dog", "fox"]
    assert [c["score"] for c in result["classes"]] == [round(float(v), 4) for v in expected]
    probabilities = _classifier().postprocess({"logits": np.array([[0.2, 0.5, 0.3]], np.float32)}, {}, 8, 8)
    assert probabilities.data["classes"] == [{"class_id": 1, "label": "1", "score": 0.5}]  # no softmax again


def test_classification_on_objects_and_as_embeddings() -> None:
    task = _classifier(labels=("a", "b", "c"))
    crops = [np.zeros((10, 20, 3), np.uint8), np.zeros((30, 5, 3), np.uint8), np.zeros((4, 4, 3), np.uint8)]
    batches = task.batches(crops, 2)
    assert [b.indices for b in batches] == [[0, 1], [2]] and batches[0].feeds.shape == (2, 3, 8, 8)
    results = task.decode({"logits": np.array([[0.0, 5.0, 0.0], [9.0, 0.0, 0.0]], np.float32)}, 2)
    assert [r.attributes["label"] for r in results] == ["b", "a"]
    embed = _classifier(embedding=True).decode({"logits": np.array([[3.0, 0.0, 4.0]], np.float32)}, 1)[0]
    assert embed.attributes == {"size": 3}
    np.testing.assert_allclose(embed.embedding, [0.6, 0.0, 0.8])


def test_classification_labels_must_match_the_classes() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^model.labels: 2 labels \(config\) but the model's output 'logits' has 3 classes$",
    ):
        _classifier(labels=("a", "b"))


def test_blank_frames_give_no_text_box() -> None:
    frame = np.full((64, 128, 3), 180, dtype=np.uint8)
    cv2.putText(frame, "", (0, 0), cv2.FONT_HERSHEY_SIMPLEX, 1.0, (0, 0, 0))
    task = _detector()
    assert task.postprocess({"map": np.zeros((1, 1, 64, 128), np.float32)}, {}, 128, 64).data == {
        "detections": []
    }
