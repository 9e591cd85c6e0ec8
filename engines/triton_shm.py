"""Shared-memory regions for the Triton backend: tensors handed to the server through memory both
can map instead of on the gRPC socket.

One region per tensor per request lane (`in_flight`), created on first use, registered with the
server once and reused for every later request; a region that is too small for a larger batch is
replaced by one twice the size. Output sizes are learned from the first answer for each input shape
(it comes on the socket), after which outputs are written into regions too. `system` is POSIX
shared memory (client and server on one host); `cuda` is GPU memory shared by a CUDA IPC handle
(tritonclient.utils.cuda_shared_memory, which needs cuda-python; its client side has run on an H200,
its handle opened by another process as the server opens it; registration with a real server on a
GPU has not run: docs/gpu.md).
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.shm import SHM_DIR, sweep_orphans

log = logging.getLogger(__name__)

KEY_PREFIX = "fw-triton-"
"""System shared-memory keys are `/fw-triton-<pid>-<n>`: a worker sweeps those of dead pids."""
_counter = itertools.count()


class SystemMemory:
    """POSIX shared memory through tritonclient.utils.shared_memory."""

    kind = "system"

    def __init__(self, module: ModuleType) -> None:
        self.shm = module

    def create(self, name: str, size: int) -> Any:
        key = f"/{KEY_PREFIX}{os.getpid()}-{next(_counter)}"
        return self.shm.create_shared_memory_region(name, key, size, create_only=True)

    def register(self, client: Any, name: str, handle: Any, size: int, headers: Mapping[str, str]) -> None:
        client.register_system_shared_memory(name, handle._shm_key, size, headers=dict(headers))

    def unregister(self, client: Any, name: str, headers: Mapping[str, str]) -> None:
        client.unregister_system_shared_memory(name, headers=dict(headers))

    def write(self, handle: Any, array: np.ndarray) -> None:
        self.shm.set_shared_memory_region(handle, [np.ascontiguousarray(array)])

    def read(self, handle: Any, dtype: np.dtype, shape: list[int]) -> np.ndarray:
        return np.array(
            self.shm.get_contents_as_numpy(handle, dtype, shape), copy=True
        )  # the region is reused

    def destroy(self, handle: Any) -> None:
        self.shm.destroy_shared_memory_region(handle)


class CudaMemory:
    """GPU memory of `device` through tritonclient.utils.cuda_shared_memory (a CUDA IPC handle)."""

    kind = "cuda"

    def __init__(self, module: ModuleType, device: int) -> None:
        self.cudashm = module
        self.device = device

    def create(self, name: str, size: int) -> Any:
        return self.cudashm.create_shared_memory_region(name, size, self.device)

    def register(self, client: Any, name: str, handle: Any, size: int, headers: Mapping[str, str]) -> None:
        raw = self.cudashm.get_raw_handle(handle)
        client.register_cuda_shared_memory(name, raw, self.device, size, headers=dict(headers))

    def unregister(self, client: Any, name: str, headers: Mapping[str, str]) -> None:
        client.unregister_cuda_shared_memory(name, headers=dict(headers))

    def write(self, handle: Any, array: np.ndarray) -> None:
        self.cudashm.set_shared_memory_region(handle, [np.ascontiguousarray(array)])

    def read(self, handle: Any, dtype: np.dtype, shape: list[int]) -> np.ndarray:
        return np.asarray(self.cudashm.get_contents_as_numpy(handle, dtype, shape))  # a copy already

    def destroy(self, handle: Any) -> None:
        self.cudashm.destroy_shared_memory_region(handle)


Memory = SystemMemory | CudaMemory


@dataclass
class _Region:
    name: str
    handle: Any
    size: int
    registered: bool = False


class Regions:
    """The regions of one request lane of one model in this worker."""

    def __init__(self, memory: Memory, tag: str) -> None:
        self.memory = memory
        self.tag = tag
        self.regions: dict[tuple[str, str], _Region] = {}
        self.output_bytes: dict[tuple[Hashable, str], int] = {}
        """Bytes of each output for each input shape, learned from an answer on the socket."""
        self._placed: set[str] = set()

    def _region(self, client: Any, headers: Mapping[str, str], role: str, tensor: str, size: int) -> _Region:
        region = self.regions.get((role, tensor))
        grown = 0
        if region is not None and region.size < size:
            self._drop(client, headers, region)
            grown, region = 2 * region.size, None  # larger batches come in steps: fewer replacements
        if region is None:
            capacity = max(size, 4096, grown)
            name = f"fw-{self.tag}-{role}-{len(self.regions)}-{next(_counter)}"
            region = _Region(name, self.memory.create(name, capacity), capacity)
            self.regions[(role, tensor)] = region
        if not region.registered:
            try:  # after an outage the server may still know it (a timeout, not a restart)
                self.memory.unregister(client, region.name, headers)
            except Exception:  # noqa: BLE001 - not registered: what we expect
                pass
            self.memory.register(client, region.name, region.handle, region.size, headers)
            region.registered = True
        return region

    def _drop(self, client: Any, headers: Mapping[str, str], region: _Region) -> None:
        if region.registered:
            try:
                self.memory.unregister(client, region.name, headers)
            except Exception as exc:  # noqa: BLE001 - the server may be gone; the handle still goes
                log.debug("unregister %s: %s", region.name, exc)
        self.memory.destroy(region.handle)

    def put(self, client: Any, headers: Mapping[str, str], tensor: str, array: np.ndarray) -> tuple[str, int]:
        """Write an input into its region: (region name, bytes) for `InferInput.set_shared_memory`."""
        self._placed = set()
        region = self._region(client, headers, "in", tensor, array.nbytes)
        self.memory.write(region.handle, array)
        return region.name, int(array.nbytes)

    def reserve(
        self, client: Any, headers: Mapping[str, str], tensor: str, key: Hashable, batch: int
    ) -> tuple[str, int] | None:
        """The region an output is to be written to, once its size for these inputs is known."""
        size = self.output_bytes.get((key, tensor))
        if size is None:
            return None
        region = self._region(client, headers, "out", tensor, size)
        self._placed.add(tensor)
        return region.name, size

    def take(self, result: Any, names: list[str], key: Hashable, batch: int) -> dict[str, np.ndarray]:
        """The outputs of an answer: from their regions, or from the socket (learning their size)."""
        from tritonclient.utils import triton_to_np_dtype

        out: dict[str, np.ndarray] = {}
        for name in names:
            if name in self._placed:
                described = result.get_output(name)
                dtype = np.dtype(triton_to_np_dtype(described.datatype))
                out[name] = self.memory.read(self.regions[("out", name)].handle, dtype, list(described.shape))
            else:
                out[name] = result.as_numpy(name)
                self.output_bytes[(key, name)] = int(out[name].nbytes)
        return out

    @property
    def placed(self) -> bool:
        """Whether the request being made has outputs in regions."""
        return bool(self._placed)

    def forget_outputs(self, key: Hashable) -> None:
        """An answer did not fit the learned sizes (outputs that vary with the content): learn again."""
        for known in [k for k in self.output_bytes if k[0] == key]:
            del self.output_bytes[known]
        self._placed = set()

    def forget_registration(self) -> None:
        """The server may have restarted and forgotten the regions: register each again on next use."""
        for region in self.regions.values():
            region.registered = False

    def close(self, server: Any) -> None:
        client = server.client
        for region in self.regions.values():
            if client is None:
                region.registered = False
            try:
                self._drop(client, server.headers, region)
            except Exception as exc:  # noqa: BLE001 - closing: log, go on with the rest
                log.debug("closing region %s: %s", region.name, exc)
        self.regions.clear()


def open_regions(kind: str, tag: str, device: int = 0) -> Regions:
    """Regions of `kind` (system or cuda) for one lane; ConfigError if that kind cannot be had here."""
    host = f"{socket.gethostname()}-{os.getpid()}-{tag}"
    if kind == "system":
        from tritonclient.utils import shared_memory

        return Regions(SystemMemory(shared_memory), host)
    if kind == "cuda":
        try:
            from tritonclient.utils import cuda_shared_memory
        except (ImportError, RuntimeError) as exc:  # RuntimeError: tritonclient's "needs cuda-python"
            raise ConfigError(
                f"engine.triton.shared_memory: cuda needs cuda-python and a GPU: {exc}"
            ) from None
        return Regions(CudaMemory(cuda_shared_memory, device), host)
    raise ConfigError(f"engine.triton.shared_memory: unknown kind {kind!r}")


def sweep_regions(shm_dir: str = SHM_DIR) -> list[str]:
    """Remove the system regions of workers that died without closing theirs (SIGKILL, OOM)."""
    return sweep_orphans(shm_dir, prefix=KEY_PREFIX)
