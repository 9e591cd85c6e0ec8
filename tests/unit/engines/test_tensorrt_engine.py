"""TensorRTEngine against the fake tensorrt and cuda-python modules: buffers sized at the profile's
max batch, tensor shapes and addresses, copies, trimming, CUDA graphs, the pinned frame pool."""

from __future__ import annotations

import json
import logging
import mmap
from pathlib import Path

import numpy as np
import pytest

from engines.tensorrt import TensorRTEngine
from pipeline.errors import EngineError
from pipeline.tensors import TensorSpec
from tests.unit.engines.gpu_fakes import (
    FakeCudaRuntime,
    FakeTensorRT,
    cudaError_t,
)

pytestmark = pytest.mark.timeout(60)

F32 = np.dtype(np.float32)


def _plan(tmp_path: Path, shape: list[int], profile: list[list[int]] | None) -> Path:
    """A fake serialized engine with one float input `x` (outputs: y = 2x + 1, s = per-frame sum)."""
    path = tmp_path / "model.engine"
    plan = {"fake_trt_plan": 1, "inputs": [{"name": "x", "dtype": 0, "shape": shape, "profile": profile}]}
    path.write_text(json.dumps(plan))
    return path


@pytest.fixture
def dynamic_engine(fake_trt: FakeTensorRT, tmp_path: Path) -> Path:
    return _plan(tmp_path, [-1, 3, -1, -1], [[1, 3, 8, 8], [2, 3, 16, 16], [4, 3, 32, 24]])


