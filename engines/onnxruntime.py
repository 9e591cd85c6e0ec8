"""ONNX Runtime backend: CPU, CUDA and TensorRT execution providers behind the `Engine` interface."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from framewire.engines.base import Engine, ProfileShape
from framewire.engines.onnx_model import load_model_bytes
from framewire.pipeline.errors import ConfigError, EngineError
from framewire.pipeline.wire.tensors import Dim, TensorSpec

log = logging.getLogger(__name__)

PROVIDERS: dict[str, str] = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}
"""Short provider names used in configs, and the ONNX Runtime provider each one selects."""

DEFAULT_CACHE_DIR = "~/.cache/framewire/engines"

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

    `dynamic_axes` rewrites fixed input dims as symbolic before loading (see `framewire.engines.onnx_model`).
    `optimized_model_path`, when given, is where ORT writes the graph after its optimisations;
    `optimized_cache` keeps that graph in `cache_dir` and loads it on the next start instead.
    GPU providers run on GPU `device_id`; the TensorRT provider builds `precision` engines and caches
    them (and its timing cache) in `cache_dir`. With the CUDA provider in use, `infer` runs through
    IO binding (`io_binding=None` means: exactly then).
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
        device_id: int = 0,
        precision: str = "fp32",
        cache_dir: str | None = None,
        optimized_cache: bool = False,
        io_binding: bool | None = None,
        gpu_mem_limit: int | None = None,
        cudnn_conv_algo_search: str = "exhaustive",
        trt_profile: Sequence[ProfileShape] | None = None,
    ) -> None:
        self.model_path = str(model_path)
        self.device_id = device_id
        _check_arguments(self.model_path, graph_optimization, threads, inter_op_threads)
        ort_providers = _select_providers(providers)
        directory = Path(cache_dir or DEFAULT_CACHE_DIR).expanduser()
        wants_gpu = any(name != PROVIDERS["cpu"] for name in ort_providers)
        if wants_gpu or optimized_cache:
            _make_dir(directory)
        model: str | bytes = self.model_path
        if dynamic_axes:
            model = load_model_bytes(self.model_path, dynamic_axes)
        model_key = _engine_cache_key(model, precision) if PROVIDERS["tensorrt"] in ort_providers else ""
        provider_args: list[str | tuple[str, dict[str, Any]]] = [
            (name, provider_options(name, device_id=device_id, precision=precision, cache_dir=directory,
                                    model_key=model_key, gpu_mem_limit=gpu_mem_limit,
                                    cudnn_conv_algo_search=cudnn_conv_algo_search, profile=trt_profile))
            if name != PROVIDERS["cpu"] else name
            for name in ort_providers
        ]  # fmt: skip
        options = _session_options(threads, inter_op_threads, graph_optimization, optimized_model_path)
        saved: tuple[Path, Path] | None = None
        # The TensorRT provider compiles subgraphs that cannot be saved as ONNX; it caches engines.
        if optimized_cache and not optimized_model_path and PROVIDERS["tensorrt"] not in ort_providers:
            model, saved = _optimized_cache(model, directory, graph_optimization, ort_providers, options)
        session = _open_session(self.model_path, model, options, provider_args, quiet=wants_gpu)
        self._session: ort.InferenceSession | None = session
        if saved is not None:
            _publish(*saved)
        self._provider = provider_in_use(self.model_path, ort_providers, session.get_providers())
        log.info("model %s loaded on %s", self.model_path, self._provider)
        use_binding = self._provider == PROVIDERS["cuda"] if io_binding is None else io_binding
        self._binding: Any = session.io_binding() if use_binding else None
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
            if self._binding is not None:
                values = self._run_bound(names, feeds)
            else:
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

    def _run_bound(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Inputs bound from host arrays (ORT copies them to the device once), outputs left on the
        device where ORT allocates them at their actual shape, then copied out in one go."""
        assert self._session is not None
        binding = self._binding
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(value))
        device = "cuda" if self._provider in (PROVIDERS["cuda"], PROVIDERS["tensorrt"]) else "cpu"
        for name in names:
            binding.bind_output(name, device, self.device_id)
        self._session.run_with_iobinding(binding)
        return list(binding.copy_outputs_to_cpu())

    def close(self) -> None:
        """Release the session (and the memory it holds); `infer` fails afterwards."""
        self._binding = None
        self._session = None


CONV_ALGO_SEARCH = {"exhaustive": "EXHAUSTIVE", "heuristic": "HEURISTIC", "default": "DEFAULT"}


