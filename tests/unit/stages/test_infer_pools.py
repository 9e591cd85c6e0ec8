"""Infer.pool_added / pool_removed: a source's frame pool is handed to the engine when the worker
attaches it and taken back before it is unmapped; a TensorRT engine (against the GPU fakes) pins it
then, so frames are copied from it directly and the pool closes cleanly afterwards."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from framewire.engines.base import Engine
from framewire.pipeline.frame import Frame, Stage, StageContext
from framewire.pipeline.wire.framepool import FramePool, PoolLayout
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages.infer import Infer
from tests.unit.engines.gpu_fakes import FakeCudaRuntime, FakeTensorRT, fake_cuda, fake_trt  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(60)

F32 = np.dtype(np.float32)


class _Task:
    """The little of a Task that Infer.start needs."""

    input_name = "x"
    output_names = ("y",)

    def check_model(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        pass

    def feeds(self, frame: Frame) -> dict[str, np.ndarray]:
        return {self.input_name: frame.region("input")}


class CpuEngine(Engine):
    """An engine that keeps the Engine defaults: nothing to pin."""

    backend = "fake"

    def __init__(self) -> None:
        self.inputs = (TensorSpec("x", F32, (1, 3, 16, 16)),)
        self.outputs = (TensorSpec("y", F32, (1, 3, 16, 16)),)

    def infer(
        self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        return {"y": np.asarray(feeds["x"]) * 2 + 1}

    def close(self) -> None:
        pass


def _start(stage: Infer) -> None:
    stage.start(StageContext(stage="infer", index=0))


@pytest.fixture
def pool() -> Iterator[FramePool]:
    layout = PoolLayout.plan(f"framewire-test-{os.getpid()}-infer", 4, {"input": ((1, 3, 16, 16), "float32")})
    made = FramePool.create(layout)
    yield made
    made.close()


def test_an_engine_without_pinning_ignores_pools(pool: FramePool) -> None:
    stage = Infer(_Task(), lambda index: CpuEngine())  # type: ignore[arg-type]
    stage.pool_added(pool)  # before start: no engine yet, nothing to do
    _start(stage)
    stage.pool_added(pool)
    stage.pool_removed(pool)
    stage.stop()
    pool.close()
    assert pool.segment.closed


def test_a_tensorrt_engine_pins_the_pool_when_added_and_lets_it_go_when_removed(
    fake_trt: FakeTensorRT, fake_cuda: FakeCudaRuntime, pool: FramePool, tmp_path: Path
) -> None:
    from framewire.engines.tensorrt import TensorRTEngine

    plan = tmp_path / "model.engine"
    plan.write_text(
        json.dumps(
            {
                "fake_trt_plan": 1,
                "inputs": [{"name": "x", "dtype": 0, "shape": [1, 3, 16, 16], "profile": None}],
            }
        )
    )
    stage = Infer(_Task(), lambda index: TensorRTEngine(plan))  # type: ignore[arg-type]
    _start(stage)
    stage.pool_added(pool)
    assert fake_cuda.pinned == {pool.memory.ctypes.data: pool.layout.total_bytes}
    frame_input = pool.view(2, "input")
    frame_input[...] = 1.0
    assert stage.engine is not None
    out = stage.engine.infer({"x": frame_input}, ["y"])
    np.testing.assert_array_equal(out["y"], np.full((1, 3, 16, 16), 3.0, np.float32))
    h2d = next(c for c in fake_cuda.calls if c[0] == "cudaMemcpyAsync")
    assert h2d[2] == frame_input.ctypes.data  # DMA from the pool, no staging copy
    del frame_input
    stage.pool_removed(pool)
    assert fake_cuda.pinned == {}
    pool.close()
    assert pool.segment.closed
    stage.stop()


def test_a_fused_stage_forwards_pools_to_its_infer_member(pool: FramePool) -> None:
    from framewire.stages.fused import Fused

    seen: list[tuple[str, str]] = []

    class Recording(CpuEngine):
        def pin_pool(self, pool: FramePool) -> bool:
            seen.append(("pin", pool.layout.name))
            return True

        def unpin_pool(self, pool: FramePool) -> None:
            seen.append(("unpin", pool.layout.name))

    class Other(Stage):  # a member that keeps Stage's no-op pool hooks (preprocess, postprocess)
        def process(self, frame: Frame) -> Iterable[Frame]:
            yield frame

    fused = Fused([("preprocess", Other()), ("infer", Infer(_Task(), lambda index: Recording()))])  # type: ignore[arg-type]
    fused.start(StageContext(stage="infer", index=0))
    fused.pool_added(pool)
    fused.pool_removed(pool)
    assert seen == [("pin", pool.layout.name), ("unpin", pool.layout.name)]
    fused.stop()


def test_a_batch_of_pool_frames_is_stacked_straight_into_the_pinned_staging_buffer(
    fake_trt: FakeTensorRT, fake_cuda: FakeCudaRuntime, pool: FramePool, tmp_path: Path
) -> None:
    """Frames of several sources batched for TensorRT: one copy of the batch (into the staging
    buffer), where np.concatenate and then the engine's staging copy made two."""
    from framewire.engines.tensorrt import TensorRTEngine

    plan = tmp_path / "model.engine"
    profile = [[1, 3, 16, 16], [2, 3, 16, 16], [4, 3, 16, 16]]
    inputs = [{"name": "x", "dtype": 0, "shape": [-1, 3, 16, 16], "profile": profile}]
    plan.write_text(json.dumps({"fake_trt_plan": 1, "inputs": inputs}))
    seen: list[np.ndarray] = []

    class Watched(TensorRTEngine):
        def infer(
            self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None
        ) -> dict[str, np.ndarray]:
            seen.append(feeds["x"])
            return super().infer(feeds, output_names)

    stage = Infer(_Task(), lambda index: Watched(plan), max_batch=4)  # type: ignore[arg-type]
    _start(stage)
    stage.pool_added(pool)
    frames = []
    for slot in range(3):
        pool.view(slot, "input")[...] = slot + 1.0
        frame = Frame(
            source_id=f"s{slot}", seq=0, pts=0, time_s=0.0, width=16, height=16, slot=slot, pool=pool
        )
        frames.append(frame)
    stage.process_batch(frames)
    assert [x.shape[0] for x in seen] == [3]  # one inference for the three
    staging = [t.host for t in stage.engine._tensors if t.is_input][0]  # type: ignore[union-attr]
    assert seen[0].ctypes.data == staging.ptr  # stacked in place, not in an array of its own
    for slot, frame in enumerate(frames):
        expected = np.full((1, 3, 16, 16), 2 * (slot + 1) + 1.0, np.float32)
        np.testing.assert_array_equal(frame.tensors["y"], expected)
    del seen[:]
    stage.pool_removed(pool)
    stage.stop()
