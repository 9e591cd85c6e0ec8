"""Fakes of cuda-python's runtime module and of the tensorrt package, for machines without a GPU.

They mirror the real modules, and tests/contract checks that they do against the real
`cuda.bindings.runtime` (12.9 and 13) and `tensorrt` bindings (10 and 11): every name, enum value,
parameter list and failure convention used here exists there. cuda-python functions return
`(err, value...)` tuples with `cudaError_t` codes (`(err, None)` on failure); stream work runs only at
cudaStreamSynchronize; captures refuse unsafe calls; pinned registrations may not overlap.
`FakeTensorRT(version)` is TensorRT 10 (precision flags, `IInt8EntropyCalibrator2`) or 11 (strongly
typed only); its Builder and Runtime raise TypeError as the real bindings do when CUDA cannot start,
and keep the first logger of the process as TensorRT does. "Device" memory is host memory here, so
copies and the fake engine's kernel really move bytes, and a CUDA graph really replays what was
captured.

The fake engine computes, for its input `x` of any shape: `y = 2 * x + 1` (same shape) and
`s = x.sum(axis=1..)` ([N]).

Use the fixtures `fake_cuda` (cuda-python present, one GPU), `fake_trt` (tensorrt 10 too) and
`fake_trt11`; they install the modules into `sys.modules` for the test only.
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
from collections.abc import Callable, Iterator
from enum import IntEnum
from types import ModuleType
from typing import Any

import numpy as np
import pytest

# --- cuda-python -------------------------------------------------------------------------------


class cudaError_t(IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorInsufficientDriver = 35
    cudaErrorNoDevice = 100
    cudaErrorInvalidDevice = 101
    cudaErrorSetOnActiveProcess = 708
    cudaErrorInvalidResourceHandle = 400
    cudaErrorHostMemoryAlreadyRegistered = 712
    cudaErrorHostMemoryNotRegistered = 713
    cudaErrorStreamCaptureUnsupported = 900
    cudaErrorStreamCaptureInvalidated = 901
    cudaErrorStreamCaptureWrongThread = 908


class cudaMemcpyKind(IntEnum):
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3


class cudaStreamCaptureMode(IntEnum):
    cudaStreamCaptureModeGlobal = 0
    cudaStreamCaptureModeThreadLocal = 1
    cudaStreamCaptureModeRelaxed = 2


class cudaStream_t:
    def __init__(self, handle: int = 0) -> None:
        self._handle = handle

    def __int__(self) -> int:
        return self._handle


class cudaEvent_t:
    def __init__(self, handle: int = 0) -> None:
        self._handle = handle

    def __int__(self) -> int:
        return self._handle


class cudaDeviceProp:
    def __init__(self, name: str = "") -> None:
        self.name = name.encode() + b"\0" * 8  # a char[256] in the real struct


OK = cudaError_t.cudaSuccess


class _Capture:
    """One stream capture in progress: its thread, its mode, the work recorded, and whether an
    unsafe call broke it (then cudaStreamEndCapture fails, as in CUDA)."""

    def __init__(self, mode: cudaStreamCaptureMode) -> None:
        self.thread = threading.get_ident()
        self.mode = mode
        self.work: list[Callable[[], None]] = []
        self.invalidated = False


class FakeCudaRuntime(ModuleType):
    """`cuda.bindings.runtime` (or `cuda.cudart`): functions returning `(err, value...)`, with the
    real parameter names (tests/contract checks them) and the real conventions:

    - a failed call returns `(err, None)` where it has a value; without a driver every call fails
      with cudaErrorInsufficientDriver (cuda-python 12.9 and 13 do that; `no_driver="raise"` keeps
      a defensive variant of a binding that raises);
    - work on a stream (async copies, kernels, graph launches) runs only at
      cudaStreamSynchronize, or at cudaEventSynchronize of an event recorded on it (the work queued
      before the record, and only that): reading results without it reads stale memory, as on a GPU;
    - while a stream is captured (ThreadLocal or Global mode), calls that are unsafe during
      capture (cudaMalloc, cudaMallocHost, cudaFree, cudaHostRegister, synchronous cudaMemcpy,
      cudaStreamSynchronize, cudaEventSynchronize) fail with cudaErrorStreamCaptureUnsupported and invalidate it;
    - cudaHostRegister refuses a range that overlaps a registered one; cudaHostUnregister an
      address that is not the start of a registration.
    """

    cudaError_t = cudaError_t
    cudaMemcpyKind = cudaMemcpyKind
    cudaStreamCaptureMode = cudaStreamCaptureMode
    cudaStream_t = cudaStream_t
    cudaDeviceProp = cudaDeviceProp
    cudaEvent_t = cudaEvent_t
    cudaStreamNonBlocking = 1
    cudaEventBlockingSync = 1
    cudaDeviceScheduleBlockingSync = 4
    cudaEventDisableTiming = 2
    cudaHostRegisterDefault = 0

    def __init__(
        self,
        gpus: tuple[str, ...] = ("NVIDIA Fake GPU",),
        *,
        no_driver: str = "",
        driver_version: int = 12040,
        runtime_version: int = 12090,
        memory: int = 16 << 30,
    ) -> None:
        super().__init__("cuda.bindings.runtime")
        self.gpus = gpus
        self.no_driver = no_driver  # "return" (real): every call fails; "raise": defensive variant
        self.driver_version = driver_version
        self.runtime_version = runtime_version
        self.total_memory = memory
        self.calls: list[tuple[Any, ...]] = []
        self.fail: dict[str, cudaError_t] = {}  # function name -> error it returns
        self.memory: dict[int, Any] = {}  # ptr -> ctypes buffer ("device" and pinned host memory)
        self.pinned: dict[int, int] = {}  # host ptr -> size (cudaHostRegister)
        self.host_allocations: set[int] = set()
        self.current_device = 0
        self.device_flags: dict[int, int] = {}  # device -> cudaSetDeviceFlags
        self.streams: dict[int, list[Callable[[], None]]] = {}  # handle -> work not yet run
        self.capturing: dict[int, _Capture] = {}
        self.graphs: dict[int, list[Callable[[], None]]] = {}
        self.graph_execs: dict[int, int] = {}  # exec handle -> graph handle
        self._next_handle = 1
        self.events: dict[int, tuple[int, int] | None] = {}  # handle -> (stream, items queued before it)
        self.queued: dict[int, int] = {}  # stream handle -> work items ever queued on it
        self.ran: dict[int, int] = {}  # stream handle -> work items run

    # helpers for the fake engine and the tests

    def _record(self, name: str, *args: Any) -> cudaError_t:
        self.calls.append((name, *args))
        if self.no_driver == "raise":
            raise RuntimeError("Failed to dlopen libcuda.so.1")
        if self.no_driver:
            return cudaError_t.cudaErrorInsufficientDriver
        return self.fail.get(name, OK)

    def _unsafe(self, name: str, *args: Any) -> cudaError_t:
        """`_record` for a call that is unsafe during a stream capture."""
        err = self._record(name, *args)
        if err:
            return err
        me = threading.get_ident()
        for capture in self.capturing.values():
            relaxed = capture.mode == cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed
            local = capture.mode == cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
            if relaxed or (local and capture.thread != me):
                continue
            capture.invalidated = True
            return cudaError_t.cudaErrorStreamCaptureUnsupported
        return OK

    def enqueue(self, stream: Any, work: Callable[[], None]) -> cudaError_t:
        """Queue `work` on `stream` (run at its synchronize), or record it while it is captured."""
        handle = int(stream)
        capture = self.capturing.get(handle)
        if capture is not None:
            capture.work.append(work)
            return OK
        if handle not in self.streams:
            return cudaError_t.cudaErrorInvalidResourceHandle
        self.streams[handle].append(work)
        self.queued[handle] = self.queued.get(handle, 0) + 1
        return OK

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]

    def _alloc(self, size: int) -> int:
        buffer = (ctypes.c_uint8 * size)()
        ptr = ctypes.addressof(buffer)
        self.memory[ptr] = buffer
        return ptr

    def _run(self, handle: int, upto: int | None = None) -> None:
        """Run the stream's queued work, all of it or up to the `upto`-th item ever queued."""
        count = len(self.streams[handle]) if upto is None else max(0, upto - self.ran.get(handle, 0))
        work, self.streams[handle] = self.streams[handle][:count], self.streams[handle][count:]
        self.ran[handle] = self.ran.get(handle, 0) + len(work)
        for item in work:
            item()

    # devices

    def cudaGetDeviceCount(self) -> tuple[cudaError_t, int | None]:
        err = self._record("cudaGetDeviceCount")
        if err:
            return err, None
        if not self.gpus:
            return cudaError_t.cudaErrorNoDevice, None
        return OK, len(self.gpus)

    def cudaGetDeviceProperties(self, device: int) -> tuple[cudaError_t, cudaDeviceProp | None]:
        err = self._record("cudaGetDeviceProperties", device)
        if err:
            return err, None
        if not 0 <= device < len(self.gpus):
            return cudaError_t.cudaErrorInvalidDevice, None
        return OK, cudaDeviceProp(self.gpus[device])

    def cudaSetDevice(self, device: int) -> tuple[cudaError_t]:
        err = self._record("cudaSetDevice", device)
        if err:
            return (err,)
        if not 0 <= device < len(self.gpus):
            return (cudaError_t.cudaErrorInvalidDevice,)
        self.current_device = device
        return (OK,)

    def cudaGetErrorName(self, error: cudaError_t) -> tuple[cudaError_t, bytes]:
        return OK, cudaError_t(error).name.encode()

    def cudaDriverGetVersion(self) -> tuple[cudaError_t, int]:
        # As the real one: success and 0 when there is no driver.
        return OK, 0 if self.no_driver else self.driver_version

    def cudaRuntimeGetVersion(self) -> tuple[cudaError_t, int]:
        return OK, self.runtime_version

    def cudaMemGetInfo(self) -> tuple[cudaError_t, int | None, int | None]:
        err = self._record("cudaMemGetInfo")
        if err:
            return err, None, None
        used = sum(len(b) for p, b in self.memory.items() if p not in self.host_allocations)
        return OK, self.total_memory - used, self.total_memory

    # memory

    def cudaMalloc(self, size: int) -> tuple[cudaError_t, int | None]:
        err = self._unsafe("cudaMalloc", size)
        return (err, None) if err else (OK, self._alloc(size))

    def cudaFree(self, devPtr: int) -> tuple[cudaError_t]:
        err = self._unsafe("cudaFree", devPtr)
        if not err:
            self.memory.pop(int(devPtr), None)
        return (err,)

    def cudaMallocHost(self, size: int) -> tuple[cudaError_t, int | None]:
        err = self._unsafe("cudaMallocHost", size)
        if err:
            return err, None
        ptr = self._alloc(size)
        self.host_allocations.add(ptr)
        return OK, ptr

    def cudaFreeHost(self, ptr: int) -> tuple[cudaError_t]:
        err = self._unsafe("cudaFreeHost", ptr)
        if not err:
            self.host_allocations.discard(int(ptr))
            self.memory.pop(int(ptr), None)
        return (err,)

    def cudaHostRegister(self, ptr: int, size: int, flags: int) -> tuple[cudaError_t]:
        err = self._unsafe("cudaHostRegister", ptr, size, flags)
        if err:
            return (err,)
        start, end = int(ptr), int(ptr) + int(size)
        for other, length in self.pinned.items():
            if start < other + length and other < end:
                return (cudaError_t.cudaErrorHostMemoryAlreadyRegistered,)
        self.pinned[start] = int(size)
        return (OK,)

    def cudaHostUnregister(self, ptr: int) -> tuple[cudaError_t]:
        err = self._unsafe("cudaHostUnregister", ptr)
        if err:
            return (err,)
        if int(ptr) not in self.pinned:
            return (cudaError_t.cudaErrorHostMemoryNotRegistered,)
        del self.pinned[int(ptr)]
        return (OK,)

    def cudaMemcpy(self, dst: int, src: int, count: int, kind: cudaMemcpyKind) -> tuple[cudaError_t]:
        err = self._unsafe("cudaMemcpy", dst, src, count, kind)
        if not err:
            ctypes.memmove(dst, src, count)
        return (err,)

    def cudaMemcpyAsync(
        self, dst: int, src: int, count: int, kind: cudaMemcpyKind, stream: Any
    ) -> tuple[cudaError_t]:
        err = self._record("cudaMemcpyAsync", dst, src, count, kind, int(stream))
        if err:
            return (err,)
        return (self.enqueue(stream, lambda: ctypes.memmove(dst, src, count)),)

    # streams and graphs

    def cudaStreamCreateWithFlags(self, flags: int) -> tuple[cudaError_t, cudaStream_t | None]:
        err = self._record("cudaStreamCreateWithFlags", flags)
        if err:
            return err, None
        self._next_handle += 1
        handle = 0x1000 + self._next_handle
        self.streams[handle] = []
        return OK, cudaStream_t(handle)

    def cudaStreamSynchronize(self, stream: Any) -> tuple[cudaError_t]:
        err = self._record("cudaStreamSynchronize", int(stream))
        if err:
            return (err,)
        capture = self.capturing.get(int(stream))
        if capture is not None:
            capture.invalidated = True
            return (cudaError_t.cudaErrorStreamCaptureUnsupported,)
        if int(stream) not in self.streams:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        self._run(int(stream))
        return (OK,)

    def cudaSetDeviceFlags(self, flags: int) -> tuple[cudaError_t]:
        err = self._record("cudaSetDeviceFlags", flags)
        if err:
            return (err,)
        self.device_flags[self.current_device] = flags
        return (OK,)

    def cudaEventCreateWithFlags(self, flags: int) -> tuple[cudaError_t, cudaEvent_t | None]:
        err = self._record("cudaEventCreateWithFlags", flags)
        if err:
            return err, None
        self._next_handle += 1
        handle = 0x5000 + self._next_handle
        self.events[handle] = None
        return OK, cudaEvent_t(handle)

    def cudaEventRecord(self, event: Any, stream: Any) -> tuple[cudaError_t]:
        """Marks the work queued on `stream` so far; in a capture it is a node of the graph."""
        err = self._record("cudaEventRecord", int(event), int(stream))
        if err:
            return (err,)
        if int(event) not in self.events:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        if int(stream) in self.capturing:
            return (OK,)
        if int(stream) not in self.streams:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        self.events[int(event)] = (int(stream), self.queued.get(int(stream), 0))
        return (OK,)

    def cudaEventSynchronize(self, event: Any) -> tuple[cudaError_t]:
        """Runs the work queued before the event's record (and only that), as a GPU would have."""
        err = self._unsafe("cudaEventSynchronize", int(event))
        if err:
            return (err,)
        if int(event) not in self.events:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        marked = self.events[int(event)]
        if marked is not None and marked[0] in self.streams:
            self._run(marked[0], upto=marked[1])
        return (OK,)

    def cudaEventDestroy(self, event: Any) -> tuple[cudaError_t]:
        err = self._record("cudaEventDestroy", int(event))
        if err:
            return (err,)
        if self.events.pop(int(event), "gone") == "gone":
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        return (OK,)

    def cudaStreamDestroy(self, stream: Any) -> tuple[cudaError_t]:
        err = self._record("cudaStreamDestroy", int(stream))
        if err:
            return (err,)
        if int(stream) not in self.streams:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        self._run(int(stream))  # work already queued still completes
        del self.streams[int(stream)]
        return (OK,)

    def cudaStreamBeginCapture(self, stream: Any, mode: cudaStreamCaptureMode) -> tuple[cudaError_t]:
        err = self._record("cudaStreamBeginCapture", int(stream), mode)
        if err:
            return (err,)
        if int(stream) not in self.streams:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        if self.streams[int(stream)]:
            self._run(int(stream))  # a real capture starts after what is queued; model it simply
        self.capturing[int(stream)] = _Capture(mode)
        return (OK,)

    def cudaStreamEndCapture(self, stream: Any) -> tuple[cudaError_t, int | None]:
        capture = self.capturing.get(int(stream))
        err = self._record("cudaStreamEndCapture", int(stream))
        if capture is not None and capture.thread != threading.get_ident():
            return cudaError_t.cudaErrorStreamCaptureWrongThread, None
        self.capturing.pop(int(stream), None)
        if err:
            return err, None
        if capture is None:
            return cudaError_t.cudaErrorInvalidValue, None
        if capture.invalidated:
            return cudaError_t.cudaErrorStreamCaptureInvalidated, None
        self._next_handle += 1
        self.graphs[self._next_handle] = capture.work
        return OK, self._next_handle

    def cudaGraphInstantiate(self, graph: int, flags: int) -> tuple[cudaError_t, int | None]:
        err = self._record("cudaGraphInstantiate", graph, flags)
        if err:
            return err, None
        self._next_handle += 1
        self.graph_execs[self._next_handle] = int(graph)
        return OK, self._next_handle

    def cudaGraphLaunch(self, graphExec: int, stream: Any) -> tuple[cudaError_t]:
        err = self._record("cudaGraphLaunch", graphExec, int(stream))
        if err:
            return (err,)
        graph = self.graph_execs.get(int(graphExec))
        if graph is None or graph not in self.graphs:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        for work in self.graphs[graph]:
            status = self.enqueue(stream, work)
            if status:
                return (status,)
        return (OK,)

    def cudaGraphExecDestroy(self, graphExec: int) -> tuple[cudaError_t]:
        err = self._record("cudaGraphExecDestroy", graphExec)
        if not err:
            self.graph_execs.pop(int(graphExec), None)
        return (err,)

    def cudaGraphDestroy(self, graph: int) -> tuple[cudaError_t]:
        err = self._record("cudaGraphDestroy", graph)
        if not err:
            self.graphs.pop(int(graph), None)
        return (err,)


