"""The secondary stage on a fake engine: which objects run, crops batched per frame (or one call
each), attributes and embeddings per object, reuse per track with reinfer_every."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from framewire.engines.base import Engine
from framewire.pipeline.frame import Frame, StageContext
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages.cascade import CascadeStage, Secondary
from framewire.stages.composite import CompositeStage
from framewire.stages.tasks import resolve_object_task
from framewire.stages.tasks.base import ModelInfo
from framewire.stages.tasks.classification import Classification

pytestmark = pytest.mark.timeout(60)

F32 = np.dtype(np.float32)


class MeanEngine(Engine):
    """Class scores from the crop's mean red value: dark crops are class 0, bright ones class 1."""

    backend = "fake"

    def __init__(self, batch: Any = "n") -> None:
        self.inputs = (TensorSpec("input", F32, (batch, 3, 8, 8)),)
        self.outputs = (TensorSpec("scores", F32, (batch, 2)),)
        self.batches: list[int] = []

    def infer(
        self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        x = feeds["input"]
        self.batches.append(x.shape[0])
        bright = x[:, 0].mean(axis=(1, 2))
        return {"scores": np.stack([1.0 - bright, bright], axis=1).astype(np.float32)}

    def close(self) -> None:
        pass


class _Pool:
    def __init__(self, image: np.ndarray) -> None:
        self.image = image

    def view(self, slot: int, region: str) -> np.ndarray:
        assert region == "image"
        return self.image

    def has(self, region: str) -> bool:
        return region == "image"


def _classifier(**params: Any) -> Classification:
    info = ModelInfo(
        "cls.onnx", (TensorSpec("input", F32, (1, 3, 8, 8)),), (TensorSpec("scores", F32, (1, 2)),)
    )
    task = resolve_object_task("classification", {"labels": ["dark", "bright"], **params}, "secondary.0")
    assert isinstance(task, Classification)
    task.use_model(info)
    return task


def _stage(engine: MeanEngine, **keys: Any) -> CascadeStage:
    embedding = keys.pop("embedding", False)
    secondary = Secondary("shade", _classifier(embedding=embedding), **keys)
    stage = CascadeStage([secondary], lambda i, index: engine)
    stage.start(StageContext("secondary", 0))
    return stage


def _scene() -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Four objects: bright at x 0 and 100, dark at 200; a small bright one at 300."""
    image = np.zeros((100, 400, 3), dtype=np.uint8)
    image[10:50, 0:40] = image[10:50, 100:140] = image[10:14, 300:304] = 255
    objects = [
        {"box": [0.0, 10.0, 40.0, 40.0], "score": 0.9, "class_id": 0, "label": "sign"},
        {"box": [100.0, 10.0, 40.0, 40.0], "score": 0.5, "class_id": 1, "label": "car"},
        {"box": [200.0, 10.0, 40.0, 40.0], "score": 0.7, "class_id": 0, "label": "sign"},
        {"box": [300.0, 10.0, 4.0, 4.0], "score": 0.8, "class_id": 0, "label": "sign"},
    ]
    return image, objects


def _frame(
    seq: int = 0, objects: list[dict[str, Any]] | None = None, image: np.ndarray | None = None
) -> Frame:
    scene_image, scene_objects = _scene()
    frame = Frame("cam", seq, seq, 0.0, 400, 100, slot=0, pool=_Pool(scene_image if image is None else image))  # type: ignore[arg-type]
    frame.result = {"detections": scene_objects if objects is None else objects}
    return frame


def _shades(frame: Frame) -> list[Any]:
    assert frame.result is not None
    return [d.get("attributes", {}).get("shade", {}).get("label") for d in frame.result["detections"]]


def test_every_object_gets_its_attribute_in_one_inference() -> None:
    engine = MeanEngine()
    stage = _stage(engine)
    frame = _frame()
    assert list(stage.process(frame)) == [frame]
    assert _shades(frame) == ["bright", "bright", "dark", "bright"]
    assert engine.batches == [4] and stage.inferences == 1


def test_one_inference_per_object_when_asked_or_when_the_model_cannot_batch() -> None:
    engine = MeanEngine()
    list(_stage(engine, max_batch=1).process(_frame()))
    assert engine.batches == [1, 1, 1, 1]
    fixed = MeanEngine(batch=1)
    list(_stage(fixed).process(_frame()))
    assert fixed.batches == [1, 1, 1, 1]


def test_objects_are_chosen_by_class_size_and_best_scores() -> None:
    engine = MeanEngine()
    frame = _frame()
    list(_stage(engine, classes=("sign",), min_size=10, max_objects=1).process(frame))
    assert _shades(frame) == ["bright", None, None, None]  # signs of 10 px and more, the best one
    frame = _frame()
    list(_stage(engine, max_objects=2).process(frame))
    assert _shades(frame) == ["bright", None, None, "bright"]  # scores 0.9 and 0.8


def test_embeddings_are_an_array_with_a_row_per_object_and_survive_the_composite() -> None:
    engine = MeanEngine()
    frame = _frame()
    list(_stage(engine, embedding=True, classes=("sign",)).process(frame))
    assert frame.result is not None
    rows = [d.get("attributes", {}).get("shade", {}).get("embedding") for d in frame.result["detections"]]
    assert rows == [0, None, 1, 2]
    array = frame.tensors["embeddings.shade"]
    assert array.shape == (3, 2) and array.dtype == np.float32
    np.testing.assert_allclose(array[1], [1.0, 0.0])  # the dark sign, unit length
    frame.tensors["alpha"] = np.zeros((4, 4), np.uint8)
    list(CompositeStage([]).process(frame))
    assert set(frame.tensors) == {"embeddings.shade"}


def test_reinfer_every_reuses_a_tracks_result_until_it_is_due() -> None:
    engine = MeanEngine()
    stage = _stage(engine, reinfer_every=3)
    assert CascadeStage.declare([3]).ordered and not CascadeStage.declare([0, 0]).ordered
    one = [{"box": [0.0, 10.0, 40.0, 40.0], "score": 0.9, "class_id": 0, "label": "sign", "track_id": 7}]
    dark = np.zeros((100, 400, 3), dtype=np.uint8)
    bright = np.full((100, 400, 3), 255, dtype=np.uint8)
    seen = []
    for seq, image in enumerate([bright, dark, dark, dark, dark]):
        frame = _frame(seq, [dict(one[0])], image)
        list(stage.process(frame))
        seen.append(_shades(frame)[0])
    assert seen == ["bright", "bright", "bright", "dark", "dark"]  # run on frames 0 and 3 only
    assert engine.batches == [1, 1]
    list(stage.flush("cam"))
    frame = _frame(5, [dict(one[0])], bright)
    list(stage.process(frame))
    assert _shades(frame) == ["bright"] and engine.batches == [1, 1, 1]


def test_frames_without_detections_run_nothing() -> None:
    engine = MeanEngine()
    frame = _frame(0, [])
    list(_stage(engine).process(frame))
    assert engine.batches == [] and frame.result == {"detections": []}