def _x(batch: int, height: int = 16, width: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((batch, 3, height, width), dtype=np.float32)


def _context_calls(engine: TensorRTEngine, name: str) -> list[tuple]:
    return [c for c in engine._context.calls if c[0] == name]  # type: ignore[union-attr]


def test_describes_the_engine_with_dynamic_dims_as_none(dynamic_engine: Path) -> None:
    engine = TensorRTEngine(dynamic_engine, model_path="model.onnx")
    assert engine.backend == "tensorrt"
    assert engine.provider == "TensorRT on GPU 0 (NVIDIA Fake GPU)"
    assert engine.inputs == (TensorSpec("x", F32, (None, 3, None, None)),)
    assert engine.outputs == (TensorSpec("y", F32, (None, 3, None, None)), TensorSpec("s", F32, (None,)))
    engine.close()


def test_buffers_are_sized_for_the_profile_max_and_bound_once(
    dynamic_engine: Path, fake_cuda: FakeCudaRuntime
) -> None:
    engine = TensorRTEngine(dynamic_engine)
    largest = 4 * 3 * 32 * 24 * 4  # max batch 4 at 32x24, float32
    device = [c[1] for c in fake_cuda.calls if c[0] == "cudaMalloc"]
    pinned = [c[1] for c in fake_cuda.calls if c[0] == "cudaMallocHost"]
    assert device == pinned == [largest, largest, 4 * 4]  # x, y, s
    addresses = _context_calls(engine, "set_tensor_address")
    assert [name for _, name, _ in addresses] == ["x", "y", "s"]
    assert len({address for _, _, address in addresses}) == 3
    for _ in range(3):
        engine.infer({"x": _x(2)})
    assert len(_context_calls(engine, "set_tensor_address")) == 3  # never again
    engine.close()


def test_infer_returns_outputs_trimmed_to_the_batch(dynamic_engine: Path) -> None:
    engine = TensorRTEngine(dynamic_engine)
    for batch, (height, width) in ((3, (16, 16)), (1, (8, 24)), (4, (32, 24))):
        x = _x(batch, height, width, seed=batch)
        out = engine.infer({"x": x})
        assert list(out) == ["y", "s"]
        np.testing.assert_allclose(out["y"], 2 * x + 1, rtol=1e-6)
        np.testing.assert_allclose(out["s"], x.reshape(batch, -1).sum(axis=1), rtol=1e-4)
    only_s = engine.infer({"x": _x(2)}, ["s"])
    assert list(only_s) == ["s"] and only_s["s"].shape == (2,)
    engine.close()


def test_outputs_are_copies_not_views_of_the_pinned_buffer(dynamic_engine: Path) -> None:
    engine = TensorRTEngine(dynamic_engine)
    first = engine.infer({"x": np.zeros((2, 3, 16, 16), np.float32)})["y"]
    engine.infer({"x": np.ones((2, 3, 16, 16), np.float32)})
    assert float(first.max()) == 1.0  # not overwritten by the second batch
    engine.close()


def test_input_shapes_are_set_only_when_they_change(dynamic_engine: Path) -> None:
    engine = TensorRTEngine(dynamic_engine)
    set_at_start = len(_context_calls(engine, "set_input_shape"))
    assert _context_calls(engine, "set_input_shape") == [("set_input_shape", "x", (4, 3, 32, 24))]
    engine.infer({"x": _x(2)})
    engine.infer({"x": _x(2, seed=1)})
    engine.infer({"x": _x(3)})
    engine.infer({"x": _x(3)})
    shapes = [shape for _, _, shape in _context_calls(engine, "set_input_shape")[set_at_start:]]
    assert shapes == [(2, 3, 16, 16), (3, 3, 16, 16)]
    assert len(_context_calls(engine, "execute_async_v3")) == 4
    engine.close()


def test_copies_run_on_the_worker_stream(dynamic_engine: Path, fake_cuda: FakeCudaRuntime) -> None:
    engine = TensorRTEngine(dynamic_engine)
    stream = int(engine._stream)
    fake_cuda.calls.clear()
    engine.infer({"x": _x(2)}, ["y"])
    names = fake_cuda.names()
    assert names == ["cudaMemcpyAsync", "cudaMemcpyAsync", "cudaStreamSynchronize"]
    h2d, d2h = (c for c in fake_cuda.calls if c[0] == "cudaMemcpyAsync")
    assert h2d[3] == d2h[3] == 2 * 3 * 16 * 16 * 4  # the actual batch, not the max
    assert h2d[5] == d2h[5] == stream
    assert _context_calls(engine, "execute_async_v3")[-1] == ("execute_async_v3", stream)
    engine.close()


def test_a_fixed_batch_engine_pads_and_trims(fake_trt: FakeTensorRT, tmp_path: Path) -> None:
    engine = TensorRTEngine(_plan(tmp_path, [4, 3, 8, 8], None))
    x = _x(3, 8, 8)
    out = engine.infer({"x": x})
    assert out["y"].shape == (3, 3, 8, 8) and out["s"].shape == (3,)
    np.testing.assert_allclose(out["y"], 2 * x + 1, rtol=1e-6)
    engine.close()


def test_feed_errors_name_the_model_and_the_input(dynamic_engine: Path) -> None:
    engine = TensorRTEngine(dynamic_engine, model_path="face.onnx")
    cases = [
        (
            {"x": _x(2).astype(np.float64)},
            r"^model face.onnx: inference failed for input 'x' float64 \(2, 3, 16, 16\): expected float32$",
        ),
        (
            {"x": _x(5)},
            r"input 'x' float32 \(5, 3, 16, 16\): outside the engine's profile "
            r"\[1, 3, 8, 8\]..\[4, 3, 32, 24\]",
        ),
        ({"x": np.zeros((2, 3, 16), np.float32)}, "expected 4 dims"),
        ({}, "input 'x' not given"),
        ({"x": _x(1), "image": _x(1)}, r"no input\(s\) 'image'"),
    ]
    for feeds, message in cases:
        with pytest.raises(EngineError, match=message):
            engine.infer(feeds)
    with pytest.raises(EngineError, match=r"no output\(s\) 'z'"):
        engine.infer({"x": _x(1)}, ["z"])
    engine.close()
    with pytest.raises(EngineError, match="engine is closed"):
        engine.infer({"x": _x(1)})


def test_close_frees_everything(dynamic_engine: Path, fake_cuda: FakeCudaRuntime) -> None:
    engine = TensorRTEngine(dynamic_engine, cuda_graph=True)
    engine.infer({"x": _x(2)})
    engine.close()
    engine.close()
    assert fake_cuda.memory == {} and fake_cuda.host_allocations == set()
    names = fake_cuda.names()
    assert names.count("cudaStreamDestroy") == 1
    assert names.count("cudaGraphExecDestroy") == 1


def test_cuda_graphs_replay_per_shape_with_fresh_inputs(
    dynamic_engine: Path, fake_cuda: FakeCudaRuntime
) -> None:
    engine = TensorRTEngine(dynamic_engine, cuda_graph=True)
    results = []
    for seed, batch in ((0, 2), (1, 2), (2, 3), (3, 2), (4, 3)):
        x = _x(batch, seed=seed)
        out = engine.infer({"x": x})
        np.testing.assert_allclose(out["y"], 2 * x + 1, rtol=1e-6)
        results.append(out)
    # Plain runs for the first batch of each shape (then a capture), graph launches afterwards.
    assert len(_context_calls(engine, "execute_async_v3")) == 4  # 2 runs + 2 captures
    assert fake_cuda.names().count("cudaStreamBeginCapture") == 2
    assert fake_cuda.names().count("cudaGraphLaunch") == 3
    engine.close()


def test_a_failed_capture_falls_back_to_plain_launches(
    dynamic_engine: Path, fake_cuda: FakeCudaRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    fake_cuda.fail["cudaStreamBeginCapture"] = cudaError_t.cudaErrorStreamCaptureUnsupported
    engine = TensorRTEngine(dynamic_engine, cuda_graph=True)
    with caplog.at_level(logging.WARNING, logger="engines.tensorrt"):
        for seed in range(3):
            x = _x(2, seed=seed)
            np.testing.assert_allclose(engine.infer({"x": x})["y"], 2 * x + 1, rtol=1e-6)
    assert fake_cuda.names().count("cudaStreamBeginCapture") == 1  # tried once
    assert "cudaGraphLaunch" not in fake_cuda.names()
    expected = (
        f"model {dynamic_engine}: no CUDA graphs (CUDA cudaStreamBeginCapture failed: "
        "cudaErrorStreamCaptureUnsupported); plain launches instead"
    )
    assert [r.getMessage() for r in caplog.records] == [expected]
    engine.close()


def test_the_frame_pool_is_registered_as_pinned_memory_and_copied_from_directly(
    dynamic_engine: Path, fake_cuda: FakeCudaRuntime
) -> None:
    slot_bytes = 3 * 16 * 16 * 4
    slots = 512  # pools under 1 MiB are not worth registering
    mapping = mmap.mmap(-1, slots * slot_bytes)
    pool = np.frombuffer(mapping, dtype=np.uint8)  # as pipeline.framepool maps /dev/shm
    engine = TensorRTEngine(dynamic_engine)
    view = pool[slot_bytes : 2 * slot_bytes].view(np.float32).reshape(1, 3, 16, 16)
    view[...] = _x(1)
    out = engine.infer({"x": view})
    np.testing.assert_allclose(out["y"], 2 * view + 1, rtol=1e-6)
    assert fake_cuda.pinned == {pool.ctypes.data: slots * slot_bytes}
    h2d = [c for c in fake_cuda.calls if c[0] == "cudaMemcpyAsync"][0]
    assert h2d[2] == view.ctypes.data  # straight from the pool, no staging copy
    engine.infer({"x": pool[:slot_bytes].view(np.float32).reshape(1, 3, 16, 16)})
    assert [c[0] for c in fake_cuda.calls].count("cudaHostRegister") == 1  # once per pool
    engine.infer({"x": _x(1)})  # an ordinary array goes through the pinned staging buffer
    staged = [c for c in fake_cuda.calls if c[0] == "cudaMemcpyAsync"][-3]  # H2D, then D2H y and s
    assert staged[2] in fake_cuda.host_allocations
    engine.close()
    assert fake_cuda.pinned == {}
    del view, pool, out
    mapping.close()


def test_a_corrupt_engine_file_is_a_one_line_error(fake_trt: FakeTensorRT, tmp_path: Path) -> None:
    path = tmp_path / "bad.engine"
    path.write_bytes(b"\x00garbage")
    with pytest.raises(EngineError) as info:
        TensorRTEngine(path)
    assert str(info.value) == (
        f"TensorRT engine {path} cannot be loaded: "
        "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Magic tag does not match)"
    )
    with pytest.raises(EngineError, match="cannot read it"):
        TensorRTEngine(tmp_path / "missing.engine")


def test_a_missing_gpu_id_is_named(dynamic_engine: Path) -> None:
    with pytest.raises(EngineError, match=r"^engine.devices: GPU 1 not found \(this machine has 1: 0-0\)$"):
        TensorRTEngine(dynamic_engine, device=1)


def test_another_thread_makes_the_workers_gpu_current(
    fake_trt: FakeTensorRT, fake_cuda: FakeCudaRuntime, tmp_path: Path
) -> None:
    import threading

    fake = fake_cuda
    fake.gpus = ("NVIDIA A", "NVIDIA B")
    engine = TensorRTEngine(_plan(tmp_path, [-1, 3, 8, 8], [[1, 3, 8, 8]] * 2 + [[2, 3, 8, 8]]), device=1)
    fake.current_device = 0  # as a fresh thread would see it
    worker = threading.Thread(target=engine.infer, args=({"x": _x(1, 8, 8)},))
    worker.start()
    worker.join()
    assert fake.current_device == 1
    engine.close()