def install_cuda(monkeypatch: pytest.MonkeyPatch, runtime: FakeCudaRuntime, *, legacy: bool = False) -> None:
    """Put `runtime` where `from cuda.bindings import runtime` (or, `legacy`, `from cuda import
    cudart`) finds it."""
    package = ModuleType("cuda")
    package.__path__ = []  # a package, so that submodule imports look in sys.modules
    if legacy:
        package.cudart = runtime  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "cuda.cudart", runtime)
        monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # import fails: not in older releases
    else:
        bindings = ModuleType("cuda.bindings")
        bindings.__path__ = []
        bindings.runtime = runtime  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
        monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", runtime)
    monkeypatch.setitem(sys.modules, "cuda", package)


def hide_module(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make `import name` fail with ImportError, as when the package is not installed."""
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


# --- tensorrt ----------------------------------------------------------------------------------


class DataType(IntEnum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    UINT8 = 5
    INT64 = 8
    BF16 = 7


_NPTYPES = {
    DataType.FLOAT: np.float32,
    DataType.HALF: np.float16,
    DataType.INT8: np.int8,
    DataType.INT32: np.int32,
    DataType.BOOL: np.bool_,
    DataType.UINT8: np.uint8,
    DataType.INT64: np.int64,
}


def nptype(trt_type: DataType) -> type:
    if trt_type not in _NPTYPES:
        raise TypeError("Could not resolve TensorRT datatype to an equivalent numpy datatype.")
    return _NPTYPES[trt_type]  # type: ignore[return-value]


class TensorIOMode(IntEnum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class BuilderFlag(IntEnum):
    """TensorRT 10's flags (the real values; tests/contract checks them)."""

    FP16 = 0
    INT8 = 1
    BF16 = 17


class BuilderFlag11(IntEnum):
    """TensorRT 11 removed the precision flags: networks are strongly typed."""

    DEBUG = 2
    TF32 = 6


class MemoryPoolType(IntEnum):
    WORKSPACE = 0


class NetworkDefinitionCreationFlag(IntEnum):
    EXPLICIT_BATCH = 0  # deprecated and ignored in TensorRT 10, still defined
    STRONGLY_TYPED = 1


class NetworkDefinitionCreationFlag11(IntEnum):
    STRONGLY_TYPED = 0  # note: 1 in TensorRT 10


class _Severity(IntEnum):
    INTERNAL_ERROR = 0
    ERROR = 1
    WARNING = 2
    INFO = 3
    VERBOSE = 4


class ILogger:
    Severity = _Severity

    def __init__(self) -> None:
        pass


class Logger(ILogger):
    WARNING = _Severity.WARNING

    def __init__(self, min_severity: _Severity = _Severity.WARNING) -> None:
        super().__init__()

    def log(self, severity: _Severity, msg: str) -> None:
        pass


NULL_FACTORY = "pybind11::init(): factory function returned nullptr"
"""What the real bindings raise (TypeError) when TensorRT cannot create a builder or runtime."""


def _tensorrt_logger(logger: ILogger) -> ILogger:
    """TensorRT keeps the logger of the first builder or runtime of a process and sends every later
    message there, whatever logger later objects are given; and it cannot start without CUDA."""
    cuda = FakeTensorRT.cuda
    if cuda is None or cuda.no_driver or not cuda.gpus:
        raise TypeError(NULL_FACTORY)
    if FakeTensorRT.first_logger is None:
        FakeTensorRT.first_logger = logger
    return FakeTensorRT.first_logger


class IInt8EntropyCalibrator2:
    """TensorRT 10's calibrator base; framewire's calibrator overrides these four."""

    def __init__(self) -> None:
        pass

    def get_batch_size(self) -> int:
        raise NotImplementedError

    def get_batch(self, names: list[str]) -> list[int] | None:
        raise NotImplementedError

    def read_calibration_cache(self) -> bytes | None:
        raise NotImplementedError

    def write_calibration_cache(self, cache: bytes) -> None:
        raise NotImplementedError


class IOptimizationProfile:
    def __init__(self) -> None:
        self.shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}

    def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:
        self.shapes[input] = (tuple(min), tuple(opt), tuple(max))


