"""Fakes of cuda-python's runtime module and of the tensorrt package, for machines without a GPU.

They mirror the real signatures the engines call: cuda-python functions return `(err, value...)`
tuples with `cudaError_t` codes; tensorrt's classes have the TensorRT 10 names (`num_io_tensors`,
`get_tensor_name`, `set_input_shape`, `set_tensor_address`, `execute_async_v3`, `Builder`,
`OnnxParser`, `IInt8EntropyCalibrator2`, ...). "Device" memory is host memory here, so copies and
the fake engine's kernel really move bytes, and a CUDA graph really replays what was captured.

The fake engine computes, for its input `x` of any shape: `y = 2 * x + 1` (same shape) and
`s = x.sum(axis=1..)` ([N]).

Use the fixtures `fake_cuda` (cuda-python present, one GPU) and `fake_trt` (tensorrt too); they
install the modules into `sys.modules` for the test only.
"""

from __future__ import annotations

import ctypes
import json
import sys
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
    cudaErrorHostMemoryAlreadyRegistered = 712
    cudaErrorStreamCaptureUnsupported = 900


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
    def __init__(self, handle: int) -> None:
        self._handle = handle

    def __int__(self) -> int:
        return self._handle


class cudaDeviceProp:
    def __init__(self, name: str) -> None:
        self.name = name.encode() + b"\0" * 8  # a char[256] in the real struct


OK = cudaError_t.cudaSuccess


