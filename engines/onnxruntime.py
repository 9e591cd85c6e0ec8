"""ONNX Runtime backend: CPU, CUDA and TensorRT execution providers behind the `Engine` interface."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from engines.base import Engine
from engines.onnx_model import load_model_bytes
from pipeline.errors import ConfigError, EngineError
from pipeline.tensors import Dim, TensorSpec

logger = logging.getLogger(__name__)

PROVIDERS: dict[str, str] = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}
"""Short provider names used in configs, and the ONNX Runtime provider each one selects."""

GRAPH_OPTIMIZATION: dict[str, ort.GraphOptimizationLevel] = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}

_DTYPES: dict[str, np.dtype] = {
    f"tensor({name})": np.dtype(dtype)
    for name, dtype in (
        ("float", np.float32),
        ("float16", np.float16),
        ("double", np.float64),
        ("int8", np.int8),
        ("uint8", np.uint8),
        ("int16", np.int16),
        ("uint16", np.uint16),
        ("int32", np.int32),
        ("uint32", np.uint32),
        ("int64", np.int64),
        ("uint64", np.uint64),
        ("bool", np.bool_),
    )
}

# Errors ORT raises for a file that is not a usable ONNX model (as opposed to a backend failure).
_BAD_MODEL_ERRORS = ("InvalidProtobuf", "InvalidGraph", "NoModel", "NoSuchFile")


class OnnxRuntimeEngine(Engine):
    """One ONNX Runtime session on the first available provider of `providers`.

    `dynamic_axes` rewrites fixed input dims as symbolic before loading (see `engines.onnx_model`).
    `optimized_model_path`, when given, is where ORT writes the graph after its optimisations.
    """

    backend = "onnxruntime"

    def __init__(
        self,
        model_path: str,
        *,
        threads: int = 0,
        inter_op_threads: int = 1,
        graph_optimization: str = "all",
        providers: Sequence[str] = ("cpu",),
        dynamic_axes: Mapping[str, tuple[int, ...]] | None = None,
        optimized_model_path: str | None = None,
    ) -> None:
        self.model_path = str(model_path)
        if graph_optimization not in GRAPH_OPTIMIZATION:
            raise ConfigError(
                f"unknown graph optimisation level {graph_optimization!r} "
                f"(one of {', '.join(GRAPH_OPTIMIZATION)})"
            )
        if threads < 0 or inter_op_threads < 0:
            raise ConfigError(
                f"thread counts must be >= 0 (0 = ONNX Runtime's default), got threads={threads}, "
                f"inter_op_threads={inter_op_threads}"
            )
        ort_providers = _select_providers(providers)
        if not Path(self.model_path).is_file():
            raise ConfigError(f"model file {self.model_path!r} does not exist")

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = inter_op_threads
        options.graph_optimization_level = GRAPH_OPTIMIZATION[graph_optimization]
        # ORT's own warnings (initializers removed, ...) would bypass our logging; errors still show.
        options.log_severity_level = 3
        if optimized_model_path:
            options.optimized_model_filepath = str(optimized_model_path)

        model: str | bytes = self.model_path
        if dynamic_axes:
            model = load_model_bytes(self.model_path, dynamic_axes)
        try:
            self._session: ort.InferenceSession | None = ort.InferenceSession(
                model, sess_options=options, providers=ort_providers
            )
        except Exception as exc:  # noqa: BLE001 - ORT's errors share no base class but Exception
            raise _load_error(self.model_path, exc) from None

        session = self._session
        self._provider = session.get_providers()[0]
        if self._provider != ort_providers[0]:
            logger.warning(
                "model %s: requested %s but ONNX Runtime runs it on %s",
                self.model_path,
                ort_providers[0],
                self._provider,
            )
        logger.info("model %s loaded on %s", self.model_path, self._provider)
        self.inputs = tuple(_spec(arg, self.model_path) for arg in session.get_inputs())
        self.outputs = tuple(_spec(arg, self.model_path) for arg in session.get_outputs())

    @property
    def provider(self) -> str:
        """The execution provider that actually runs the model, e.g. `CPUExecutionProvider`."""
        return self._provider

    def infer(
        self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Run one batch; returns the requested outputs (all when `output_names` is None) by name."""
        if self._session is None:
            raise EngineError(f"model {self.model_path}: engine is closed")
        names = list(output_names) if output_names is not None else [o.name for o in self.outputs]
        try:
            values = self._session.run(names, dict(feeds))
        except Exception as exc:  # noqa: BLE001 - ORT's errors share no base class but Exception
            described = ", ".join(
                f"{name!r} {np.asarray(value).dtype} {tuple(np.shape(value))}"
                for name, value in feeds.items()
            )
            raise EngineError(
                f"model {self.model_path}: inference failed for input {described}: {_first_line(exc)}"
            ) from None
        return dict(zip(names, values))

    def close(self) -> None:
        """Release the session (and the memory it holds); `infer` fails afterwards."""
        self._session = None


def _select_providers(providers: Sequence[str]) -> list[str]:
    """ORT provider names for the short names, in order, minus those this build lacks."""
    unknown = [name for name in providers if name not in PROVIDERS]
    if unknown:
        raise ConfigError(
            f"unknown execution provider(s) {', '.join(map(repr, unknown))} (one of {', '.join(PROVIDERS)})"
        )
    available = set(ort.get_available_providers())
    wanted = [PROVIDERS[name] for name in providers]
    selected = [name for name in wanted if name in available]
    missing = [name for name in wanted if name not in available]
    if missing:
        logger.warning(
            "execution provider(s) %s not available in this onnxruntime build, skipped",
            ", ".join(missing),
        )
    if not selected:
        raise EngineError(
            f"none of the execution providers {list(providers)} is available "
            f"(this onnxruntime build has {', '.join(sorted(available))})"
        )
    return selected


def _spec(arg: Any, model_path: str) -> TensorSpec:
    dtype = _DTYPES.get(arg.type)
    if dtype is None:
        raise EngineError(f"model {model_path}: tensor {arg.name!r} has unsupported type {arg.type}")
    shape: tuple[Dim, ...] = tuple(d if isinstance(d, (int, str)) else None for d in arg.shape)
    return TensorSpec(arg.name, dtype, shape)


def _load_error(model_path: str, exc: Exception) -> Exception:
    if type(exc).__name__ in _BAD_MODEL_ERRORS:
        return ConfigError(f"model file {model_path!r} is not a valid ONNX model: {_first_line(exc)}")
    return EngineError(f"model {model_path}: ONNX Runtime could not load it: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