class ITimingCache:
    """Timings of one GPU model: a cache made on another one is refused unless mismatches are
    ignored, as TensorRT does."""

    def __init__(self, data: bytes) -> None:
        text = bytes(data).decode() if data else ""
        gpu, _, builds = text.rpartition(":") if text else ("", "", "0")
        self.gpu = gpu.removeprefix("timing:") if gpu else _current_gpu()
        self.builds = int(builds or 0)

    def serialize(self) -> bytes:
        return f"timing:{self.gpu}:{self.builds}".encode()


def _current_gpu() -> str:
    cuda = FakeTensorRT.cuda
    return cuda.gpus[cuda.current_device] if cuda is not None and cuda.gpus else ""


class IBuilderConfig:
    """TensorRT 11's builder config (no calibrator, no calibration profile)."""

    def __init__(self) -> None:
        self.flags: set[int] = set()
        self.pool_limits: dict[MemoryPoolType, int] = {}
        self.profiles: list[IOptimizationProfile] = []
        self.timing_cache: ITimingCache | None = None
        self.ignore_mismatch: bool | None = None

    def set_memory_pool_limit(self, pool: MemoryPoolType, pool_size: int) -> None:
        self.pool_limits[pool] = pool_size

    def set_flag(self, flag: IntEnum) -> None:
        self.flags.add(int(flag))

    def get_flag(self, flag: IntEnum) -> bool:
        return int(flag) in self.flags

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def create_timing_cache(self, serialized_timing_cache: bytes) -> ITimingCache:
        return ITimingCache(serialized_timing_cache)

    def set_timing_cache(self, cache: ITimingCache, ignore_mismatch: bool) -> bool:
        if cache.gpu != _current_gpu() and not ignore_mismatch:
            return False  # and the config keeps no timing cache: get_timing_cache() is None
        self.timing_cache, self.ignore_mismatch = cache, ignore_mismatch
        return True

    def get_timing_cache(self) -> ITimingCache | None:
        return self.timing_cache


