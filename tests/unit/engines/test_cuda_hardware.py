"""framewire's CUDA helpers (framewire.engines.cuda) on a real GPU, with the real cuda-python: what
the fakes of gpu_fakes.py assume, checked where it can be. Skipped without a GPU and cuda-python.

What runs here is what the TensorRT backend does around `execute_async_v3`: pinned staging buffers,
a frame pool attached as an infer worker attaches it and registered as pinned memory, copies both
ways on the worker's stream, a CUDA graph of those copies replayed with new data, the one-line
errors; the Triton backend's CUDA shared memory opened from another process as the server opens it;
and `doctor`'s machine checks.
"""

from __future__ import annotations

import base64
import gc
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from framewire.engines import cuda
from framewire.engines.doctor import _has_cuda_python
from framewire.pipeline.errors import EngineError
from framewire.pipeline.wire.framepool import FramePool, PoolLayout


HAS_GPU = _has_cuda_python() and cuda.device_count() > 0

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU and cuda-python"),
    pytest.mark.timeout(120),
]


@pytest.fixture(params=[False, True], ids=["blocking", "spin"])
def stream(request: pytest.FixtureRequest) -> Iterator[cuda.Stream]:
    """The worker's stream, waited on by a blocking event (the default) or by spinning (spin_wait)."""
    cuda.set_device(0)
    made = cuda.Stream(spin=request.param)
    assert made.spins is request.param
    yield made
    made.close()


