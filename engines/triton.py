"""Triton Inference Server backend: each batch goes to a Triton server over gRPC (KServe v2,
`tritonclient.grpc`) and the outputs come back, on the socket or through shared memory.

The model's inputs and outputs are read from the server's metadata (so the task checks the model the
server runs, not a file beside it). A server that does not answer raises `BackendUnavailable`: the
infer stage tries the batch again with backoff, and the next try opens a fresh channel (gRPC's own
reconnect backoff grows to two minutes) and registers the shared-memory regions again (a restarted
server has forgotten them).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from framewire.config.engine import TritonConfig
from framewire.engines.base import Engine
from framewire.engines.triton_shm import Regions, open_regions, sweep_regions
from framewire.pipeline.errors import BackendUnavailable, ConfigError, EngineError
from framewire.pipeline.wire.tensors import Dim, TensorSpec

log = logging.getLogger(__name__)

OUTAGE_CODES = frozenset({"StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED", "StatusCode.CANCELLED"})
"""gRPC status codes that mean "no server answers" (down, restarting, or too slow), not a bad request."""
RESTRICTED = "protocol is restricted"
"""Triton's answer (code UNAVAILABLE) to a call of a protected endpoint without the access token."""


def _grpc() -> ModuleType:
    try:
        import tritonclient.grpc as grpcclient
    except ImportError:
        raise ConfigError(
            "engine.backend: triton needs tritonclient (pip install 'framewire[triton]')"
        ) from None
    return grpcclient


def _readable(path: str | None, key: str) -> str | None:
    """A PEM file's path (tritonclient opens it itself), checked now so that a bad one is one line."""
    if path is None:
        return None
    file = Path(path).expanduser()
    try:
        with open(file, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"engine.triton.{key}: cannot read {path}: {exc.strerror or exc}") from None
    return str(file)


def model_name(settings: TritonConfig, model_path: str, secondary: str | None = None) -> str:
    """The name on the server: `model` (or `secondary[name]`), else the file's name without .onnx."""
    chosen = settings.secondary.get(secondary) if secondary is not None else settings.model
    return chosen or Path(model_path).stem


def is_outage(exc: BaseException) -> bool:
    """Whether a tritonclient error means the server does not answer (as opposed to refusing)."""
    status = getattr(exc, "status", None)
    code = str(status() if callable(status) else status)
    message = str(exc)
    if code in OUTAGE_CODES and RESTRICTED not in message:
        return True
    # A server that restarts answers before its models are loaded again. (At start the supervisor's
    # preflight has found the model, so a model missing later is taken as that.)
    return "is not ready" in message or "unknown model" in message


class Server:
    """One gRPC client of the server, with TLS and headers from the config; `fresh()` replaces it."""

    def __init__(self, settings: TritonConfig) -> None:
        self.settings = settings
        self.headers = dict(settings.headers)
        self._credentials = (
            _readable(settings.root_certificates, "root_certificates"),
            _readable(settings.private_key, "private_key"),
            _readable(settings.certificate_chain, "certificate_chain"),
        )
        self.client: Any = None

    def get(self) -> Any:
        if self.client is None:
            grpcclient = _grpc()
            root, key, chain = self._credentials
            self.client = grpcclient.InferenceServerClient(
                self.settings.url,
                ssl=self.settings.ssl,
                root_certificates=root,
                private_key=key,
                certificate_chain=chain,
            )
        return self.client

    def fresh(self) -> None:
        """Drop the channel: the next call connects anew."""
        if self.client is not None:
            try:
                self.client.close()
            except Exception:  # noqa: BLE001 - a channel to a dead server may fail to close
                pass
            self.client = None


@dataclass(frozen=True)
class Described:
    """What the server says of the model."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch: int
    """The model's max_batch_size; 0: Triton does not batch it (its shapes are whole)."""
    version: str