class IBuilderConfig10(IBuilderConfig):
    """TensorRT 10's builder config: implicit quantisation with a calibrator."""

    def __init__(self) -> None:
        super().__init__()
        self.calibration_profile: IOptimizationProfile | None = None
        self._calibrator: Any = None

    @property
    def int8_calibrator(self) -> Any:
        return self._calibrator

    @int8_calibrator.setter
    def int8_calibrator(self, calibrator: Any) -> None:
        self._calibrator = calibrator

    def set_calibration_profile(self, profile: IOptimizationProfile) -> bool:
        self.calibration_profile = profile
        return True


class INetworkDefinition:
    def __init__(self, flags: int) -> None:
        self.flags = flags
        self.inputs: list[tuple[str, DataType, tuple[int, ...]]] = []
        self.model: Any = None


class _ParserError:
    def __init__(self, desc: str) -> None:
        self._desc = desc

    def desc(self) -> str:
        return self._desc

    def __str__(self) -> str:
        return f"In node -1 (parseGraph): INVALID_GRAPH: {self._desc}"


class OnnxParser:
    def __init__(self, network: INetworkDefinition, logger: ILogger) -> None:
        self.network = network
        self.errors: list[_ParserError] = []

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    def get_error(self, index: int) -> _ParserError:
        return self.errors[index]

    def parse(self, model: bytes, path: str | None = None) -> bool:
        import onnx

        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as exc:  # noqa: BLE001
            self.errors.append(_ParserError(f"Failed to parse ONNX model: {type(exc).__name__}"))
            return False
        if not proto.graph.node:
            self.errors.append(_ParserError("Assertion failed: the graph has no nodes"))
            return False
        weights = {i.name for i in proto.graph.initializer}
        for value in proto.graph.input:
            if value.name in weights:
                continue
            dims = tuple(
                d.dim_value if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim
            )
            self.network.inputs.append((value.name, DataType.FLOAT, dims))
        self.network.model = proto
        return True


