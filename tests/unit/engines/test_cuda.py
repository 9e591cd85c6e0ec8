"""framewire.engines.cuda against a fake cuda-python: error tuples, devices without a driver, memory, graphs."""

from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest

from framewire.engines import cuda
from framewire.pipeline.errors import EngineError
from tests.unit.engines.gpu_fakes import (
    FakeCudaRuntime,
    cudaError_t,
    hide_module,
    install_cuda,
)

pytestmark = pytest.mark.timeout(60)


def test_check_returns_values_and_names_the_cuda_error(fake_cuda: FakeCudaRuntime) -> None:
    assert cuda.check((cudaError_t.cudaSuccess,), "cudaFree") is None
    assert cuda.check((cudaError_t.cudaSuccess, 42), "cudaMalloc") == 42
    assert cuda.check((cudaError_t.cudaSuccess, 1, 2), "x") == (1, 2)
    with pytest.raises(EngineError) as info:
        cuda.check((cudaError_t.cudaErrorMemoryAllocation, 0), "cudaMalloc(1024)")
    assert str(info.value) == "CUDA cudaMalloc(1024) failed: cudaErrorMemoryAllocation"


def test_a_failing_call_is_an_engine_error(fake_cuda: FakeCudaRuntime) -> None:
    fake_cuda.fail["cudaMalloc"] = cudaError_t.cudaErrorMemoryAllocation
    with pytest.raises(EngineError, match="^CUDA cudaMalloc failed: cudaErrorMemoryAllocation$"):
        cuda.DeviceBuffer(1 << 20)


@pytest.mark.parametrize(
    ("runtime", "reason"),
    [
        (FakeCudaRuntime(no_driver="raise"), "no CUDA driver / GPU found (Failed to dlopen libcuda.so.1)"),
        (
            FakeCudaRuntime(no_driver="return"),
            "no CUDA driver / GPU found (cudaGetDeviceCount: cudaErrorInsufficientDriver)",
        ),
        (FakeCudaRuntime(gpus=()), "no CUDA driver / GPU found (cudaGetDeviceCount: cudaErrorNoDevice)"),
    ],
    ids=["cuda-python-13-raises", "older-returns-error", "driver-but-no-gpu"],
)
def test_no_gpu_is_zero_devices_never_an_exception(
    monkeypatch: pytest.MonkeyPatch, runtime: FakeCudaRuntime, reason: str
) -> None:
    install_cuda(monkeypatch, runtime)
    assert cuda.gpu_status() == (0, reason)
    assert cuda.device_count() == 0
    with pytest.raises(EngineError) as info:
        cuda.require_device(0)
    assert str(info.value) == reason


def test_without_cuda_python_the_driver_library_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    hide_module(monkeypatch, "cuda", "cuda.bindings", "cuda.cudart")

    def no_libcuda(name: str, *args: object, **kwargs: object) -> None:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_libcuda)
    assert cuda.gpu_status() == (0, "no CUDA driver / GPU found (libcuda.so.1 cannot be loaded)")
    with pytest.raises(
        EngineError, match=r"^the cuda-python package is not installed \(install the gpu extra"
    ):
        cuda.runtime()


def test_the_older_cudart_module_is_used_when_bindings_are_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = FakeCudaRuntime(gpus=("NVIDIA A10", "NVIDIA A10"))
    install_cuda(monkeypatch, runtime, legacy=True)
    assert cuda.runtime() is runtime
    assert cuda.gpu_status() == (2, "")
    assert cuda.require_device(1) == "NVIDIA A10"


def test_device_names_and_missing_device_ids(fake_cuda: FakeCudaRuntime) -> None:
    assert cuda.require_device(0) == "NVIDIA Fake GPU"  # the char[] is cut at its NUL
    with pytest.raises(EngineError) as info:
        cuda.require_device(2)
    assert str(info.value) == "engine.devices: GPU 2 not found (this machine has 1: 0-0)"
    cuda.set_device(0)
    assert ("cudaSetDevice", 0) in fake_cuda.calls