def provider_options(
    name: str,
    *,
    device_id: int,
    precision: str,
    cache_dir: Path,
    model_key: str = "",
    gpu_mem_limit: int | None = None,
    cudnn_conv_algo_search: str = "exhaustive",
    profile: Sequence[ProfileShape] | None = None,
) -> dict[str, Any]:
    """Options of a GPU execution provider (option names checked against the onnxruntime-gpu 1.26
    and 1.31 providers' libraries).

    CUDA: the device, the cuDNN algorithm search and, with several processes on one GPU, a limit on
    the memory arena (grown by what is asked, not doubled, so it stays under the limit).
    TensorRT: the precision; engines cached in a folder of their own per model (`model_key`: ONNX
    Runtime names cached engines by graph name and shapes only, so a retrained model of the same
    topology would load the old engine); one timing cache for all (timings do not depend on the
    weights); and the optimisation profile, so that the engine is built once for every batch and
    size the sources will feed, not again at run time as new shapes appear.
    """
    if name == PROVIDERS["cuda"]:
        if cudnn_conv_algo_search not in CONV_ALGO_SEARCH:
            raise ConfigError(
                f"engine.cudnn_conv_algo_search: {cudnn_conv_algo_search!r} is not one of "
                f"{', '.join(CONV_ALGO_SEARCH)}"
            )
        options: dict[str, Any] = {
            "device_id": device_id,
            "cudnn_conv_algo_search": CONV_ALGO_SEARCH[cudnn_conv_algo_search],
        }
        if gpu_mem_limit:
            options["gpu_mem_limit"] = int(gpu_mem_limit)
            options["arena_extend_strategy"] = "kSameAsRequested"
        return options
    if name == PROVIDERS["tensorrt"]:
        if precision not in ("fp32", "fp16", "int8"):
            raise ConfigError(f"engine.precision: {precision!r} is not one of fp32, fp16, int8")
        root = cache_dir / "ort-tensorrt"
        engines = root / model_key if model_key else root
        options = {
            "device_id": device_id,
            "trt_fp16_enable": precision in ("fp16", "int8"),
            # INT8 here needs a model with Q/DQ nodes (`quantize --recipe tensorrt`) or a calibration table.
            "trt_int8_enable": precision == "int8",
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(engines),
            "trt_timing_cache_enable": True,
            "trt_timing_cache_path": str(root),
        }
        if profile:
            for key, index in (("min", 0), ("opt", 1), ("max", 2)):
                options[f"trt_profile_{key}_shapes"] = ",".join(
                    f"{shape.name}:{'x'.join(str(d) for d in (shape.min, shape.opt, shape.max)[index])}"
                    for shape in profile
                )
        return options
    return {}


def _engine_cache_key(model: str | bytes, precision: str) -> str:
    """The folder of ONNX Runtime's TensorRT engines for this model: its bytes (after any dims
    rewrite), the precision and the ONNX Runtime version."""
    data = model if isinstance(model, bytes) else Path(model).read_bytes()
    digest = hashlib.sha256(data)
    digest.update(f"|{precision}|{ort.__version__}".encode())
    return digest.hexdigest()[:24]


def provider_in_use(model_path: str, requested: Sequence[str], used: Sequence[str]) -> str:
    """The provider ORT actually runs the model on (the first of the session's), with one warning
    when it is not the first one requested - ORT falls back silently when a GPU provider's libraries
    (CUDA, cuDNN, TensorRT) cannot be loaded. Ending on the CPU when `cpu` was not requested is an
    EngineError: the config asked for a GPU only."""
    actual = used[0] if used else PROVIDERS["cpu"]
    if actual == requested[0]:
        return actual
    if actual not in requested:
        raise EngineError(
            f"model {model_path}: ONNX Runtime could not start {', '.join(requested)} "
            f"(GPU libraries or GPU missing?) and would run on {actual}, which engine.providers "
            f"does not list"
        )
    log.warning(
        "model %s: asked for %s, but ONNX Runtime runs it on %s (%s could not be started: "
        "GPU libraries or GPU missing? --debug shows ONNX Runtime's messages)",
        model_path,
        requested[0],
        actual,
        ", ".join(name for name in requested[: list(requested).index(actual)]),
    )
    return actual