def _model_precision(model: Any) -> str:
    """What a parsed model carries itself: `qdq` (Q/DQ nodes), `fp16` (half weights) or `fp32`."""
    if model is None:
        return "fp32"
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node):
        return "qdq"
    if any(t.data_type == 10 for t in model.graph.initializer):  # TensorProto.FLOAT16
        return "fp16"
    return "fp32"


class Builder:
    """Builds a fake plan: JSON naming the inputs, the profile, the flags and the calibration."""

    builds = 0

    def __init__(self, logger: ILogger) -> None:
        self.logger = _tensorrt_logger(logger)

    def create_network(self, flags: int = 0) -> INetworkDefinition:
        return INetworkDefinition(flags)

    def create_builder_config(self) -> IBuilderConfig:
        return FakeTensorRT.current.IBuilderConfig()  # type: ignore[no-any-return]

    def create_optimization_profile(self) -> IOptimizationProfile:
        return IOptimizationProfile()

    def build_serialized_network(self, network: INetworkDefinition, config: IBuilderConfig) -> bytes | None:
        type(self).builds += 1
        profile = config.profiles[0].shapes if config.profiles else {}
        calibration: dict[str, Any] = {}
        calibrator = getattr(config, "int8_calibrator", None)
        if int(BuilderFlag.INT8) in config.flags and calibrator is not None:
            # As TensorRT does: the cache first; otherwise batches until None, then write the cache.
            cached = calibrator.read_calibration_cache()
            if cached:
                calibration = {"from_cache": bytes(cached).decode()}
            else:
                size = calibrator.get_batch_size()
                names = [name for name, _, _ in network.inputs]
                shapes = config.calibration_profile.shapes if config.calibration_profile else {}  # type: ignore[attr-defined]
                for name, _, dims in network.inputs:
                    shape = shapes.get(name, (dims,))[0]
                    fixed = [d for d, s in zip(dims, shape) if d >= 0 and d != s]
                    if len(shape) != len(dims) or fixed:
                        self.logger.log(
                            _Severity.ERROR,
                            f"calibration profile {list(shape)} does not fit input {name} {list(dims)}",
                        )
                        return None
                batches = 0
                while calibrator.get_batch(names) is not None:
                    batches += 1
                calibrator.write_calibration_cache(f"table:{batches}x{size}".encode())
                calibration = {"batches": batches, "batch_size": size}
        inputs = []
        for name, dtype, dims in network.inputs:
            if name not in profile and any(d < 0 for d in dims):
                self.logger.log(_Severity.ERROR, f"input {name} has dynamic dims and no profile")
                return None
            inputs.append(
                {"name": name, "dtype": int(dtype), "shape": list(dims), "profile": profile.get(name)}
            )
        cache = config.get_timing_cache()
        if cache is not None:
            cache.builds += 1
        strongly_typed = FakeTensorRT.current.NetworkDefinitionCreationFlag.STRONGLY_TYPED
        plan = {
            "fake_trt_plan": 1,
            "inputs": inputs,
            "flags": sorted(config.flags),
            "strongly_typed": bool(network.flags & (1 << int(strongly_typed))),
            "model": _model_precision(network.model),
            "workspace": config.pool_limits.get(MemoryPoolType.WORKSPACE),
            "calibration": calibration,
        }
        return json.dumps(plan).encode()


