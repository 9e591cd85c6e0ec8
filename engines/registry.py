"""Choosing and opening a backend from the config: one class per backend, looked up by name."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from engines.base import Engine
from pipeline.config import Backend, EngineConfig

log = logging.getLogger(__name__)


def _onnxruntime(config: EngineConfig, model_path: str, dynamic_axes: Mapping[str, tuple[int, ...]]) -> Engine:
    from engines.onnxruntime import OnnxRuntimeEngine

    return OnnxRuntimeEngine(
        model_path,
        threads=config.threads,
        graph_optimization=config.graph_optimization,
        providers=config.providers,
        dynamic_axes=dynamic_axes,
    )


BACKENDS: dict[Backend, Callable[[EngineConfig, str, Mapping[str, tuple[int, ...]]], Engine]] = {
    Backend.ONNXRUNTIME: _onnxruntime,
}


def resolve_backend(backend: Backend) -> Backend:
    """`auto`: the best backend this machine has. Today that is ONNX Runtime, whose providers
    (from `engine.providers`) decide between TensorRT, CUDA and the CPU."""
    if backend is Backend.AUTO:
        return Backend.ONNXRUNTIME
    return backend


def open_engine(
    config: EngineConfig, model_path: str, dynamic_axes: Mapping[str, tuple[int, ...]] | None = None
) -> Engine:
    backend = resolve_backend(config.backend)
    return BACKENDS[backend](config, model_path, dynamic_axes or {})
