"""Thin helpers over cuda-python's runtime API: devices, pinned and device memory, streams, graphs.

cuda-python is imported lazily (it is part of the `gpu` extra only), from `cuda.bindings.runtime`
(cuda-python >= 12.6, and 13) or `cuda.cudart` (older releases). Its calls return tuples
`(err, value...)`; `check` turns a failed one into an `EngineError` that names the call and the CUDA
error. Without a driver, cuda-python 12.9 and 13.x return `(cudaErrorInsufficientDriver, None)` from
every call (checked against the real modules in tests/contract); `gpu_status` reads the error before
the value, copes with a binding that raises too, and never raises, so that `backend: auto` can ask
on any machine.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from framewire.pipeline.errors import EngineError

log = logging.getLogger(__name__)

INSTALL_HINT = "install the gpu extra: make EXTRAS=gpu"
NO_GPU = "no CUDA driver / GPU found"


def runtime() -> ModuleType:
    """The cuda-python runtime module; EngineError naming the package when it is not installed."""
    try:
        from cuda.bindings import runtime as rt  # cuda-python >= 12.6

        return rt
    except ImportError:
        pass
    try:
        from cuda import cudart  # cuda-python < 12.6

        return cudart  # type: ignore[no-any-return]
    except ImportError:
        raise EngineError(f"the cuda-python package is not installed ({INSTALL_HINT})") from None


def error_name(rt: ModuleType, err: Any) -> str:
    """`cudaErrorMemoryAllocation` for an error code, as far as the bindings can say."""
    name = getattr(err, "name", None)
    if isinstance(name, str):
        return name
    try:
        _, text = rt.cudaGetErrorName(err)
        return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # noqa: BLE001 - the name is only decoration
        return f"cudaError {int(err)}"


def check(result: Any, what: str, rt: ModuleType | None = None) -> Any:
    """The value(s) of a cuda-python call's `(err, value...)` result, or EngineError naming `what`.

    Returns None for `(err,)`, the value for `(err, value)` and a tuple for more values.
    """
    if not isinstance(result, tuple):
        result = (result,)
    err, values = result[0], result[1:]
    if failed(err):
        raise EngineError(f"CUDA {what} failed: {error_name(rt or runtime(), err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def failed(err: Any) -> bool:
    """Whether a cuda-python error code is anything but cudaSuccess (0)."""
    try:
        return int(err) != 0
    except (TypeError, ValueError):
        return getattr(err, "name", "cudaSuccess") != "cudaSuccess"


def call(name: str, *args: Any) -> Any:
    """Run `cudaXxx(*args)` and check it; a binding that raises becomes an EngineError too."""
    rt = runtime()
    try:
        result = getattr(rt, name)(*args)
    except EngineError:
        raise
    except Exception as exc:  # noqa: BLE001 - a binding may raise (bad argument types) instead of returning
        raise EngineError(f"CUDA {name} failed: {_first_line(exc)}") from None
    return check(result, name, rt)


# --- devices ---------------------------------------------------------------------------------


def gpu_status() -> tuple[int, str]:
    """(number of CUDA devices, why there are none); never raises.

    Asks cuda-python when it is installed, else the driver library itself (libcuda via ctypes), so
    that `backend: auto` can decide on a machine without cuda-python, a driver or a GPU.
    """
    try:
        rt = runtime()
    except EngineError:
        return _driver_device_count()
    try:
        result = rt.cudaGetDeviceCount()
    except Exception as exc:  # noqa: BLE001 - defensive: a binding that raises instead of returning
        return 0, f"{NO_GPU} ({_first_line(exc)})"
    if not isinstance(result, tuple):
        result = (result,)
    # The error first: without a driver, cuda-python 12.9 and 13.x return
    # (cudaErrorInsufficientDriver, None), and None is no count.
    if failed(result[0]):
        return 0, f"{NO_GPU} (cudaGetDeviceCount: {error_name(rt, result[0])})"
    count = int(result[1]) if len(result) > 1 and result[1] is not None else 0
    if count == 0:
        return 0, NO_GPU
    return count, ""


def device_count() -> int:
    """Number of CUDA devices; 0 without cuda-python, a driver or a GPU (never raises)."""
    return gpu_status()[0]


def require_device(device: int) -> str:
    """Check that GPU `device` exists and return its name; one-line EngineError otherwise."""
    count, why = gpu_status()
    if count == 0:
        raise EngineError(why or NO_GPU)
    if not 0 <= device < count:
        raise EngineError(f"engine.devices: GPU {device} not found (this machine has {count}: 0-{count - 1})")
    return device_name(device)


def device_name(device: int) -> str:
    """The GPU's marketing name, e.g. `NVIDIA H100 80GB HBM3`."""
    props = call("cudaGetDeviceProperties", device)
    name = props.name
    if isinstance(name, bytes):
        name = name.split(b"\0", 1)[0].decode(errors="replace")
    return str(name)