def _optimized_cache(
    model: str | bytes,
    directory: Path,
    level: str,
    providers: Sequence[str],
    options: ort.SessionOptions,
) -> tuple[str | bytes, tuple[Path, Path] | None]:
    """Load the graph ORT optimised on an earlier start, or have ORT save it this time.

    The key covers the model bytes (after any dims rewrite), the ORT version, the optimisation level
    and the providers: an optimised graph may hold provider-specific fused nodes.
    """
    data = model if isinstance(model, bytes) else Path(model).read_bytes()
    digest = hashlib.sha256(data)
    digest.update(f"|{ort.__version__}|{level}|{','.join(providers)}".encode())
    target = directory / f"ort-{digest.hexdigest()[:24]}.onnx"
    if target.is_file():
        log.info("optimised model from the cache: %s", target)
        options.graph_optimization_level = GRAPH_OPTIMIZATION["disable"]
        return str(target), None
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    options.optimized_model_filepath = str(temporary)
    return model, (temporary, target)


def _publish(temporary: Path, target: Path) -> None:
    """Move a freshly written optimised model into the cache (atomic: workers start together)."""
    try:
        os.replace(temporary, target)
    except OSError as exc:
        log.warning("optimised model not cached at %s: %s", target, exc)


def _make_dir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"engine.cache_dir: cannot create {str(directory)!r}: {exc.strerror}") from None


def _select_providers(providers: Sequence[str], *, warn: bool = True) -> list[str]:
    """ORT provider names for the short names, in order, minus those this build lacks (one warning).

    EngineError when none is left: a GPU-only list on a CPU-only build is an error, not a silent CPU
    run (list `cpu` last to allow that)."""
    unknown = [name for name in providers if name not in PROVIDERS]
    if unknown:
        raise ConfigError(
            f"unknown execution provider(s) {', '.join(map(repr, unknown))} (one of {', '.join(PROVIDERS)})"
        )
    available = set(ort.get_available_providers())
    wanted = [PROVIDERS[name] for name in providers]
    selected = [name for name in wanted if name in available]
    missing = [name for name in wanted if name not in available]
    if not selected:
        hint = "; install the gpu extra: make EXTRAS=gpu" if any(n != "cpu" for n in providers) else ""
        raise EngineError(
            f"engine.providers: none of the execution providers {list(providers)} is available "
            f"(this onnxruntime build has {', '.join(sorted(available))}{hint})"
        )
    if missing and warn:
        log.warning(
            "execution provider(s) %s not available in this onnxruntime build, skipped",
            ", ".join(missing),
        )
    return selected


def check_providers(providers: Sequence[str]) -> list[str]:
    """What `_select_providers` would select, without the warning: for a check before any worker."""
    return _select_providers(providers, warn=False)


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


def _check_arguments(model_path: str, graph_optimization: str, threads: int, inter_op_threads: int) -> None:
    if graph_optimization not in GRAPH_OPTIMIZATION:
        raise ConfigError(
            f"unknown graph optimisation level {graph_optimization!r} (one of {', '.join(GRAPH_OPTIMIZATION)})"
        )
    if threads < 0 or inter_op_threads < 0:
        raise ConfigError(
            f"thread counts must be >= 0 (0 = ONNX Runtime's default), got threads={threads}, "
            f"inter_op_threads={inter_op_threads}"
        )
    if not Path(model_path).is_file():
        raise ConfigError(f"model file {model_path!r} does not exist")


def _session_options(
    threads: int, inter_op_threads: int, graph_optimization: str, optimized_model_path: str | None
) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = inter_op_threads
    options.graph_optimization_level = GRAPH_OPTIMIZATION[graph_optimization]
    # ORT's own warnings (initializers removed, ...) would bypass our logging; errors still show.
    options.log_severity_level = 3
    if optimized_model_path:
        options.optimized_model_filepath = str(optimized_model_path)
    return options


def _open_session(
    model_path: str,
    model: str | bytes,
    options: ort.SessionOptions,
    providers: list[str | tuple[str, dict[str, Any]]],
    *,
    quiet: bool,
) -> ort.InferenceSession:
    quiet = quiet and not log.isEnabledFor(logging.DEBUG)
    if quiet:
        # A provider whose libraries are missing makes ORT print several red lines and fall
        # back; the one warning framewire gives says it instead (--debug shows ORT's own lines).
        ort.set_default_logger_severity(4)
    try:
        return ort.InferenceSession(model, sess_options=options, providers=providers)
    except Exception as exc:  # noqa: BLE001 - ORT's errors share no base class but Exception
        raise _load_error(model_path, exc) from None
    finally:
        if quiet:
            ort.set_default_logger_severity(2)
