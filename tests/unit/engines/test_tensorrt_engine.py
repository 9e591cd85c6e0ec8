"""TensorRTEngine against the fake tensorrt and cuda-python modules: buffers sized at the profile's
max batch, tensor shapes and addresses, copies, trimming, CUDA graphs, the pinned frame pool."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from framewire.engines.tensorrt import TensorRTEngine
from framewire.pipeline.errors import EngineError
from framewire.pipeline.wire.framepool import FramePool, PoolLayout
from framewire.pipeline.wire.tensors import TensorSpec
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
    # One wait a batch, on a blocking event recorded on the worker's stream: the worker sleeps, not spins.
    assert names == ["cudaMemcpyAsync", "cudaMemcpyAsync", "cudaEventRecord", "cudaEventSynchronize"]
    assert [c for c in fake_cuda.calls if c[0] == "cudaEventRecord"][0][2] == stream
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
    with caplog.at_level(logging.WARNING, logger="framewire.engines.tensorrt"):
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


def _pool(name: str, slots: int = 4) -> FramePool:
    """A real frame pool in /dev/shm whose "input" region holds one [1, 3, 16, 16] float frame."""
    layout = PoolLayout.plan(
        f"framewire-test-{os.getpid()}-{name}", slots, {"input": ((1, 3, 16, 16), "float32")}
    )
    return FramePool.create(layout)


def test_a_frame_pool_is_pinned_when_added_and_copied_from_directly(
    dynamic_engine: Path, fake_cuda: FakeCudaRuntime
) -> None:
    pool = _pool("a")
    engine = TensorRTEngine(dynamic_engine)
    assert engine.pin_pool(pool) is True
    # Registered at once, before any frame: no frame pays for it.
    assert fake_cuda.pinned == {pool.memory.ctypes.data: pool.layout.total_bytes}
    view = pool.view(1, "input")
    view[...] = _x(1)
    out = engine.infer({"x": view})
    np.testing.assert_allclose(out["y"], 2 * view + 1, rtol=1e-6)
    h2d = [c for c in fake_cuda.calls if c[0] == "cudaMemcpyAsync"][0]
    assert h2d[2] == view.ctypes.data  # straight from the pool, no staging copy
    assert engine.pin_pool(pool) is True  # again: nothing more
    assert fake_cuda.names().count("cudaHostRegister") == 1
    engine.infer({"x": _x(1)})  # an ordinary array goes through the pinned staging buffer
    staged = [c for c in fake_cuda.calls if c[0] == "cudaMemcpyAsync"][-3]  # H2D, then D2H y and s
    assert staged[2] in fake_cuda.host_allocations
    del view, out
    engine.unpin_pool(pool)
    assert fake_cuda.pinned == {}
    pool.close()
    # Unregistered first, the engine holds no view: the mapping really closes (before, a
    # registration kept the array alive and close() swallowed a BufferError).
    assert pool.segment.closed
    engine.close()


def test_every_pool_is_pinned_not_only_the_first_eight(
    dynamic_engine: Path, fake_cuda: FakeCudaRuntime
) -> None:
    pools = [_pool(f"n{i}") for i in range(10)]
    engine = TensorRTEngine(dynamic_engine)
    try:
        assert all(engine.pin_pool(pool) for pool in pools)
        assert len(fake_cuda.pinned) == 10
        last = pools[-1].view(0, "input")
        engine.infer({"x": last})
        h2d = [c for c in fake_cuda.calls if c[0] == "cudaMemcpyAsync"][0]
        assert h2d[2] == last.ctypes.data
        del last
    finally:
        engine.close()  # unregisters what is left
        assert fake_cuda.pinned == {}
        for pool in pools:
            pool.close()
            assert pool.segment.closed


def test_a_pool_that_cannot_be_pinned_is_one_warning_and_staging_copies(
    dynamic_engine: Path, fake_cuda: FakeCudaRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    pool = _pool("refused")
    engine = TensorRTEngine(dynamic_engine)
    fake_cuda.fail["cudaHostRegister"] = cudaError_t.cudaErrorMemoryAllocation
    with caplog.at_level(logging.WARNING, logger="framewire.engines.tensorrt"):
        assert engine.pin_pool(pool) is False
    assert [r.getMessage() for r in caplog.records] == [
        f"frame pool {pool.layout.name} (0 MiB) not registered as pinned memory (CUDA cudaHostRegister "
        "failed: cudaErrorMemoryAllocation); its frames are copied through the staging buffer"
    ]
    view = pool.view(0, "input")
    view[...] = _x(1)
    np.testing.assert_allclose(engine.infer({"x": view})["y"], 2 * view + 1, rtol=1e-6)
    staged = [c for c in fake_cuda.calls if c[0] == "cudaMemcpyAsync"][0]
    assert staged[2] in fake_cuda.host_allocations
    del view
    engine.unpin_pool(pool)  # harmless for a pool that was never pinned
    engine.close()
    pool.close()


def test_overlapping_registrations_are_refused_by_cuda(fake_cuda: FakeCudaRuntime) -> None:
    from framewire.engines import cuda

    pool = _pool("overlap")
    whole = cuda.HostRegistration(pool.memory)
    with pytest.raises(EngineError, match="cudaErrorHostMemoryAlreadyRegistered"):
        cuda.HostRegistration(pool.memory[4096:])
    whole.close()
    pool.close()


def test_max_batch_is_the_profiles_largest_batch(fake_trt: FakeTensorRT, tmp_path: Path) -> None:
    dynamic = TensorRTEngine(_plan(tmp_path, [-1, 3, 8, 8], [[1, 3, 8, 8], [2, 3, 8, 8], [6, 3, 8, 8]]))
    assert dynamic.max_batch == 6
    dynamic.close()
    fixed = TensorRTEngine(_plan(tmp_path, [1, 3, 8, 8], None))
    assert fixed.max_batch == 1
    fixed.close()


def test_no_usable_cuda_is_one_engine_error_not_a_pybind_type_error(
    fake_trt: FakeTensorRT, fake_cuda: FakeCudaRuntime, dynamic_engine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from framewire.engines import cuda

    monkeypatch.setattr(cuda, "require_device", lambda device: "NVIDIA Fake GPU")
    monkeypatch.setattr(cuda, "set_device", lambda device: None)
    fake_cuda.gpus = ()  # TensorRT's createInferRuntime returns NULL: the bindings raise TypeError
    with pytest.raises(EngineError) as info:
        TensorRTEngine(dynamic_engine)
    assert str(info.value) == (
        "TensorRT cannot create a runtime on GPU 0 (CUDA driver or GPU unusable?): "
        "pybind11::init(): factory function returned nullptr"
    )


def test_one_tensorrt_logger_per_process_so_errors_are_heard(fake_trt: FakeTensorRT, tmp_path: Path) -> None:
    good = TensorRTEngine(_plan(tmp_path, [1, 3, 8, 8], None))
    bad = tmp_path / "bad.engine"
    bad.write_bytes(b"junk")
    # TensorRT sends the second engine's error to the first logger it was given; with one logger
    # per process that is the one the message is read from.
    with pytest.raises(EngineError, match="Magic tag does not match"):
        TensorRTEngine(bad)
    good.close()


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


def test_a_batch_stacked_in_the_input_buffer_is_copied_from_there_without_a_staging_copy(
    dynamic_engine: Path, fake_cuda: FakeCudaRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = TensorRTEngine(dynamic_engine)
    buffer = engine.input_buffer("x", (3, 3, 16, 16), F32)
    assert buffer is not None and buffer.shape == (3, 3, 16, 16)
    assert buffer.ctypes.data in fake_cuda.host_allocations  # the pinned staging buffer
    frames = [_x(1, seed=i) for i in range(3)]
    stacked = np.concatenate(frames, axis=0, out=buffer)
    copies: list[object] = []
    real_copyto = np.copyto

    def copyto(dst: np.ndarray, src: np.ndarray, **kw: object) -> None:
        copies.append(src)
        real_copyto(dst, src, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(np, "copyto", copyto)
    fake_cuda.calls.clear()
    out = engine.infer({"x": stacked}, ["y"])
    assert copies == []  # no staging copy of its own
    h2d = next(c for c in fake_cuda.calls if c[0] == "cudaMemcpyAsync")
    assert h2d[2] == buffer.ctypes.data and h2d[3] == stacked.nbytes
    np.testing.assert_allclose(out["y"], 2 * np.concatenate(frames) + 1, rtol=1e-6)
    # What the buffer cannot hold, or is not for, is None: the caller stacks as before.
    assert engine.input_buffer("x", (5, 3, 16, 16), F32) is None  # over the profile's batch of 4
    assert engine.input_buffer("x", (2, 3, 16), F32) is None
    assert engine.input_buffer("x", (2, 3, 16, 16), np.dtype(np.float16)) is None
    assert engine.input_buffer("y", (2, 3, 16, 16), F32) is None  # an output
    engine.close()
    assert engine.input_buffer("x", (2, 3, 16, 16), F32) is None