class ICudaEngine:
    def __init__(self, plan: dict[str, Any]) -> None:
        first = plan["inputs"][0]
        self.plan = plan
        self._tensors: list[tuple[str, TensorIOMode, DataType, tuple[int, ...]]] = []
        self._profiles: dict[str, list[tuple[int, ...]]] = {}
        for spec in plan["inputs"]:
            self._tensors.append(
                (spec["name"], TensorIOMode.INPUT, DataType(spec["dtype"]), tuple(spec["shape"]))
            )
            if spec["profile"]:
                self._profiles[spec["name"]] = [tuple(s) for s in spec["profile"]]
        shape = tuple(first["shape"])
        self._tensors.append(("y", TensorIOMode.OUTPUT, DataType.FLOAT, shape))
        self._tensors.append(("s", TensorIOMode.OUTPUT, DataType.FLOAT, shape[:1]))

    @property
    def num_io_tensors(self) -> int:
        return len(self._tensors)

    @property
    def num_optimization_profiles(self) -> int:
        return 1

    def get_tensor_name(self, index: int) -> str:
        return self._tensors[index][0]

    def _tensor(self, name: str) -> tuple[str, TensorIOMode, DataType, tuple[int, ...]]:
        return next(t for t in self._tensors if t[0] == name)

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return self._tensor(name)[1]

    def get_tensor_dtype(self, name: str) -> DataType:
        return self._tensor(name)[2]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self._tensor(name)[3]

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[tuple[int, ...]]:
        return self._profiles[name]

    def create_execution_context(self) -> IExecutionContext:
        return IExecutionContext(self)