def describe_model(server: Server, name: str, version: str, timeout_s: float, *, strict: bool = False) -> Described:
    """The model's tensors from Triton's metadata (the batch dim first, as None, when it batches).

    `strict` (the supervisor's check at start): EngineError when nothing answers within `timeout_s`,
    ConfigError when the model is not there. Otherwise (an infer worker, after that check passed)
    both are an outage, BackendUnavailable, which the stage waits out: the server is restarting."""
    from tritonclient.utils import InferenceServerException, triton_to_np_dtype

    url = server.settings.url
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client = server.get()
            if not client.is_model_ready(name, version, headers=server.headers, client_timeout=timeout_s):
                if not strict:
                    raise BackendUnavailable(f"Triton at {url} has model {name!r} not ready")
                raise ConfigError(_missing(client, server, name, version))
            metadata = client.get_model_metadata(name, version, headers=server.headers, client_timeout=timeout_s)
            config = client.get_model_config(name, version, headers=server.headers, client_timeout=timeout_s).config
            break
        except InferenceServerException as exc:
            server.fresh()
            why = _first_line(exc)
            if is_outage(exc) and not strict:
                raise BackendUnavailable(f"Triton at {url} does not answer for model {name!r}: {why}") from None
            if not is_outage(exc) or time.monotonic() > deadline:
                raise EngineError(f"engine.triton.url: no Triton answers at {url} for model {name!r}: {why}") from None
            time.sleep(0.2)
    batch = int(config.max_batch_size)

    def spec(tensor: Any) -> TensorSpec:
        dtype = triton_to_np_dtype(tensor.datatype)
        if dtype is None or dtype is np.object_:
            raise ConfigError(f"engine.triton: model {name!r} tensor {tensor.name!r} has type {tensor.datatype}, not a number")
        shape: tuple[Dim, ...] = tuple(None if d < 0 else int(d) for d in tensor.shape)
        if batch > 0 and len(shape) == len(tensor.shape) and (not shape or shape[0] is not None):
            shape = (None, *shape)  # a model config's dims leave the batch out; metadata's keep it
        return TensorSpec(tensor.name, np.dtype(dtype), shape)

    return Described(
        tuple(spec(t) for t in metadata.inputs),
        tuple(spec(t) for t in metadata.outputs),
        batch,
        version or (metadata.versions[-1] if metadata.versions else ""),
    )


def _missing(client: Any, server: Server, name: str, version: str) -> str:
    try:
        index = client.get_model_repository_index(headers=server.headers)
        names = sorted({m.name for m in index.models})
        known = f" (models there: {', '.join(names) or 'none'})"
    except Exception:  # noqa: BLE001 - the index is protected on pytriton: say less
        known = ""
    what = f"model {name!r}" + (f" version {version}" if version else "")
    return f"engine.triton.model: Triton at {server.settings.url} has no {what} ready{known}"