def test_pinned_and_device_buffers_copy_both_ways_and_free(fake_cuda: FakeCudaRuntime) -> None:
    host = cuda.HostBuffer(4 * 6)
    device = cuda.DeviceBuffer(4 * 6)
    stream = cuda.Stream()
    values = host.view(np.float32, (2, 3))
    values[...] = np.arange(6, dtype=np.float32).reshape(2, 3)
    cuda.memcpy_htod_async(device.ptr, host.ptr, 24, stream)
    stream.synchronize()  # the copy runs on the stream: the host buffer may change only after it
    values[...] = 0
    cuda.memcpy_dtoh_async(host.ptr, device.ptr, 24, stream)
    stream.synchronize()
    np.testing.assert_array_equal(values, np.arange(6).reshape(2, 3))
    with pytest.raises(EngineError, match="cannot hold"):
        host.view(np.float32, (3, 3))
    for resource in (host, device, stream):
        resource.close()
    host.close()  # twice is harmless
    assert fake_cuda.memory == {} and fake_cuda.host_allocations == set()
    assert fake_cuda.names()[-4:] == ["cudaFreeHost", "cudaFree", "cudaEventDestroy", "cudaStreamDestroy"]
    assert fake_cuda.events == {}
    kinds = [c[4] for c in fake_cuda.calls if c[0] == "cudaMemcpyAsync"]
    assert kinds == [
        fake_cuda.cudaMemcpyKind.cudaMemcpyHostToDevice,
        fake_cuda.cudaMemcpyKind.cudaMemcpyDeviceToHost,
    ]


def test_synchronize_waits_on_a_blocking_event_not_a_spin(fake_cuda: FakeCudaRuntime) -> None:
    stream = cuda.Stream()
    assert not stream.spins
    create = [c for c in fake_cuda.calls if c[0] == "cudaEventCreateWithFlags"]
    assert create == [("cudaEventCreateWithFlags", fake_cuda.cudaEventBlockingSync | fake_cuda.cudaEventDisableTiming)]
    ran: list[int] = []
    fake_cuda.enqueue(int(stream), lambda: ran.append(1))
    fake_cuda.calls.clear()
    stream.synchronize()
    assert ran == [1]
    event = fake_cuda.calls[0][1]
    assert fake_cuda.calls == [("cudaEventRecord", event, int(stream)), ("cudaEventSynchronize", event)]
    stream.close()

    spinning = cuda.Stream(spin=True)
    assert spinning.spins
    fake_cuda.enqueue(int(spinning), lambda: ran.append(2))
    fake_cuda.calls.clear()
    spinning.synchronize()
    assert ran == [1, 2] and fake_cuda.names() == ["cudaStreamSynchronize"]
    spinning.close()


def test_an_event_waits_for_the_work_before_its_record_only(fake_cuda: FakeCudaRuntime) -> None:
    """The fake's events as CUDA's: a wait covers what was queued before the record, not after."""
    rt = fake_cuda
    _, handle = rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking)
    _, event = rt.cudaEventCreateWithFlags(rt.cudaEventBlockingSync)
    ran: list[str] = []
    rt.enqueue(handle, lambda: ran.append("before"))
    assert rt.cudaEventRecord(event, handle) == (rt.cudaError_t.cudaSuccess,)
    rt.enqueue(handle, lambda: ran.append("after"))
    rt.cudaEventSynchronize(event)
    assert ran == ["before"]
    rt.cudaEventSynchronize(event)  # again: nothing more
    assert ran == ["before"]
    rt.cudaStreamSynchronize(handle)
    assert ran == ["before", "after"]
    assert rt.cudaEventDestroy(event) == (rt.cudaError_t.cudaSuccess,)
    assert rt.cudaEventDestroy(event) == (rt.cudaError_t.cudaErrorInvalidResourceHandle,)