class IExecutionContext:
    """Runs the fake model on "device" memory: y = 2x + 1, s = x summed over all but axis 0."""

    def __init__(self, engine: ICudaEngine) -> None:
        self.engine = engine
        self.calls: list[tuple[Any, ...]] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}

    def set_input_shape(self, name: str, shape: Any) -> bool:
        shape = tuple(int(d) for d in shape)
        self.calls.append(("set_input_shape", name, shape))
        low, _, high = self.engine._profiles.get(name, [self.engine.get_tensor_shape(name)] * 3)
        if len(shape) != len(low) or any(not lo <= d <= hi for d, lo, hi in zip(shape, low, high)):
            return False
        self.shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        if self.engine.get_tensor_mode(name) == TensorIOMode.INPUT:
            return self.shapes.get(name, self.engine.get_tensor_shape(name))
        x = self.shapes.get(
            self.engine.get_tensor_name(0), self.engine.get_tensor_shape(self.engine.get_tensor_name(0))
        )
        return x if name == "y" else x[:1]

    def set_tensor_address(self, name: str, memory: int) -> bool:
        self.calls.append(("set_tensor_address", name, int(memory)))
        self.addresses[name] = int(memory)
        return True

    def execute_async_v3(self, stream_handle: int) -> bool:
        self.calls.append(("execute_async_v3", int(stream_handle)))
        x_name = self.engine.get_tensor_name(0)
        shape = self.get_tensor_shape(x_name)
        addresses = dict(self.addresses)

        def run() -> None:
            count = int(np.prod(shape))
            x = np.ctypeslib.as_array((ctypes.c_float * count).from_address(addresses[x_name])).reshape(shape)
            y = np.ctypeslib.as_array((ctypes.c_float * count).from_address(addresses["y"])).reshape(shape)
            s = np.ctypeslib.as_array((ctypes.c_float * shape[0]).from_address(addresses["s"]))
            y[...] = 2 * x + 1
            s[...] = x.reshape(shape[0], -1).sum(axis=1)

        assert FakeTensorRT.cuda is not None
        # Work on a stream that is neither the worker's nor being captured fails, as in CUDA.
        return not FakeTensorRT.cuda.enqueue(stream_handle, run)