def set_device(device: int) -> None:
    """Make `device` current for this thread (the infer worker's GPU)."""
    call("cudaSetDevice", device)


def schedule_blocking(device: int) -> None:
    """Make every wait of this process on GPU `device` sleep in the driver instead of spinning a
    core: cudaDeviceScheduleBlockingSync on the device's primary context, which the libraries share.
    framewire's own waits sleep already (`Stream`); this reaches ONNX Runtime's CUDA provider's and
    TensorRT's internal ones. EngineError when cuda-python is missing or CUDA refuses."""
    rt = runtime()
    set_device(device)
    call("cudaSetDeviceFlags", rt.cudaDeviceScheduleBlockingSync)


def versions() -> dict[str, int | None]:
    """The CUDA version the driver supports and the one the cuda-python runtime was built for, as
    CUDA's integers (12040 = 12.4); None where it cannot be told. Never raises."""
    found: dict[str, int | None] = {"driver": None, "runtime": None}
    try:
        rt = runtime()
    except EngineError:
        return found
    for key, name in (("driver", "cudaDriverGetVersion"), ("runtime", "cudaRuntimeGetVersion")):
        try:
            result = getattr(rt, name)()
        except Exception:  # noqa: BLE001 - only information
            continue
        # Without a driver cudaDriverGetVersion succeeds with 0: no driver is no version.
        if isinstance(result, tuple) and len(result) > 1 and not failed(result[0]) and result[1]:
            found[key] = int(result[1])
    return found


def version_text(version: int | None) -> str:
    """12040 -> '12.4'."""
    if not version:
        return "unknown"
    return f"{version // 1000}.{version % 1000 // 10}"


def memory_info(device: int) -> tuple[int, int] | None:
    """(free, total) bytes of GPU `device`, None when it cannot be told. Never raises."""
    try:
        set_device(device)
        free, total = call("cudaMemGetInfo")
        return int(free), int(total)
    except EngineError:
        return None