def test_an_event_that_cannot_be_made_frees_the_stream(fake_cuda: FakeCudaRuntime) -> None:
    fake_cuda.fail["cudaEventCreateWithFlags"] = cudaError_t.cudaErrorMemoryAllocation
    with pytest.raises(EngineError, match="cudaEventCreateWithFlags failed: cudaErrorMemoryAllocation"):
        cuda.Stream()
    assert fake_cuda.streams == {} and fake_cuda.names()[-1] == "cudaStreamDestroy"


def test_an_mmap_buffer_is_registered_and_unregistered(fake_cuda: FakeCudaRuntime) -> None:
    mapping = mmap.mmap(-1, 1 << 16)
    pool = np.frombuffer(mapping, dtype=np.uint8)
    registration = cuda.HostRegistration(pool)
    start = pool.ctypes.data
    assert fake_cuda.pinned == {start: 1 << 16}
    assert ("cudaHostRegister", start, 1 << 16, 0) in fake_cuda.calls
    assert registration.contains(start + 100, 1000)
    assert not registration.contains(start + (1 << 16) - 10, 100)
    registration.close()
    assert fake_cuda.pinned == {}
    assert not registration.contains(start, 1)
    with pytest.raises(EngineError, match="contiguous"):
        cuda.HostRegistration(np.zeros((4, 4))[:, ::2])
    del pool
    mapping.close()


def test_a_graph_replays_what_was_captured(fake_cuda: FakeCudaRuntime) -> None:
    stream = cuda.Stream()
    ran: list[int] = []
    graph = cuda.Graph(stream, lambda: fake_cuda.enqueue(int(stream), lambda: ran.append(1)))
    assert ran == []  # captured, not run
    graph.launch(stream)
    graph.launch(stream)
    assert ran == []  # launched on the stream: done only once the stream is synchronised
    stream.synchronize()
    assert ran == [1, 1]
    graph.close()
    assert "cudaGraphExecDestroy" in fake_cuda.names() and "cudaGraphDestroy" in fake_cuda.names()


def test_a_failed_capture_ends_the_capture(fake_cuda: FakeCudaRuntime) -> None:
    stream = cuda.Stream()

    def broken() -> None:
        raise EngineError("TensorRT inference failed")

    with pytest.raises(EngineError, match="TensorRT inference failed"):
        cuda.Graph(stream, broken)
    assert fake_cuda.capturing == {}
    assert fake_cuda.names()[-1] == "cudaStreamEndCapture"


def test_a_graph_that_cannot_be_instantiated_is_freed(fake_cuda: FakeCudaRuntime) -> None:
    stream = cuda.Stream()
    fake_cuda.fail["cudaGraphInstantiate"] = cudaError_t.cudaErrorMemoryAllocation
    with pytest.raises(EngineError, match="cudaGraphInstantiate failed: cudaErrorMemoryAllocation"):
        cuda.Graph(stream, lambda: fake_cuda.enqueue(int(stream), lambda: None))
    assert fake_cuda.graphs == {}  # the captured graph was destroyed, not leaked
    assert fake_cuda.names()[-1] == "cudaGraphDestroy"


def test_unsafe_calls_during_a_capture_fail_and_invalidate_it(fake_cuda: FakeCudaRuntime) -> None:
    stream = cuda.Stream()

    def allocates() -> None:
        cuda.DeviceBuffer(16)  # cudaMalloc may synchronise: not allowed while capturing

    with pytest.raises(EngineError, match="cudaMalloc failed: cudaErrorStreamCaptureUnsupported"):
        cuda.Graph(stream, allocates)
    assert fake_cuda.capturing == {}
    stream.synchronize()  # the stream is usable again


def test_versions_without_a_driver_and_with_one(monkeypatch: pytest.MonkeyPatch) -> None:
    install_cuda(monkeypatch, FakeCudaRuntime(no_driver="return"))
    assert cuda.versions() == {"driver": None, "runtime": 12090}
    install_cuda(monkeypatch, FakeCudaRuntime(driver_version=13000))
    assert cuda.versions() == {"driver": 13000, "runtime": 12090}
    assert cuda.version_text(12090) == "12.9" and cuda.version_text(None) == "unknown"
    assert cuda.memory_info(0) == (16 << 30, 16 << 30)