class FakeCudaRuntime(ModuleType):
    """`cuda.bindings.runtime` (or `cuda.cudart`): functions returning `(err, value...)`."""

    cudaError_t = cudaError_t
    cudaMemcpyKind = cudaMemcpyKind
    cudaStreamCaptureMode = cudaStreamCaptureMode
    cudaStreamNonBlocking = 1
    cudaHostRegisterDefault = 0

    def __init__(self, gpus: tuple[str, ...] = ("NVIDIA Fake GPU",), *, no_driver: str = "") -> None:
        super().__init__("cuda.bindings.runtime")
        self.gpus = gpus
        self.no_driver = no_driver  # "raise" (cuda-python 13) or "return" (older): no libcuda
        self.calls: list[tuple[Any, ...]] = []
        self.fail: dict[str, cudaError_t] = {}  # function name -> error it returns
        self.memory: dict[int, Any] = {}  # ptr -> ctypes buffer ("device" and pinned host memory)
        self.pinned: dict[int, int] = {}  # host ptr -> size (cudaHostRegister)
        self.host_allocations: set[int] = set()
        self.current_device = 0
        self.capturing: dict[int, list[Callable[[], None]]] = {}
        self.graphs: dict[int, list[Callable[[], None]]] = {}
        self._next_handle = 1

    # helpers for the fake engine and the tests

    def _record(self, name: str, *args: Any) -> cudaError_t:
        self.calls.append((name, *args))
        return self.fail.get(name, OK)

    def enqueue(self, stream: int, work: Callable[[], None]) -> None:
        """Run `work` now, or record it when `stream` is being captured."""
        if int(stream) in self.capturing:
            self.capturing[int(stream)].append(work)
        else:
            work()

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]

    def _alloc(self, size: int) -> int:
        buffer = (ctypes.c_uint8 * size)()
        ptr = ctypes.addressof(buffer)
        self.memory[ptr] = buffer
        return ptr

    # devices

    def cudaGetDeviceCount(self) -> tuple[cudaError_t, int]:
        if self.no_driver == "raise":
            raise RuntimeError("Failed to dlopen libcuda.so.1")
        if self.no_driver:
            return cudaError_t.cudaErrorInsufficientDriver, 0
        if not self.gpus:
            return cudaError_t.cudaErrorNoDevice, 0
        return self._record("cudaGetDeviceCount"), len(self.gpus)

    def cudaGetDeviceProperties(self, device: int) -> tuple[cudaError_t, cudaDeviceProp | None]:
        if not 0 <= device < len(self.gpus):
            return cudaError_t.cudaErrorInvalidDevice, None
        return self._record("cudaGetDeviceProperties", device), cudaDeviceProp(self.gpus[device])

    def cudaSetDevice(self, device: int) -> tuple[cudaError_t]:
        if not 0 <= device < len(self.gpus):
            return (cudaError_t.cudaErrorInvalidDevice,)
        self.current_device = device
        return (self._record("cudaSetDevice", device),)

    def cudaGetErrorName(self, error: cudaError_t) -> tuple[cudaError_t, bytes]:
        return OK, cudaError_t(error).name.encode()

    # memory

    def cudaMalloc(self, size: int) -> tuple[cudaError_t, int]:
        err = self._record("cudaMalloc", size)
        return (err, 0) if err else (OK, self._alloc(size))

    def cudaFree(self, ptr: int) -> tuple[cudaError_t]:
        self.memory.pop(int(ptr), None)
        return (self._record("cudaFree", ptr),)

    def cudaMallocHost(self, size: int) -> tuple[cudaError_t, int]:
        err = self._record("cudaMallocHost", size)
        if err:
            return err, 0
        ptr = self._alloc(size)
        self.host_allocations.add(ptr)
        return OK, ptr

    def cudaFreeHost(self, ptr: int) -> tuple[cudaError_t]:
        self.host_allocations.discard(int(ptr))
        self.memory.pop(int(ptr), None)
        return (self._record("cudaFreeHost", ptr),)

    def cudaHostRegister(self, ptr: int, size: int, flags: int) -> tuple[cudaError_t]:
        err = self._record("cudaHostRegister", ptr, size, flags)
        if not err:
            if int(ptr) in self.pinned:
                return (cudaError_t.cudaErrorHostMemoryAlreadyRegistered,)
            self.pinned[int(ptr)] = int(size)
        return (err,)

    def cudaHostUnregister(self, ptr: int) -> tuple[cudaError_t]:
        self.pinned.pop(int(ptr), None)
        return (self._record("cudaHostUnregister", ptr),)

    def cudaMemcpy(self, dst: int, src: int, count: int, kind: cudaMemcpyKind) -> tuple[cudaError_t]:
        err = self._record("cudaMemcpy", dst, src, count, kind)
        if not err:
            ctypes.memmove(dst, src, count)
        return (err,)

    def cudaMemcpyAsync(
        self, dst: int, src: int, count: int, kind: cudaMemcpyKind, stream: cudaStream_t
    ) -> tuple[cudaError_t]:
        err = self._record("cudaMemcpyAsync", dst, src, count, kind, int(stream))
        if not err:
            self.enqueue(int(stream), lambda: ctypes.memmove(dst, src, count))
        return (err,)

    # streams and graphs

    def cudaStreamCreateWithFlags(self, flags: int) -> tuple[cudaError_t, cudaStream_t]:
        self._next_handle += 1
        return self._record("cudaStreamCreateWithFlags", flags), cudaStream_t(0x1000 + self._next_handle)

    def cudaStreamSynchronize(self, stream: cudaStream_t) -> tuple[cudaError_t]:
        return (self._record("cudaStreamSynchronize", int(stream)),)

    def cudaStreamDestroy(self, stream: cudaStream_t) -> tuple[cudaError_t]:
        return (self._record("cudaStreamDestroy", int(stream)),)

    def cudaStreamBeginCapture(self, stream: cudaStream_t, mode: cudaStreamCaptureMode) -> tuple[cudaError_t]:
        err = self._record("cudaStreamBeginCapture", int(stream), mode)
        if not err:
            self.capturing[int(stream)] = []
        return (err,)

    def cudaStreamEndCapture(self, stream: cudaStream_t) -> tuple[cudaError_t, int]:
        work = self.capturing.pop(int(stream), [])
        err = self._record("cudaStreamEndCapture", int(stream))
        if err:
            return err, 0
        self._next_handle += 1
        self.graphs[self._next_handle] = work
        return OK, self._next_handle

    def cudaGraphInstantiate(self, graph: int, flags: int) -> tuple[cudaError_t, int]:
        err = self._record("cudaGraphInstantiate", graph, flags)
        return err, (0 if err else 0x100000 + graph)

    def cudaGraphLaunch(self, graph_exec: int, stream: cudaStream_t) -> tuple[cudaError_t]:
        err = self._record("cudaGraphLaunch", graph_exec, int(stream))
        if not err:
            for work in self.graphs[graph_exec - 0x100000]:
                self.enqueue(int(stream), work)
        return (err,)

    def cudaGraphExecDestroy(self, graph_exec: int) -> tuple[cudaError_t]:
        return (self._record("cudaGraphExecDestroy", graph_exec),)

    def cudaGraphDestroy(self, graph: int) -> tuple[cudaError_t]:
        self.graphs.pop(graph, None)
        return (self._record("cudaGraphDestroy", graph),)


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


def nptype(dtype: DataType) -> type:
    if dtype not in _NPTYPES:
        raise TypeError(f"Could not resolve TensorRT datatype to an equivalent numpy datatype. {dtype}")
    return _NPTYPES[dtype]  # type: ignore[return-value]


class TensorIOMode(IntEnum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class BuilderFlag(IntEnum):
    FP16 = 0
    INT8 = 1


class MemoryPoolType(IntEnum):
    WORKSPACE = 0


class NetworkDefinitionCreationFlag(IntEnum):
    EXPLICIT_BATCH = 0  # deprecated and ignored in TensorRT 10, still defined


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


class IInt8EntropyCalibrator2:
    def __init__(self) -> None:
        pass


class IOptimizationProfile:
    def __init__(self) -> None:
        self.shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}

    def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:
        self.shapes[input] = (tuple(min), tuple(opt), tuple(max))