class TritonEngine(Engine):
    """One model on a Triton server; `infer` runs one batch (split into `in_flight` requests)."""

    backend = "triton"
    served = True

    def __init__(
        self,
        settings: TritonConfig,
        name: str,
        dynamic_axes: Mapping[str, tuple[int, ...]] | None = None,
        *,
        device: int = 0,
        version: str = "",
    ) -> None:
        self.settings = settings
        self.name = name
        self.retry_max_s = settings.retry_max_s
        self.server = Server(settings)
        described = describe_model(self.server, name, version, settings.connect_timeout_s)
        self.version = version
        self.inputs, self.outputs = described.inputs, described.outputs
        self.max_batch = described.max_batch if described.max_batch > 0 else None
        """Triton's max_batch_size: the infer stage sends no larger batch."""
        _check_dynamic(name, self.inputs, dynamic_axes or {})
        self._lanes = max(1, settings.in_flight)
        self.regions: list[Regions] | None = None
        if settings.shared_memory != "none":
            sweep_regions()
            self.regions = [
                open_regions(settings.shared_memory, f"{name}-{lane}", device) for lane in range(self._lanes)
            ]
        self.stats = ServerTimes(self.server, name, version, settings.stats_interval_s)
        self._outage = False

    @property
    def provider(self) -> str:
        shm = "" if self.settings.shared_memory == "none" else f", {self.settings.shared_memory} shared memory"
        return f"triton {self.name}@{self.settings.url}{shm}"

    def infer(self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        from tritonclient.utils import InferenceServerException

        names = list(output_names) if output_names is not None else [t.name for t in self.outputs]
        parts = self._split(feeds)
        try:
            if self._outage:  # the server was gone: a fresh channel, and the regions again
                self.server.fresh()
                for regions in self.regions or ():
                    regions.forget_registration()
                self._outage = False
            if len(parts) == 1:
                results = [self._request(0, parts[0], names)]
            else:
                results = self._concurrent(parts, names)
        except InferenceServerException as exc:
            if is_outage(exc):
                self._outage = True
                raise BackendUnavailable(
                    f"Triton at {self.settings.url} does not answer for model {self.name!r}: {_first_line(exc)}"
                ) from None
            raise EngineError(f"Triton model {self.name!r}: {_first_line(exc)}") from None
        self.stats.poll()
        if len(results) == 1:
            return results[0]
        return {name: np.concatenate([r[name] for r in results], axis=0) for name in names}

    def _split(self, feeds: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        """The batch as up to `in_flight` requests of consecutive frames (dim 0), when it batches."""
        count = min((len(a) for a in feeds.values() if a.ndim), default=1)
        if self._lanes == 1 or self.max_batch is None or count < 2:
            return [dict(feeds)]
        bounds = np.linspace(0, count, min(self._lanes, count) + 1).astype(int)
        return [{k: v[a:b] for k, v in feeds.items()} for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def _concurrent(self, parts: list[dict[str, np.ndarray]], names: list[str]) -> list[dict[str, np.ndarray]]:
        results: list[dict[str, np.ndarray] | None] = [None] * len(parts)
        errors: list[BaseException] = []

        def run(lane: int) -> None:
            try:
                results[lane] = self._request(lane, parts[lane], names)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(lane,), daemon=True) for lane in range(1, len(parts))]
        for thread in threads:
            thread.start()
        run(0)
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return [r for r in results if r is not None]

    def _request(self, lane: int, feeds: Mapping[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
        grpcclient = _grpc()
        from tritonclient.utils import np_to_triton_dtype

        client = self.server.get()
        regions = self.regions[lane] if self.regions is not None else None
        inputs = []
        for name, array in feeds.items():
            item = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            if regions is not None:
                region, size = regions.put(client, self.server.headers, name, array)
                item.set_shared_memory(region, size)
            else:
                item.set_data_from_numpy(np.ascontiguousarray(array))
            inputs.append(item)
        key = tuple((name, a.shape[1:], a.dtype.str) for name, a in feeds.items())
        batch = min((len(a) for a in feeds.values() if a.ndim), default=1)
        outputs = []
        for name in names:
            item = grpcclient.InferRequestedOutput(name)
            if regions is not None:
                placed = regions.reserve(client, self.server.headers, name, key, batch)
                if placed is not None:
                    item.set_shared_memory(*placed)
            outputs.append(item)
        try:
            result = client.infer(
                self.name, inputs, self.version, outputs=outputs, headers=self.server.headers,
                client_timeout=self.settings.timeout_s,
            )  # fmt: skip
        except Exception as exc:
            if regions is None or not regions.placed or is_outage(exc):
                raise
            # Outputs whose size varies with the content outgrew what was learned: learn again
            # (this request's outputs come on the socket, so this recurses once at most).
            log.info("model %s: outputs do not fit their shared-memory regions (%s); learning their sizes again",
                     self.name, _first_line(exc))  # fmt: skip
            regions.forget_outputs(key)
            return self._request(lane, feeds, names)
        if regions is None:
            return {name: result.as_numpy(name) for name in names}
        return regions.take(result, names, key, batch)

    def server_times(self) -> tuple[str, dict[str, float]] | None:
        """Triton's own totals for this model (requests, queue and compute seconds), when read."""
        return None if self.stats.latest is None else (self.name, self.stats.latest)

    def close(self) -> None:
        for regions in self.regions or ():
            regions.close(self.server)
        self.regions = None
        self.server.fresh()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _check_dynamic(name: str, inputs: Sequence[TensorSpec], dynamic_axes: Mapping[str, tuple[int, ...]]) -> None:
    """The task feeds sizes the server's model must accept: an axis the task makes dynamic (the
    frame's height and width with `input_size: auto`) must be dynamic on the server too."""
    by_name = {t.name: t for t in inputs}
    for input_name, axes in dynamic_axes.items():
        spec = by_name.get(input_name)
        if spec is None:
            continue  # the task's check names the missing input
        fixed = [axis for axis in axes if axis > 0 and axis < len(spec.shape) and isinstance(spec.shape[axis], int)]
        if fixed:
            raise ConfigError(
                f"engine.triton: model {name!r} input {input_name!r} has fixed dims {list(spec.shape)} where the "
                f"task needs axes {fixed} dynamic (set the model's input size to the server's, or serve a model "
                f"with those dims -1)"
            )


class ServerTimes:
    """Triton's statistics of one model, read every `interval_s` from an infer worker: totals of
    successful requests and their queue and compute nanoseconds (all clients of the server)."""

    def __init__(self, server: Server, name: str, version: str, interval_s: float) -> None:
        self.server, self.name, self.version, self.interval_s = server, name, version, interval_s
        self.latest: dict[str, float] | None = None
        self._next = time.monotonic() + min(interval_s, 1.0)
        self._refused = False

    def poll(self) -> None:
        if self.interval_s <= 0 or self._refused or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self.interval_s
        try:
            response = self.server.get().get_inference_statistics(
                self.name, self.version, headers=self.server.headers, client_timeout=2.0
            )
        except Exception as exc:  # noqa: BLE001 - statistics are a nicety: never fail a frame for them
            if RESTRICTED in str(exc):
                self._refused = True
                log.warning(
                    "engine.triton: Triton refuses its statistics endpoint without the access token "
                    "(engine.triton.headers); its queue and compute times stay out of /metrics"
                )
            return
        for stats in response.model_stats:
            if stats.name != self.name:
                continue
            infer = stats.inference_stats
            compute = infer.compute_input.ns + infer.compute_infer.ns + infer.compute_output.ns
            self.latest = {
                "requests": float(infer.success.count),
                "executions": float(stats.execution_count),
                "queue_s": infer.queue.ns / 1e9,
                "compute_s": compute / 1e9,
            }


def preflight(settings: TritonConfig, model_path: str) -> None:
    """At start, in the supervisor: the server answers and has the model ready (one line if not)."""
    server = Server(settings)
    try:
        name = model_name(settings, model_path)
        describe_model(server, name, settings.version, settings.connect_timeout_s, strict=True)
    finally:
        server.fresh()


def host_tag() -> str:
    """This worker in region names: unique across the clients of one server."""
    return f"{socket.gethostname()}-{os.getpid()}"