def _random(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def test_the_device_is_named_and_sized_and_a_missing_one_is_one_line() -> None:
    count, why = cuda.gpu_status()
    assert count >= 1 and why == ""
    name = cuda.require_device(0)
    assert name.strip() and "\0" not in name
    versions = cuda.versions()
    driver, runtime = versions["driver"], versions["runtime"]
    assert driver is not None and runtime is not None and driver >= 12000 and runtime >= 12000
    assert driver // 1000 >= runtime // 1000  # else no call would have worked
    memory = cuda.memory_info(0)
    assert memory is not None and 0 < memory[0] <= memory[1]
    with pytest.raises(EngineError) as info:
        cuda.require_device(count)
    expected = f"engine.devices: GPU {count} not found (this machine has {count}: 0-{count - 1})"
    assert str(info.value) == expected


def test_a_failed_allocation_is_a_one_line_error_and_the_device_stays_usable() -> None:
    cuda.set_device(0)
    with pytest.raises(EngineError) as info:
        cuda.DeviceBuffer(1 << 52)  # 4 PiB: no GPU has it
    assert str(info.value) == "CUDA cudaMalloc failed: cudaErrorMemoryAllocation"
    buffer = cuda.DeviceBuffer(1 << 20)
    assert buffer.ptr != 0
    buffer.close()
    assert buffer.ptr == 0


def test_pinned_and_device_buffers_round_trip_on_the_workers_stream(stream: cuda.Stream) -> None:
    assert int(stream) != 0  # a stream of its own, not the legacy default stream (TensorRT gets int(stream))
    source, target = cuda.HostBuffer(4 << 20), cuda.HostBuffer(4 << 20)
    device = cuda.DeviceBuffer(4 << 20)
    data = _random((1 << 20,), 1)
    source.view(np.float32, data.shape)[...] = data
    cuda.memcpy_htod_async(device.ptr, source.ptr, data.nbytes, stream)
    cuda.memcpy_dtoh_async(target.ptr, device.ptr, data.nbytes, stream)
    stream.synchronize()
    np.testing.assert_array_equal(target.view(np.float32, data.shape), data)
    with pytest.raises(EngineError, match="cannot hold"):
        source.view(np.float32, (1 << 20, 2))
    for buffer in (source, target, device):
        buffer.close()


def test_a_wait_covers_a_long_copy_queued_before_it(stream: cuda.Stream) -> None:
    """The blocking event is recorded after the work: the wait returns only when a 1 GiB device copy
    (about half a millisecond on an H200) queued before it has landed, and a copy back shows it."""
    size = 1 << 30
    first, second = cuda.DeviceBuffer(size), cuda.DeviceBuffer(size)
    host = cuda.HostBuffer(size)
    data = host.view(np.uint8, (size,))
    data[:: 1 << 20] = 9  # one byte a MiB
    cuda.memcpy_htod_async(first.ptr, host.ptr, size, stream)
    stream.synchronize()  # the host buffer is read by DMA: it may change only after this
    rt = cuda.runtime()
    kind = rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
    for _ in range(2):
        data[:: 1 << 20] = 0
        cuda.call("cudaMemcpyAsync", second.ptr, first.ptr, size, kind, stream.handle)
        cuda.memcpy_dtoh_async(host.ptr, second.ptr, size, stream)
        stream.synchronize()
        assert (data[:: 1 << 20] == 9).all()
    for buffer in (first, second, host):
        buffer.close()


def test_the_gpus_waits_can_be_scheduled_blocking_on_a_context_in_use() -> None:
    """What a GPU infer worker does before it opens its engine, after the context exists already
    (gpu_status and memory_info made it): CUDA takes the flag on an active context."""
    cuda.set_device(0)
    assert cuda.memory_info(0) is not None  # the primary context is active
    cuda.schedule_blocking(0)
    rt = cuda.runtime()
    flags = int(cuda.call("cudaGetDeviceFlags"))
    assert flags & rt.cudaDeviceScheduleMask == rt.cudaDeviceScheduleBlockingSync


def _pointer_type(pointer: int) -> str:
    rt = cuda.runtime()
    attributes = cuda.call("cudaPointerGetAttributes", pointer)
    return str(rt.cudaMemoryType(attributes.type).name)


def test_a_frame_pool_attached_by_a_worker_is_pinned_and_copied_from_directly(stream: cuda.Stream) -> None:
    # Decode creates the pool in /dev/shm; the infer worker attaches its own mapping and registers it.
    layout = PoolLayout.plan(f"framewire-gpu-test-{os.getpid()}", 4, {"input": ((1, 3, 64, 64), "float32")})
    decode_side = FramePool.create(layout)
    worker_side = FramePool.attach(layout)
    try:
        first = worker_side.view(0, "input")
        assert _pointer_type(first.ctypes.data) == "cudaMemoryTypeUnregistered"
        registration = cuda.HostRegistration(worker_side.memory)
        assert _pointer_type(first.ctypes.data) == "cudaMemoryTypeHost"
        # The same memory twice is refused, as the fakes assume.
        refused = "cudaHostRegister failed: cudaErrorHostMemoryAlreadyRegistered"
        with pytest.raises(EngineError, match=refused):
            cuda.HostRegistration(worker_side.memory)

        device = cuda.DeviceBuffer(first.nbytes)
        out = cuda.HostBuffer(first.nbytes)
        for slot in range(layout.slots):
            frame = _random((1, 3, 64, 64), slot)
            decode_side.view(slot, "input")[...] = frame
            view = worker_side.view(slot, "input")
            assert registration.contains(view.ctypes.data, view.nbytes)
            cuda.memcpy_htod_async(device.ptr, view.ctypes.data, view.nbytes, stream)
            cuda.memcpy_dtoh_async(out.ptr, device.ptr, view.nbytes, stream)
            stream.synchronize()
            np.testing.assert_array_equal(out.view(np.float32, frame.shape), frame)
        device.close()
        out.close()
        del first, view
        registration.close()
        gc.collect()  # the refused registration's traceback held a view of the pool
        assert _pointer_type(worker_side.view(0, "input").ctypes.data) == "cudaMemoryTypeUnregistered"
    finally:
        worker_side.close()
        decode_side.close()
    assert worker_side.segment.closed  # no registration kept the mapping


def test_a_graph_of_the_copies_replays_them_with_new_data(stream: cuda.Stream) -> None:
    shape = (2, 3, 32, 32)
    nbytes = int(np.prod(shape)) * 4
    source, target, device = cuda.HostBuffer(nbytes), cuda.HostBuffer(nbytes), cuda.DeviceBuffer(nbytes)
    target.view(np.float32, shape)[...] = 0

    def enqueue() -> None:
        cuda.memcpy_htod_async(device.ptr, source.ptr, nbytes, stream)
        cuda.memcpy_dtoh_async(target.ptr, device.ptr, nbytes, stream)

    graph = cuda.Graph(stream, enqueue)
    stream.synchronize()
    assert not target.view(np.float32, shape).any()  # captured, not run
    for seed in (1, 2):
        data = _random(shape, seed)
        source.view(np.float32, shape)[...] = data
        graph.launch(stream)
        stream.synchronize()
        np.testing.assert_array_equal(target.view(np.float32, shape), data)
    graph.close()
    for buffer in (source, target, device):
        buffer.close()


def test_an_allocation_during_a_capture_fails_and_the_stream_goes_on(stream: cuda.Stream) -> None:
    with pytest.raises(EngineError) as info:
        cuda.Graph(stream, lambda: cuda.DeviceBuffer(1024).close())
    assert str(info.value) == "CUDA cudaMalloc failed: cudaErrorStreamCaptureUnsupported"  # as on the H200
    host, device = cuda.HostBuffer(64), cuda.DeviceBuffer(64)
    host.view(np.uint8, (64,))[...] = 7
    cuda.memcpy_htod_async(device.ptr, host.ptr, 64, stream)
    stream.synchronize()  # the stream is out of capture mode again: plain launches go on
    for buffer in (host, device):
        buffer.close()


_IPC_READER = textwrap.dedent(
    """
    import base64, ctypes, sys
    import numpy as np
    from cuda.bindings import runtime as rt

    raw, device, nbytes = base64.b64decode(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    handle = rt.cudaIpcMemHandle_t()
    ctypes.memmove(handle.getPtr(), raw, len(raw))
    assert rt.cudaSetDevice(device)[0] == 0
    err, pointer = rt.cudaIpcOpenMemHandle(handle, rt.cudaIpcMemLazyEnablePeerAccess)
    assert err == 0, err
    out = np.empty(nbytes, dtype=np.uint8)
    err, = rt.cudaMemcpy(out.ctypes.data, pointer, nbytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost)
    assert err == 0, err
    rt.cudaIpcCloseMemHandle(pointer)
    sys.stdout.write(out.tobytes().hex())
    """
)


def test_triton_cuda_shared_memory_is_read_by_another_process_as_the_server_reads_it() -> None:
    cudashm = pytest.importorskip("tritonclient.utils.cuda_shared_memory")
    from framewire.engines.triton_shm import CudaMemory

    memory = CudaMemory(cudashm, 0)
    data = _random((4, 16), 3)
    handle = memory.create("framewire-gpu-test", data.nbytes)
    try:
        memory.write(handle, data)
        np.testing.assert_array_equal(memory.read(handle, np.dtype(np.float32), [4, 16]), data)
        raw = cudashm.get_raw_handle(handle)  # what register_cuda_shared_memory sends the server
        assert len(base64.b64decode(raw)) == cuda.runtime().CUDA_IPC_HANDLE_SIZE
        reader = subprocess.run(
            [sys.executable, "-c", _IPC_READER, raw.decode(), "0", str(data.nbytes)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert reader.returncode == 0, reader.stderr
        read = np.frombuffer(bytes.fromhex(reader.stdout), np.float32).reshape(4, 16)
        np.testing.assert_array_equal(read, data)
    finally:
        memory.destroy(handle)


def test_doctor_passes_the_machine_checks_and_says_what_is_missing_in_one_line() -> None:
    from framewire.engines.doctor import FAILED, OK, SKIPPED, render, run_checks

    report = run_checks(0)
    status = {c.name: c for c in report.checks}
    for name in ("driver", "cuda-python", "gpus", "onnxruntime"):
        assert status[name].status == OK, status[name]
    assert cuda.device_name(0) in status["gpus"].detail
    if Path("/proc/driver/nvidia/version").exists():  # the kernel module and its version, e.g. 580.159.04
        driver = status["driver"].detail
        assert re.search(r"Kernel Module.* \d+\.\d+(\.\d+)*, CUDA \d+\.\d$", driver), driver
    for check in report.checks:
        assert check.status in (OK, FAILED, SKIPPED) and "\n" not in check.detail, check
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        assert status["tensorrt"].status == FAILED
        assert status["tensorrt fp32 engine"].status == SKIPPED
        assert status["tensorrt fp32 engine"].detail == "needs tensorrt (see above)"
    text = render(report)
    assert text.startswith("framewire doctor") and "gpus" in text



_WORKERS = """
import json, multiprocessing, sys
import numpy as np
from framewire.app.preload import PRELOAD
from framewire.engines import cuda
from framewire.pipeline.worker.forkserver import worker_context

def use_gpu(out):
    try:
        cuda.set_device(0)
        stream, host, device = cuda.Stream(), cuda.HostBuffer(64), cuda.DeviceBuffer(64)
        host.view(np.uint8, (64,))[...] = 5
        cuda.memcpy_htod_async(device.ptr, host.ptr, 64, stream)
        stream.synchronize()
        host.view(np.uint8, (64,))[...] = 0
        cuda.memcpy_dtoh_async(host.ptr, device.ptr, 64, stream)
        stream.synchronize()
        out.send("ok" if (host.view(np.uint8, (64,)) == 5).all() else "wrong bytes")
    except Exception as exc:
        out.send(str(exc))

def run(context):
    ours, theirs = context.Pipe()
    worker = context.Process(target=use_gpu, args=(theirs,))
    worker.start()
    answer = ours.recv() if ours.poll(60) else "no answer"
    worker.join(30)
    return answer

if __name__ == "__main__":
    # The supervisor's side: it has asked about the GPU and holds a context (preflight, doctor).
    assert cuda.memory_info(0) is not None
    held = cuda.DeviceBuffer(1 << 20)
    found = {"forkserver": run(worker_context(PRELOAD)), "fork": run(multiprocessing.get_context("fork"))}
    print(json.dumps(found))
"""


def test_workers_from_the_fork_server_use_the_gpu_where_forked_ones_cannot(tmp_path: Path) -> None:
    """Why workers are forked from a fork server that never touches CUDA, not from the supervisor:
    a process forked after its parent initialised CUDA cannot use it."""
    script = tmp_path / "workers.py"
    script.write_text(_WORKERS, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["forkserver"] == "ok"
    assert found["fork"].startswith("CUDA ") and "failed: cudaError" in found["fork"], found