class Runtime:
    def __init__(self, logger: ILogger) -> None:
        self.logger = _tensorrt_logger(logger)

    def deserialize_cuda_engine(self, serialized_engine: bytes) -> ICudaEngine | None:
        try:
            plan = json.loads(bytes(serialized_engine))
            assert plan["fake_trt_plan"] == 1
        except Exception:  # noqa: BLE001
            self.logger.log(
                _Severity.ERROR,
                "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Magic tag does not match)",
            )
            return None
        return ICudaEngine(plan)


class FakeTensorRT(ModuleType):
    """The `tensorrt` module of one major version: 10 (builder precision flags, calibrators) or 11
    (strongly typed networks only: no FP16/INT8 flags, no calibrator, no calibration profile,
    STRONGLY_TYPED renumbered)."""

    cuda: FakeCudaRuntime | None = None  # where the fake engine's work goes (set by the fixture)
    first_logger: ILogger | None = None
    current: FakeTensorRT

    def __init__(self, version: str = "10.16.1.11") -> None:
        super().__init__("tensorrt")
        self.__version__ = version
        major = int(version.split(".")[0])
        common: list[Any] = [
            DataType,
            TensorIOMode,
            MemoryPoolType,
            ILogger,
            Logger,
            IOptimizationProfile,
            ITimingCache,
            INetworkDefinition,
            OnnxParser,
            Builder,
            Runtime,
            ICudaEngine,
            IExecutionContext,
        ]
        for value in common:
            setattr(self, value.__name__, value)
        if major >= 11:
            self.BuilderFlag = BuilderFlag11
            self.NetworkDefinitionCreationFlag = NetworkDefinitionCreationFlag11
            self.IBuilderConfig = IBuilderConfig
        else:
            self.BuilderFlag = BuilderFlag
            self.NetworkDefinitionCreationFlag = NetworkDefinitionCreationFlag
            self.IBuilderConfig = IBuilderConfig10
            self.IInt8EntropyCalibrator2 = IInt8EntropyCalibrator2
        self.nptype = nptype
        FakeTensorRT.current = self


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCudaRuntime]:
    """cuda-python with one fake GPU, as `cuda.bindings.runtime`."""
    from framewire.engines.registry import detect_machine

    runtime = FakeCudaRuntime()
    install_cuda(monkeypatch, runtime)
    FakeTensorRT.cuda = runtime
    detect_machine.cache_clear()
    yield runtime
    detect_machine.cache_clear()


@pytest.fixture
def fake_trt(monkeypatch: pytest.MonkeyPatch, fake_cuda: FakeCudaRuntime) -> FakeTensorRT:
    """tensorrt 10 (fake) on top of `fake_cuda`."""
    return install_trt(monkeypatch, "10.16.1.11")


@pytest.fixture
def fake_trt11(monkeypatch: pytest.MonkeyPatch, fake_cuda: FakeCudaRuntime) -> FakeTensorRT:
    """tensorrt 11 (fake) on top of `fake_cuda`."""
    return install_trt(monkeypatch, "11.4.0.106")


def install_trt(monkeypatch: pytest.MonkeyPatch, version: str) -> FakeTensorRT:
    """A fresh fake tensorrt `version` as `import tensorrt`; a new process as far as TensorRT's
    first logger goes."""
    from framewire.engines import trt_build

    module = FakeTensorRT(version)
    Builder.builds = 0
    FakeTensorRT.first_logger = None
    monkeypatch.setattr(trt_build, "_LOGGER", None)
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    return module