def _driver_device_count() -> tuple[int, str]:
    """Device count straight from libcuda (no cuda-python): cuInit + cuDeviceGetCount."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0, f"{NO_GPU} (libcuda.so.1 cannot be loaded)"
    try:
        if lib.cuInit(0) != 0:
            return 0, f"{NO_GPU} (cuInit failed)"
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
            return 0, NO_GPU
        return count.value, ""
    except (AttributeError, OSError) as exc:
        return 0, f"{NO_GPU} ({exc})"


# --- memory ----------------------------------------------------------------------------------


def _host_view(ptr: int, nbytes: int) -> np.ndarray:
    """A uint8 numpy view of `nbytes` of host memory at `ptr` (no copy)."""
    if nbytes == 0:
        return np.empty(0, dtype=np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))


class HostBuffer:
    """Pinned (page-locked) host memory from cudaMallocHost: DMA to and from the GPU at full speed."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = int(nbytes)
        self.ptr = int(call("cudaMallocHost", max(self.nbytes, 1)))
        self._array = _host_view(self.ptr, self.nbytes)

    def view(self, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """The first bytes of the buffer as an array of `shape` and `dtype` (no copy)."""
        count = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if count > self.nbytes:
            raise EngineError(f"host buffer of {self.nbytes} bytes cannot hold {shape} {np.dtype(dtype)}")
        return self._array[:count].view(dtype).reshape(shape)

    def close(self) -> None:
        if self.ptr:
            self._array = np.empty(0, dtype=np.uint8)
            ptr, self.ptr = self.ptr, 0
            _quietly("cudaFreeHost", ptr)


class HostRegistration:
    """An existing host buffer (e.g. the frame pool's mmap) registered as pinned memory.

    Holds a reference to the array so the memory outlives the registration; `close` unregisters.
    """

    def __init__(self, array: np.ndarray, flags: int = 0) -> None:
        if not array.flags.c_contiguous:
            raise EngineError("only a contiguous buffer can be registered as pinned memory")
        self.array = array
        self.ptr = int(array.ctypes.data)
        self.nbytes = int(array.nbytes)
        # flags 0 = cudaHostRegisterDefault: the memory is pinned for this context's device.
        call("cudaHostRegister", self.ptr, self.nbytes, flags)

    def contains(self, ptr: int, nbytes: int) -> bool:
        """Whether `nbytes` at `ptr` lie entirely inside the registered memory."""
        return self.ptr != 0 and self.ptr <= ptr and ptr + nbytes <= self.ptr + self.nbytes

    def close(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            _quietly("cudaHostUnregister", ptr)
            del self.array


class DeviceBuffer:
    """Device memory from cudaMalloc."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = int(nbytes)
        self.ptr = int(call("cudaMalloc", max(self.nbytes, 1)))

    def close(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            _quietly("cudaFree", ptr)


# --- streams, copies, graphs -------------------------------------------------------------------


class Stream:
    """A non-blocking CUDA stream: one per infer worker, so copies and kernels overlap other work.

    `synchronize` sleeps in the driver until the stream's work is done (an event made with
    cudaEventBlockingSync is recorded and waited on), where cudaStreamSynchronize spins: a core busy
    for the whole GPU time of every batch, which on a host of several infer workers per GPU is CPU
    taken from decode and encode. `spin=True` keeps the spin (30-130 us less latency a batch on an H200,
    like trtexec's --useSpinWait)."""

    def __init__(self, *, spin: bool = False) -> None:
        rt = runtime()
        self.handle: Any = call("cudaStreamCreateWithFlags", rt.cudaStreamNonBlocking)
        self._done: Any = None
        if not spin:
            try:
                self._done = call("cudaEventCreateWithFlags", rt.cudaEventBlockingSync | rt.cudaEventDisableTiming)
            except BaseException:
                self.close()
                raise

    def __int__(self) -> int:
        return int(self.handle)

    @property
    def spins(self) -> bool:
        return self._done is None

    def synchronize(self) -> None:
        if self._done is None:
            call("cudaStreamSynchronize", self.handle)
            return
        call("cudaEventRecord", self._done, self.handle)
        call("cudaEventSynchronize", self._done)

    def close(self) -> None:
        if self._done is not None:
            done, self._done = self._done, None
            _quietly("cudaEventDestroy", done)
        if self.handle is not None:
            handle, self.handle = self.handle, None
            _quietly("cudaStreamDestroy", handle)


def memcpy_htod_async(dst: int, src: int, nbytes: int, stream: Stream) -> None:
    rt = runtime()
    kind = rt.cudaMemcpyKind.cudaMemcpyHostToDevice
    call("cudaMemcpyAsync", dst, src, nbytes, kind, stream.handle)


def memcpy_htod(dst: int, src: int, nbytes: int) -> None:
    """A synchronous host-to-device copy (calibration: off the hot path)."""
    rt = runtime()
    call("cudaMemcpy", dst, src, nbytes, rt.cudaMemcpyKind.cudaMemcpyHostToDevice)


def memcpy_dtoh_async(dst: int, src: int, nbytes: int, stream: Stream) -> None:
    rt = runtime()
    kind = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
    call("cudaMemcpyAsync", dst, src, nbytes, kind, stream.handle)


class Graph:
    """A captured and instantiated CUDA graph: what `enqueue` put on the stream, replayable at once."""

    def __init__(self, stream: Stream, enqueue: Callable[[], None]) -> None:
        rt = runtime()
        self._graph: Any = None
        self.exec: Any = None
        mode = rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        call("cudaStreamBeginCapture", stream.handle, mode)
        try:
            enqueue()
        except BaseException:
            # A capture must be ended whatever happened, or the stream stays unusable.
            try:
                rt.cudaStreamEndCapture(stream.handle)
            except Exception:  # noqa: BLE001 - the first error is the one to report
                pass
            raise
        self._graph = call("cudaStreamEndCapture", stream.handle)
        try:
            self.exec = call("cudaGraphInstantiate", self._graph, 0)
        except BaseException:
            # The captured graph is ours until an executable graph owns it: free it here.
            self.close()
            raise

    def launch(self, stream: Stream) -> None:
        call("cudaGraphLaunch", self.exec, stream.handle)

    def close(self) -> None:
        if self.exec is not None:
            _quietly("cudaGraphExecDestroy", self.exec)
            self.exec = None
        if self._graph is not None:
            _quietly("cudaGraphDestroy", self._graph)
            self._graph = None


def _quietly(name: str, *args: Any) -> None:
    """Release calls at close: a failure is logged, never raised (the process may be exiting)."""
    try:
        call(name, *args)
    except EngineError as exc:
        log.debug("%s", exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