class ITimingCache:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)

    def serialize(self) -> bytes:
        return self.data + b"+timings"


class IBuilderConfig:
    def __init__(self) -> None:
        self.flags: set[BuilderFlag] = set()
        self.pool_limits: dict[MemoryPoolType, int] = {}
        self.profiles: list[IOptimizationProfile] = []
        self.calibration_profile: IOptimizationProfile | None = None
        self.int8_calibrator: Any = None
        self.timing_cache: ITimingCache | None = None
        self.ignore_mismatch: bool | None = None

    def set_memory_pool_limit(self, pool: MemoryPoolType, pool_size: int) -> None:
        self.pool_limits[pool] = pool_size

    def set_flag(self, flag: BuilderFlag) -> None:
        self.flags.add(flag)

    def get_flag(self, flag: BuilderFlag) -> bool:
        return flag in self.flags

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def set_calibration_profile(self, profile: IOptimizationProfile) -> bool:
        self.calibration_profile = profile
        return True

    def create_timing_cache(self, serialized_timing_cache: bytes) -> ITimingCache:
        return ITimingCache(serialized_timing_cache)

    def set_timing_cache(self, cache: ITimingCache, ignore_mismatch: bool) -> bool:
        self.timing_cache, self.ignore_mismatch = cache, ignore_mismatch
        return True

    def get_timing_cache(self) -> ITimingCache | None:
        return self.timing_cache


class INetworkDefinition:
    def __init__(self, flags: int) -> None:
        self.flags = flags
        self.inputs: list[tuple[str, DataType, tuple[int, ...]]] = []


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
        return True


class Builder:
    """Builds a fake plan: JSON naming the inputs, the profile, the flags and the calibration."""

    builds = 0

    def __init__(self, logger: ILogger) -> None:
        self.logger = logger

    def create_network(self, flags: int = 0) -> INetworkDefinition:
        return INetworkDefinition(flags)

    def create_builder_config(self) -> IBuilderConfig:
        return IBuilderConfig()

    def create_optimization_profile(self) -> IOptimizationProfile:
        return IOptimizationProfile()

    def build_serialized_network(self, network: INetworkDefinition, config: IBuilderConfig) -> bytes | None:
        type(self).builds += 1
        profile = config.profiles[0].shapes if config.profiles else {}
        calibration: dict[str, Any] = {}
        calibrator = config.int8_calibrator
        if BuilderFlag.INT8 in config.flags and calibrator is not None:
            # As TensorRT does: the cache first; otherwise batches until None, then write the cache.
            cached = calibrator.read_calibration_cache()
            if cached:
                calibration = {"from_cache": bytes(cached).decode()}
            else:
                size = calibrator.get_batch_size()
                names = [name for name, _, _ in network.inputs]
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
        plan = {
            "fake_trt_plan": 1,
            "inputs": inputs,
            "flags": sorted(int(f) for f in config.flags),
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

        FakeTensorRT.cuda.enqueue(stream_handle, run)
        return True


class Runtime:
    def __init__(self, logger: ILogger) -> None:
        self.logger = logger

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
    """The `tensorrt` module."""

    cuda: FakeCudaRuntime  # where the fake engine's work goes (set by the fixture)

    def __init__(self) -> None:
        super().__init__("tensorrt")
        self.__version__ = "10.3.0"
        for value in (
            DataType,
            TensorIOMode,
            BuilderFlag,
            MemoryPoolType,
            NetworkDefinitionCreationFlag,
            ILogger,
            Logger,
            IInt8EntropyCalibrator2,
            IOptimizationProfile,
            IBuilderConfig,
            OnnxParser,
            Builder,
            Runtime,
            ICudaEngine,
            IExecutionContext,
        ):
            setattr(self, value.__name__, value)
        self.nptype = nptype


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCudaRuntime]:
    """cuda-python with one fake GPU, as `cuda.bindings.runtime`."""
    from engines.registry import detect_machine

    runtime = FakeCudaRuntime()
    install_cuda(monkeypatch, runtime)
    FakeTensorRT.cuda = runtime
    detect_machine.cache_clear()
    yield runtime
    detect_machine.cache_clear()


@pytest.fixture
def fake_trt(monkeypatch: pytest.MonkeyPatch, fake_cuda: FakeCudaRuntime) -> FakeTensorRT:
    """tensorrt 10 (fake) on top of `fake_cuda`."""
    module = FakeTensorRT()
    Builder.builds = 0
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    return module
