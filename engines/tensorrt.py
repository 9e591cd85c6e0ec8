"""Native TensorRT backend: a serialized engine run with the TensorRT 10 name-based API.

Buffers are allocated once, at the profile's largest shapes: a pinned host buffer and a device
buffer per tensor, their device addresses bound with `set_tensor_address` once. Each `infer` sets
the input shapes only when they change, copies inputs host-to-device on the worker's own stream
(straight from a frame pool registered as pinned memory, else through the pinned staging buffer),
runs `execute_async_v3` - or replays the CUDA graph captured for these shapes - and copies the
requested outputs back, trimmed to the frames actually given.

Frame pools are registered when the infer stage is told a pool is attached (`pin_pool`) and
unregistered when it is removed (`unpin_pool`), before the pool is unmapped: a registration holds
the pool's memory, so a pool still registered could not be closed. The same calls work on TensorRT
10 and 11 (the runtime API did not change).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from framewire.engines import cuda
from framewire.engines.base import Engine
from framewire.engines.trt_build import construct, import_tensorrt, make_logger
from framewire.pipeline.errors import EngineError
from framewire.pipeline.wire.framepool import FramePool
from framewire.pipeline.wire.tensors import Dim, TensorSpec

log = logging.getLogger(__name__)

MAX_GRAPHS = 16
"""CUDA graphs kept (one per distinct set of input shapes); beyond that, plain launches."""


@dataclass
class _Tensor:
    name: str
    is_input: bool
    dtype: np.dtype
    shape: tuple[int, ...]  # as the engine declares it, -1 where dynamic
    min_shape: tuple[int, ...]
    max_shape: tuple[int, ...]
    host: cuda.HostBuffer | None = None
    device: cuda.DeviceBuffer | None = None

    @property
    def spec(self) -> TensorSpec:
        dims: tuple[Dim, ...] = tuple(d if d >= 0 else None for d in self.shape)
        return TensorSpec(self.name, self.dtype, dims)


def _nbytes(shape: Sequence[int], dtype: np.dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


class TensorRTEngine(Engine):
    """One deserialized TensorRT engine with its execution context, buffers and CUDA stream."""

    backend = "tensorrt"

    def __init__(
        self,
        engine_path: str | Path,
        *,
        device: int = 0,
        cuda_graph: bool = False,
        spin_wait: bool = False,
        model_path: str | None = None,
        pin_frame_pool: bool = True,
    ) -> None:
        self.engine_path = str(engine_path)
        self.model_path = model_path or self.engine_path
        self.device = device
        self.cuda_graph = cuda_graph
        self._pin_frame_pool = pin_frame_pool
        self._closed = True
        trt = import_tensorrt()
        self._gpu_name = cuda.require_device(device)
        cuda.set_device(device)
        self._thread = threading.get_ident()
        self._trt_logger = make_logger(trt)
        self._trt_logger.clear()
        self._runtime = construct(trt.Runtime, self._trt_logger, what=f"a runtime on GPU {device}")
        try:
            data = Path(self.engine_path).read_bytes()
        except OSError as exc:
            raise EngineError(f"TensorRT engine {self.engine_path}: cannot read it: {exc.strerror}") from None
        self._engine = self._runtime.deserialize_cuda_engine(data)
        if self._engine is None:
            detail = self._trt_logger.last_error or "built by another TensorRT version or for another GPU?"
            raise EngineError(f"TensorRT engine {self.engine_path} cannot be loaded: {detail}")
        self._context = self._engine.create_execution_context()
        if self._context is None:
            raise EngineError(
                f"TensorRT engine {self.engine_path}: no execution context (out of GPU memory?)"
            )
        self._closed = False
        self._stream = cuda.Stream(spin=spin_wait)  # blocking by default: the worker sleeps while the GPU works
        self._graphs: dict[tuple[tuple[int, ...], ...], cuda.Graph] = {}
        self._graphs_failed = False
        self._pinned: dict[str, cuda.HostRegistration] = {}  # pool name -> its registration
        self._out_shapes: dict[tuple[tuple[int, ...], ...], dict[str, tuple[int, ...]]] = {}
        try:
            self._tensors = self._describe(trt)
            self._allocate()
        except BaseException:
            self.close()
            raise
        self.inputs = tuple(t.spec for t in self._tensors if t.is_input)
        self.outputs = tuple(t.spec for t in self._tensors if not t.is_input)
        log.info("TensorRT engine %s loaded on GPU %d (%s)", self.engine_path, device, self._gpu_name)

    @property
    def provider(self) -> str:
        return f"TensorRT on GPU {self.device} ({self._gpu_name})"

    @property
    def max_batch(self) -> int | None:
        """The largest batch the engine takes (its profile's max on axis 0), for dynamic batching."""
        batches = {t.max_shape[0] for t in self._tensors if t.is_input and t.max_shape}
        return min(batches) if batches else None

    # --- set-up --------------------------------------------------------------------------------

    def _describe(self, trt: Any) -> list[_Tensor]:
        engine = self._engine
        tensors: list[_Tensor] = []
        for index in range(engine.num_io_tensors):
            name = engine.get_tensor_name(index)
            is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            try:
                dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            except TypeError:
                raise EngineError(
                    f"TensorRT engine {self.engine_path}: tensor {name!r} has a type numpy cannot hold "
                    f"({engine.get_tensor_dtype(name)})"
                ) from None
            shape = tuple(int(d) for d in engine.get_tensor_shape(name))
            low = high = shape
            if is_input and any(d < 0 for d in shape):
                low_dims, _, high_dims = engine.get_tensor_profile_shape(name, 0)
                low, high = tuple(int(d) for d in low_dims), tuple(int(d) for d in high_dims)
            tensors.append(_Tensor(name, is_input, dtype, shape, low, high))
        # Outputs at their largest: every input at the profile's max shape.
        for tensor in tensors:
            if tensor.is_input:
                self._set_shape(tensor.name, tensor.max_shape)
        for tensor in tensors:
            if not tensor.is_input:
                largest = tuple(int(d) for d in self._context.get_tensor_shape(tensor.name))
                if any(d < 0 for d in largest):
                    raise EngineError(
                        f"TensorRT engine {self.engine_path}: output {tensor.name!r} has a data-dependent "
                        f"shape {list(largest)}, which this backend does not support"
                    )
                tensor.min_shape = tensor.max_shape = largest
        self._current: tuple[tuple[int, ...], ...] = tuple(t.max_shape for t in tensors if t.is_input)
        return tensors

    def _allocate(self) -> None:
        for tensor in self._tensors:
            size = _nbytes(tensor.max_shape, tensor.dtype)
            tensor.host = cuda.HostBuffer(size)
            tensor.device = cuda.DeviceBuffer(size)
            # Buffers never move, so their addresses are bound once for every later launch.
            if not self._context.set_tensor_address(tensor.name, tensor.device.ptr):
                raise EngineError(f"TensorRT engine {self.engine_path}: cannot bind tensor {tensor.name!r}")

    def _set_shape(self, name: str, shape: tuple[int, ...]) -> None:
        if not self._context.set_input_shape(name, shape):
            raise EngineError(
                f"model {self.model_path}: TensorRT refused shape {list(shape)} for input {name!r}"
            )

    # --- inference -----------------------------------------------------------------------------

    def infer(
        self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Run one batch; returns the requested outputs (all when `output_names` is None) by name."""
        if self._closed:
            raise EngineError(f"model {self.model_path}: engine is closed")
        if threading.get_ident() != self._thread:
            cuda.set_device(self.device)  # the current device is per thread
            self._thread = threading.get_ident()
        inputs = [t for t in self._tensors if t.is_input]
        by_name = {t.name: t for t in self._tensors if not t.is_input}
        names = self._check_names(inputs, by_name, feeds, output_names)
        arrays, batch, padded_to = self._checked_feeds(inputs, feeds)
        key = tuple(a.shape for a in arrays)
        if key != self._current:
            for tensor, array in zip(inputs, arrays):
                self._set_shape(tensor.name, array.shape)
            self._current = key
        out_shapes = self._out_shapes.get(key)
        if out_shapes is None:
            out_shapes = {n: tuple(int(d) for d in self._context.get_tensor_shape(n)) for n in by_name}
            self._out_shapes[key] = out_shapes

        for tensor, array in zip(inputs, arrays):
            assert tensor.host is not None and tensor.device is not None
            source = self._pinned_pointer(array, tensor.host)
            if source is None:
                np.copyto(tensor.host.view(tensor.dtype, array.shape), array)
                source = tensor.host.ptr
            cuda.memcpy_htod_async(tensor.device.ptr, source, array.nbytes, self._stream)
        graph = self._graphs.get(key)
        if graph is not None:
            graph.launch(self._stream)
        else:
            self._execute()
        for name in names:
            tensor = by_name[name]
            assert tensor.host is not None and tensor.device is not None
            size = _nbytes(out_shapes[name], tensor.dtype)
            cuda.memcpy_dtoh_async(tensor.host.ptr, tensor.device.ptr, size, self._stream)
        self._stream.synchronize()
        results = {}
        for name in names:
            tensor = by_name[name]
            assert tensor.host is not None
            value = tensor.host.view(tensor.dtype, out_shapes[name])
            if padded_to is not None and value.ndim and value.shape[0] == padded_to:
                value = value[:batch]
            results[name] = value.copy()  # the pinned buffer is reused by the next batch
        if self.cuda_graph and graph is None:
            self._capture(key)
        return results

    def _check_names(
        self,
        inputs: Sequence[_Tensor],
        outputs: Mapping[str, _Tensor],
        feeds: Mapping[str, np.ndarray],
        output_names: Sequence[str] | None,
    ) -> list[str]:
        """The outputs to return; an unknown output or input is an error naming it."""
        names = list(output_names) if output_names is not None else list(outputs)
        unknown = [n for n in names if n not in outputs]
        if unknown:
            raise EngineError(f"model {self.model_path}: no output(s) {', '.join(map(repr, unknown))}")
        extra = [n for n in feeds if n not in {t.name for t in inputs}]
        if extra:
            raise EngineError(
                f"model {self.model_path}: no input(s) {', '.join(map(repr, extra))} "
                f"(inputs: {', '.join(t.name for t in inputs)})"
            )
        return names

    def _checked_feeds(
        self, inputs: Sequence[_Tensor], feeds: Mapping[str, np.ndarray]
    ) -> tuple[list[np.ndarray], int, int | None]:
        """The feeds as contiguous arrays within the profile; a batch smaller than an engine's fixed
        batch is padded with zeros (the outputs are trimmed back)."""
        arrays: list[np.ndarray] = []
        batch = 0
        padded_to: int | None = None
        for tensor in inputs:
            if tensor.name not in feeds:
                raise EngineError(f"model {self.model_path}: input {tensor.name!r} not given")
            array = np.asarray(feeds[tensor.name])
            described = f"input {tensor.name!r} {array.dtype} {tuple(array.shape)}"
            if array.dtype != tensor.dtype:
                raise EngineError(
                    f"model {self.model_path}: inference failed for {described}: expected {tensor.dtype}"
                )
            if array.ndim != len(tensor.shape):
                raise EngineError(
                    f"model {self.model_path}: inference failed for {described}: expected "
                    f"{len(tensor.shape)} dims"
                )
            batch = array.shape[0] if array.ndim else 1
            fixed_batch = tensor.shape[0] if tensor.shape else -1
            if fixed_batch > 0 and array.shape[0] < fixed_batch:
                padding = np.zeros((fixed_batch - array.shape[0], *array.shape[1:]), array.dtype)
                array = np.concatenate([array, padding])
                padded_to = fixed_batch
            if any(not lo <= d <= hi for d, lo, hi in zip(array.shape, tensor.min_shape, tensor.max_shape)):
                raise EngineError(
                    f"model {self.model_path}: inference failed for {described}: outside the engine's "
                    f"profile {list(tensor.min_shape)}..{list(tensor.max_shape)}"
                )
            arrays.append(np.ascontiguousarray(array))
        return arrays, batch, padded_to

    def _execute(self) -> None:
        if not self._context.execute_async_v3(int(self._stream)):
            detail = self._trt_logger.last_error or "execute_async_v3 returned false"
            raise EngineError(f"model {self.model_path}: TensorRT inference failed: {detail}")

    def _capture(self, key: tuple[tuple[int, ...], ...]) -> None:
        """Capture this shape's launch as a CUDA graph (after a plain run of it, as TensorRT needs)."""
        if self._graphs_failed or len(self._graphs) >= MAX_GRAPHS:
            return
        try:
            self._graphs[key] = cuda.Graph(self._stream, self._execute)
        except EngineError as exc:
            self._graphs_failed = True
            log.warning("model %s: no CUDA graphs (%s); plain launches instead", self.model_path, exc)

    def _pinned_pointer(self, array: np.ndarray, staging: cuda.HostBuffer) -> int | None:
        """The address to copy `array` from directly: when it lies in a registered frame pool, or is
        the input's own staging buffer (a batch stacked there by `input_buffer`)."""
        if not array.flags.c_contiguous:
            return None
        pointer, size = int(array.ctypes.data), int(array.nbytes)
        if pointer == staging.ptr and size <= staging.nbytes:
            return pointer
        for registration in self._pinned.values():
            if registration.contains(pointer, size):
                return pointer
        return None

    def input_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        """The input's pinned staging buffer as an array of `shape`: a batch stacked there is copied to
        the GPU by DMA, with no staging copy of its own (one copy of the batch fewer). None for another
        input, type or a shape outside the profile."""
        tensor = next((t for t in self._tensors if t.is_input and t.name == name), None)
        if self._closed or tensor is None or tensor.host is None or np.dtype(dtype) != tensor.dtype:
            return None
        if len(shape) != len(tensor.shape) or any(
            not lo <= d <= hi for d, lo, hi in zip(shape, tensor.min_shape, tensor.max_shape)
        ):
            return None
        return tensor.host.view(tensor.dtype, shape)

    # --- frame pools ---------------------------------------------------------------------------

    def pin_pool(self, pool: FramePool) -> bool:
        """Register a frame pool's memory (its whole mapping) as pinned, so inputs read from it are
        copied to the GPU by DMA, with no staging copy. Returns whether it is pinned now. A failure
        (no lockable memory left, a driver that refuses) is one warning naming the pool: that
        source's frames then go through the staging buffer, which costs a copy, not a frame."""
        name, memory = pool.layout.name, pool.memory
        if not self._pin_frame_pool or self._closed:
            return False
        if name in self._pinned:
            return True
        if threading.get_ident() != self._thread:
            cuda.set_device(self.device)
            self._thread = threading.get_ident()
        try:
            self._pinned[name] = cuda.HostRegistration(memory)
        except EngineError as exc:
            log.warning(
                "frame pool %s (%d MiB) not registered as pinned memory (%s); its frames are "
                "copied through the staging buffer",
                name,
                memory.nbytes >> 20,
                exc,
            )
            return False
        log.debug("frame pool %s registered as pinned memory (%d bytes)", name, memory.nbytes)
        return True

    def unpin_pool(self, pool: FramePool) -> None:
        """Unregister a frame pool (before it is unmapped) and drop the engine's reference to it."""
        registration = self._pinned.pop(pool.layout.name, None)
        if registration is not None:
            registration.close()

    # --- teardown ------------------------------------------------------------------------------

    def close(self) -> None:
        """Free graphs, buffers, registrations and the stream; `infer` fails afterwards."""
        if self._closed and not hasattr(self, "_stream"):
            return
        self._closed = True
        for graph in getattr(self, "_graphs", {}).values():
            graph.close()
        self._graphs = {}
        for tensor in getattr(self, "_tensors", []):
            for buffer in (tensor.host, tensor.device):
                if buffer is not None:
                    buffer.close()
            tensor.host = tensor.device = None
        for registration in getattr(self, "_pinned", {}).values():
            registration.close()
        self._pinned = {}
        stream = getattr(self, "_stream", None)
        if stream is not None:
            stream.close()
            del self._stream
        self._context = None
        self._engine = None
