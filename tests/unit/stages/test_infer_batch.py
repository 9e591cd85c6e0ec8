"""Infer.process_batch: frames grouped by input shape, one inference per group, results per frame in
input order; frame by frame when the model cannot batch."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from framewire.app.compose.model import _infer, build_task
from framewire.engines.base import Engine
from framewire.engines.onnxruntime import OnnxRuntimeEngine
from framewire.config import validate_config
from framewire.pipeline.errors import EngineError
from framewire.pipeline.frame import Frame, StageContext
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages.infer import Infer
from framewire.stages.tasks.base import Task

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
YUNET = ROOT / "assets/models/yunet/face_detection_yunet_2023mar.onnx"
F32 = np.dtype(np.float32)


class FakePool:
    """What Frame.region needs: one model input per slot."""

    def __init__(self, inputs: Sequence[np.ndarray]) -> None:
        self.inputs = list(inputs)

    def view(self, slot: int, region: str) -> np.ndarray:
        assert region == "input"
        return self.inputs[slot]

    def has(self, region: str) -> bool:
        return region == "input"


class SumEngine(Engine):
    """y[n] = sum of input n (shape [N, 1]); records the batch of each call."""

    backend = "fake"

    def __init__(self, batch_dim: int | str = "batch", bad_batch: bool = False) -> None:
        self.inputs = (TensorSpec("x", F32, (batch_dim, 3, "h", "w")),)
        self.outputs = (TensorSpec("y", F32, (batch_dim, 1)),)
        self.calls: list[int] = []
        self.bad_batch = bad_batch

    def infer(
        self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        x = feeds["x"]
        self.calls.append(len(x))
        y = x.reshape(len(x), -1).sum(axis=1, keepdims=True)
        return {"y": y[:1] if self.bad_batch else y}

    def close(self) -> None:
        pass


class SumTask(Task):
    name = "sum"

    def check_model(self, inputs, outputs) -> None:  # type: ignore[no-untyped-def]
        pass

    @property
    def input_name(self) -> str:
        return "x"

    def input_spec(self, frame_width: int, frame_height: int) -> TensorSpec:
        return TensorSpec("x", F32, (1, 3, frame_height, frame_width))

    def preprocess(self, frame, out):  # type: ignore[no-untyped-def]
        return {}

    def postprocess(self, outputs, meta, frame_width, frame_height):  # type: ignore[no-untyped-def]
        raise NotImplementedError


def _frames(shapes: Sequence[tuple[int, int]]) -> list[Frame]:
    inputs = [np.full((1, 3, h, w), i + 1, dtype=np.float32) for i, (h, w) in enumerate(shapes)]
    pool = FakePool(inputs)
    return [
        Frame(source_id=f"s{i % 2}", seq=i, pts=i, time_s=0.0, width=w, height=h, slot=i, pool=pool)  # type: ignore[arg-type]
        for i, (h, w) in enumerate(shapes)
    ]


def _stage(engine: Engine, max_batch: int = 8) -> Infer:
    from framewire.stages.tasks.base import TaskParams

    stage = Infer(SumTask(TaskParams()), lambda index: engine, max_batch=max_batch, max_delay_ms=2.0)
    stage.start(StageContext("infer", 0))
    return stage


def test_groups_by_shape_and_returns_frames_in_input_order() -> None:
    engine = SumEngine()
    frames = _frames([(4, 6), (8, 8), (4, 6), (8, 8), (4, 6)])
    out = _stage(engine).process_batch(frames)
    assert out == frames and [f.seq for f in out] == [0, 1, 2, 3, 4]
    assert sorted(engine.calls) == [2, 3]  # one inference per input shape
    for i, frame in enumerate(out):
        h, w = (4, 6) if i % 2 == 0 else (8, 8)
        assert frame.tensors["y"].shape == (1, 1)
        assert frame.tensors["y"][0, 0] == (i + 1) * 3 * h * w  # its own result, not a neighbour's


def test_a_group_larger_than_max_batch_is_split() -> None:
    engine = SumEngine()
    _stage(engine, max_batch=2).process_batch(_frames([(4, 4)] * 5))
    assert engine.calls == [2, 2, 1]


def test_an_engine_with_its_own_limit_is_respected() -> None:
    engine = SumEngine()
    engine.max_batch = 3  # type: ignore[attr-defined]  # e.g. a TensorRT profile
    _stage(engine, max_batch=8).process_batch(_frames([(4, 4)] * 5))
    assert engine.calls == [3, 2]


def test_fixed_batch_of_one_runs_frame_by_frame_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    engine = SumEngine(batch_dim=1)
    with caplog.at_level(logging.WARNING, logger="test.infer"):
        stage = _stage(engine, max_batch=4)
    frames = _frames([(4, 4)] * 3)
    assert stage.process_batch(frames) == frames
    assert engine.calls == [1, 1, 1]
    assert [f.tensors["y"][0, 0] for f in frames] == [48.0, 96.0, 144.0]
    assert len([r for r in caplog.records if "frame by frame" in r.getMessage()]) == 1


def test_outputs_without_the_batch_are_an_engine_error() -> None:
    with pytest.raises(EngineError, match="does not keep the frames of a batch apart"):
        _stage(SumEngine(bad_batch=True)).process_batch(_frames([(4, 4)] * 2))


def test_plan_gives_infer_the_batching_config() -> None:
    config = validate_config(
        {
            "sources": [{"id": "a", "uri": "a.mp4"}],
            "model": {"path": str(YUNET), "task": "face_detection"},
            "engine": {"max_batch": 4, "max_delay_ms": 3.5},
            "outputs": [{"kind": "jsonl", "path": "x.jsonl"}],
        }
    )
    stage = _infer(config)
    assert (stage.max_batch, stage.max_delay_ms) == (4, 3.5)


def test_yunet_batched_through_infer_equals_frame_by_frame() -> None:
    config = validate_config(
        {
            "sources": [{"id": "a", "uri": "a.mp4"}],
            "model": {"path": str(YUNET), "task": "face_detection"},
            "outputs": [{"kind": "jsonl", "path": "x.jsonl"}],
        }
    )
    task = build_task(config)
    engine = OnnxRuntimeEngine(str(YUNET), threads=1, dynamic_axes={"input": (0, 2, 3)})
    stage = Infer(task, lambda index: engine, max_batch=4)
    stage.start(StageContext("infer", 0))
    rng = np.random.default_rng(4)
    inputs = [rng.random((1, 3, 64, 96), dtype=np.float32) * 255 for _ in range(3)]
    pool = FakePool(inputs)
    frames = [Frame("s", i, i, 0.0, 96, 64, slot=i, pool=pool) for i in range(3)]  # type: ignore[arg-type]
    batched = [dict(f.tensors) for f in stage.process_batch(frames)]
    assert engine.inputs[0].shape[0] == "batch"
    for frame, got in zip(frames, batched, strict=True):
        (single,) = stage.process(frame)
        for name, value in single.tensors.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)
