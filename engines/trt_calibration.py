"""INT8 calibration data for TensorRT 10's entropy calibrator: frames re-chunked into the batches the
calibrator takes, handed to TensorRT in device memory, and the calibration table's cache file.

`framewire.engines.trt_precision` decides the batch size (the model's own when it is fixed) and
attaches the calibrator to the builder; TensorRT 11 has no calibrator and takes a Q/DQ model
instead (`framewire.engines.quantize`).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from framewire.engines import cuda
from framewire.pipeline.errors import ConfigError, EngineError

log = logging.getLogger(__name__)

Batches = Iterable["np.ndarray | Mapping[str, np.ndarray]"]
"""Calibration data: arrays (one-input models) or dicts by input name, any batch size each."""

def calibration_cache_file(directory: Path, onnx_bytes: bytes, calibration_id: str) -> Path:
    digest = hashlib.sha256(onnx_bytes + b"\0" + calibration_id.encode()).hexdigest()
    return directory / f"calibration-{digest[:20]}.cache"


class BatchFeeder:
    """Re-chunks calibration data into batches of exactly `batch_size` along axis 0.

    TensorRT wants every calibration batch to be of the calibrator's batch size, so the frames left
    over at the end (fewer than a batch) are dropped; `next_batch` returns None once no full batch
    is left, which ends calibration. At most `limit` frames are used.
    """

    def __init__(
        self,
        batches: Batches,
        batch_size: int,
        input_names: Sequence[str],
        limit: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"engine.calibration.batch must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.input_names = tuple(input_names)
        self.limit = limit
        self.used = 0
        self.dropped = 0
        self._source: Iterator[Any] = iter(batches)
        self._pending: dict[str, list[np.ndarray]] = {name: [] for name in self.input_names}
        self._pending_count = 0
        self._taken = 0
        self._peeked: dict[str, np.ndarray] | None = None
        self._done = False

    def peek(self) -> dict[str, np.ndarray] | None:
        """The first batch, without consuming it (its shapes make the calibration profile)."""
        if self._peeked is None:
            self._peeked = self._next()
        return self._peeked

    def next_batch(self) -> dict[str, np.ndarray] | None:
        if self._peeked is not None:
            batch, self._peeked = self._peeked, None
            return batch
        return self._next()

    def _next(self) -> dict[str, np.ndarray] | None:
        while self._pending_count < self.batch_size and not self._done:
            if self.limit is not None and self._taken >= self.limit:
                self._done = True
                break
            try:
                item = next(self._source)
            except StopIteration:
                self._done = True
                break
            arrays = self._by_name(item)
            count = len(next(iter(arrays.values())))
            if self.limit is not None and self._taken + count > self.limit:
                count = self.limit - self._taken
                arrays = {name: value[:count] for name, value in arrays.items()}
            self._taken += count
            for name, value in arrays.items():
                self._pending[name].append(value)
            self._pending_count += count
        if self._pending_count < self.batch_size:
            if self._pending_count:
                self.dropped += self._pending_count
                log.info(
                    "calibration: the last %d frame(s) do not fill a batch of %d and are not used",
                    self._pending_count,
                    self.batch_size,
                )
                self._pending = {name: [] for name in self.input_names}
                self._pending_count = 0
            return None
        batch: dict[str, np.ndarray] = {}
        for name in self.input_names:
            joined = np.concatenate(self._pending[name], axis=0)
            batch[name] = np.ascontiguousarray(joined[: self.batch_size])
            rest = joined[self.batch_size :]
            self._pending[name] = [rest] if len(rest) else []
        self._pending_count -= self.batch_size
        self.used += self.batch_size
        return batch

    def _by_name(self, item: Any) -> dict[str, np.ndarray]:
        if isinstance(item, Mapping):
            missing = [name for name in self.input_names if name not in item]
            if missing:
                raise EngineError(f"calibration data lacks input(s) {', '.join(map(repr, missing))}")
            arrays = {name: np.asarray(item[name]) for name in self.input_names}
        elif len(self.input_names) == 1:
            arrays = {self.input_names[0]: np.asarray(item)}
        else:
            raise EngineError(
                f"calibration data for a model with inputs {list(self.input_names)} must be dicts by name"
            )
        counts = {len(value) if value.ndim else 0 for value in arrays.values()}
        if len(counts) != 1 or 0 in counts:
            raise EngineError("calibration data: every input needs the same batch size along axis 0")
        return arrays


def make_calibrator(trt: ModuleType, feeder: BatchFeeder, cache_path: Path) -> Any:
    """An `IInt8EntropyCalibrator2` that hands TensorRT the feeder's batches in device memory and
    keeps its table in `cache_path` (read back instead of calibrating when present)."""

    class EntropyCalibrator(trt.IInt8EntropyCalibrator2):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.feeder = feeder
            self.cache_path = Path(cache_path)
            self.error: BaseException | None = None
            self._device: dict[str, cuda.DeviceBuffer] = {}

        def get_batch_size(self) -> int:
            return self.feeder.batch_size

        def get_batch(self, names: list[str], *_: Any) -> list[int] | None:
            # Called from inside TensorRT: an exception must not cross back into C++.
            try:
                batch = self.feeder.next_batch()
                if batch is None:
                    return None
                pointers = []
                for name in names:
                    array = np.ascontiguousarray(batch[name])
                    buffer = self._device.get(name)
                    if buffer is None or buffer.nbytes < array.nbytes:
                        if buffer is not None:
                            buffer.close()
                        buffer = self._device[name] = cuda.DeviceBuffer(array.nbytes)
                    cuda.memcpy_htod(buffer.ptr, int(array.ctypes.data), array.nbytes)
                    pointers.append(buffer.ptr)
                return pointers
            except BaseException as exc:  # noqa: BLE001 - reported by the builder once it returns
                self.error = exc
                return None

        def read_calibration_cache(self) -> bytes | None:
            if self.cache_path.is_file():
                log.info("calibration: using the cached table %s", self.cache_path)
                return self.cache_path.read_bytes()
            return None

        def write_calibration_cache(self, cache: Any) -> None:
            write_atomically(self.cache_path, bytes(cache))
            log.info("calibration: table written to %s", self.cache_path)

        def close(self) -> None:
            for buffer in self._device.values():
                buffer.close()
            self._device.clear()

    return EntropyCalibrator()


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file, so that a reader never sees half of it."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
