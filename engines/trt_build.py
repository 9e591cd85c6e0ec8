"""Building TensorRT engines from the ONNX file, and the cache that builds each one only once.

An engine is specific to the model, the TensorRT version, the GPU, the precision and the optimisation
profile (the range of input shapes it accepts), so all of those make its cache key. The first infer
worker that needs an engine builds it under a file lock while the others wait, and every later start
loads it from `engine.cache_dir`. INT8 without Q/DQ nodes in the model is calibrated on batches of
frames through the task's own preprocessing: with TensorRT 10 by an entropy calibrator, with
TensorRT 11 (strongly typed networks only) by making a Q/DQ model on the CPU; either result is cached.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from framewire.engines import cuda
from framewire.engines.base import ProfileShape
from framewire.engines.trt_calibration import Batches, write_atomically
from framewire.engines.trt_precision import int8_calibrator, model_info, strongly_typed_model
from framewire.pipeline.errors import ConfigError, EngineError
from framewire.pipeline.wire.tensors import TensorSpec

log = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = "~/.cache/framewire/engines"
PRECISIONS = ("fp32", "fp16", "int8")


def import_tensorrt() -> ModuleType:
    """The tensorrt module, or a one-line EngineError saying how to get it."""
    try:
        import tensorrt as trt
    except ImportError as exc:
        # Not installed: ModuleNotFoundError. Installed but its libraries missing (the -libs wheel
        # absent, libnvinfer not on the path): a plain ImportError, whose name is "tensorrt" too.
        if isinstance(exc, ModuleNotFoundError) and exc.name == "tensorrt":
            raise EngineError(
                f"engine.backend: tensorrt: the tensorrt package is not installed ({cuda.INSTALL_HINT})"
            ) from None
        raise EngineError(f"engine.backend: tensorrt: the tensorrt package cannot be loaded: {exc}") from None
    except OSError as exc:  # its shared libraries (libnvinfer) are missing or broken
        raise EngineError(f"engine.backend: tensorrt: the tensorrt package cannot be loaded: {exc}") from None
    if not hasattr(trt, "Builder"):
        raise EngineError(
            "engine.backend: tensorrt: this tensorrt package has no builder (tensorrt-lean?); "
            f"{cuda.INSTALL_HINT}"
        )
    return trt


def cache_dir(configured: str | None) -> Path:
    """`engine.cache_dir`, or ~/.cache/framewire/engines."""
    return Path(configured or DEFAULT_CACHE_DIR).expanduser()


# --- optimisation profile ------------------------------------------------------------------------


def make_profile(
    inputs: Sequence[TensorSpec],
    *,
    min_batch: int,
    opt_batch: int,
    max_batch: int,
    examples: Mapping[str, Sequence[tuple[int, ...]]] | None = None,
) -> tuple[ProfileShape, ...]:
    """The optimisation profile of `inputs` (as loaded, dynamic dims `None` or a name).

    Axis 0 is the batch: dynamic, it spans min/opt/max batch; fixed, it stays. Any other dynamic axis
    takes its sizes from `examples` (the input shapes the sources will feed, batch of one): min and
    max over them, opt the most common one (the larger on a tie).
    """
    if not 1 <= min_batch <= opt_batch <= max_batch:
        raise ConfigError(
            f"engine: batch profile must satisfy 1 <= min_batch <= opt_batch <= max_batch "
            f"(got {min_batch}, {opt_batch}, {max_batch})"
        )
    examples = examples or {}
    shapes = []
    for spec in inputs:
        dims: list[tuple[int, int, int]] = []  # (min, opt, max) per axis
        for axis, dim in enumerate(spec.shape):
            if isinstance(dim, int):
                dims.append((dim, dim, dim))
            elif axis == 0:
                dims.append((min_batch, opt_batch, max_batch))
            else:
                sizes = [int(shape[axis]) for shape in examples.get(spec.name, ()) if len(shape) > axis]
                if not sizes:
                    raise ConfigError(
                        f"engine: TensorRT needs the size of dim {axis} of input {spec.name!r} "
                        f"(shape {list(spec.shape)}): no source gives one"
                    )
                counts = {size: sizes.count(size) for size in sizes}
                common = max(counts, key=lambda size: (counts[size], size))
                dims.append((min(sizes), common, max(sizes)))
        low, opt, high = (tuple(d[i] for d in dims) for i in range(3))
        shapes.append(ProfileShape(spec.name, low, opt, high))
    return tuple(shapes)


# --- cache keys --------------------------------------------------------------------------------


def cache_key(
    onnx_bytes: bytes,
    *,
    trt_version: str,
    gpu_name: str,
    precision: str,
    profile: Sequence[ProfileShape],
    extra: Mapping[str, Any] | None = None,
) -> str:
    """sha256 over everything an engine depends on: the model as parsed (its dims included), the
    TensorRT version, the GPU, the precision, the profile and `extra` (e.g. the calibration data)."""
    description = {
        "onnx": hashlib.sha256(onnx_bytes).hexdigest(),
        "tensorrt": trt_version,
        "gpu": gpu_name,
        "precision": precision,
        "profile": [shape.to_json() for shape in profile],
        "extra": dict(extra or {}),
    }
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def engine_file(directory: Path, model_path: str, precision: str, key: str) -> Path:
    """Where the engine for `key` lives: readable name, then the key."""
    return directory / f"{_slug(Path(model_path).stem)}-{precision}-{key[:20]}.engine"


def timing_cache_file(directory: Path, trt_version: str, gpu_name: str) -> Path:
    """Layer timings are shared by every model built with one TensorRT version on one GPU model."""
    return directory / f"timing-trt{_slug(trt_version)}-{_slug(gpu_name)}.cache"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_") or "x"


# --- building ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildRequest:
    """Everything an engine is built from (and keyed by)."""

    model_path: str
    precision: str = "fp32"
    dynamic_axes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    min_batch: int = 1
    opt_batch: int = 1
    max_batch: int = 1
    examples: Mapping[str, Sequence[tuple[int, ...]]] = field(default_factory=dict)
    workspace_mb: int = 2048
    cache_dir: str | None = None
    device: int = 0
    calibration: Callable[[], Batches] | None = None
    calibration_id: str = ""
    calibration_frames: int = 256
    calibration_batch: int = 8


def prepare(request: BuildRequest) -> tuple[bytes, tuple[ProfileShape, ...]]:
    """The model bytes TensorRT parses (dims made dynamic where the profile needs) and the profile."""
    from framewire.engines.onnx_model import describe, load_model_bytes

    if request.precision not in PRECISIONS:
        raise ConfigError(f"engine.precision: {request.precision!r} is not one of {', '.join(PRECISIONS)}")
    axes = {name: tuple(dims) for name, dims in request.dynamic_axes.items()}
    inputs, _ = describe(request.model_path, axes)
    if request.max_batch > 1:
        # A batch fixed in the file (often 1) must become dynamic for a profile of several frames.
        for spec in inputs:
            if spec.shape and isinstance(spec.shape[0], int) and spec.shape[0] != request.max_batch:
                axes[spec.name] = tuple(sorted({0, *axes.get(spec.name, ())}))
        inputs, _ = describe(request.model_path, axes)
    data = load_model_bytes(request.model_path, axes) if axes else Path(request.model_path).read_bytes()
    profile = make_profile(
        inputs,
        min_batch=request.min_batch,
        opt_batch=request.opt_batch,
        max_batch=request.max_batch,
        examples=request.examples,
    )
    return data, profile


def ensure_engine(request: BuildRequest, *, force: bool = False) -> Path:
    """The engine file for `request`: from the cache, or built now (once, under a lock)."""
    trt = import_tensorrt()
    gpu_name = cuda.require_device(request.device)
    cuda.set_device(request.device)
    data, profile = prepare(request)
    extra = {"calibration": request.calibration_id} if request.precision == "int8" else {}
    key = cache_key(
        data,
        trt_version=str(trt.__version__),
        gpu_name=gpu_name,
        precision=request.precision,
        profile=profile,
        extra=extra,
    )
    directory = cache_dir(request.cache_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"engine.cache_dir: cannot create {str(directory)!r}: {exc.strerror}") from None
    path = engine_file(directory, request.model_path, request.precision, key)
    if path.is_file() and not force:
        log.info("TensorRT engine %s: from the cache", path)
        return path
    with _locked(path.with_suffix(".lock")):
        if path.is_file() and not force:  # another worker built it while this one waited
            return path
        started = time.monotonic()
        log.warning(
            "building the TensorRT %s engine for %s on %s (once; it may take minutes)",
            request.precision,
            request.model_path,
            gpu_name,
        )
        serialized = build_serialized(trt, request, data, profile, directory, gpu_name)
        write_atomically(path, serialized)
        log.warning("TensorRT engine %s built in %.0f s", path, time.monotonic() - started)
    return path


def build_serialized(
    trt: ModuleType,
    request: BuildRequest,
    data: bytes,
    profile: Sequence[ProfileShape],
    directory: Path,
    gpu_name: str,
) -> bytes:
    """Parse the ONNX bytes and build the serialized engine (plan) with the TensorRT builder.

    TensorRT 10 sets the precision on the builder (FP16 / INT8 flags, an entropy calibrator for a
    model without Q/DQ nodes). TensorRT 11 builds strongly typed networks only, so the precision is
    in the model itself: fp16 converts it (`framewire.engines.fp16`), int8 needs Q/DQ nodes, made
    from the calibration frames with the TensorRT recipe of `framewire.engines.quantize` when the
    model has none (`framewire.engines.trt_precision`).
    """
    major = trt_major(trt)
    info = model_info(data)
    if info.qdq and not info.symmetric:
        raise ConfigError(
            f"model.path: {request.model_path} has Q/DQ nodes with non-zero zero points (quantised "
            "for the CPU?); TensorRT takes symmetric int8 only: make it with quantize --recipe tensorrt"
        )
    if major >= 11:
        data = strongly_typed_model(request, data, info, directory)
    trt_logger = make_logger(trt)
    trt_logger.clear()
    builder = construct(trt.Builder, trt_logger, what="a builder")
    # The parser owns the weights the network points to: it must live until the build is done.
    network, _parser = _parsed_network(trt, builder, trt_logger, data, request.model_path, major)
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(request.workspace_mb) << 20)
    optimisation = builder.create_optimization_profile()
    for shape in profile:
        optimisation.set_shape(shape.name, shape.min, shape.opt, shape.max)
    config.add_optimization_profile(optimisation)
    timing_path = timing_cache_file(directory, str(trt.__version__), gpu_name)
    _use_timing_cache(config, timing_path)

    calibrator = None
    if major < 11 and request.precision in ("fp16", "int8"):
        config.set_flag(trt.BuilderFlag.FP16)  # int8 layers TensorRT cannot quantise fall back to fp16
    if major < 11 and request.precision == "int8":
        config.set_flag(trt.BuilderFlag.INT8)
        if not info.qdq:
            names = [s.name for s in profile]
            calibrator = int8_calibrator(trt, builder, config, request, data, info, directory, names)
    try:
        serialized = builder.build_serialized_network(network, config)
    finally:
        if calibrator is not None:
            calibrator.close()
    if calibrator is not None and calibrator.error is not None:
        raise EngineError(f"calibration failed: {_first_line(calibrator.error)}") from None
    if serialized is None:
        detail = trt_logger.last_error or "see the TensorRT messages with --debug"
        raise EngineError(f"model {request.model_path}: TensorRT could not build an engine: {detail}")
    _save_timing_cache(config, timing_path)
    return bytes(memoryview(serialized))


def _parsed_network(
    trt: ModuleType, builder: Any, trt_logger: Any, data: bytes, model_path: str, major: int
) -> tuple[Any, Any]:
    """The network of the ONNX bytes and its parser; an error names the model and TensorRT's first
    complaint."""
    flags = 0
    if major < 10:  # TensorRT 8: a flag; 10: the only mode
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    elif major >= 11:
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)  # the only mode; said explicitly
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, trt_logger)
    if not parser.parse(data):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        first = errors[0].strip().splitlines()[0] if errors else "unknown error"
        raise EngineError(f"model {model_path}: TensorRT cannot parse it: {first}")
    return network, parser


def trt_major(trt: ModuleType) -> int:
    """The major version of the tensorrt module (10, 11)."""
    return _major(str(trt.__version__))


def construct(factory: Any, trt_logger: Any, *, what: str) -> Any:
    """`trt.Builder(logger)` or `trt.Runtime(logger)`; when TensorRT cannot start (no usable CUDA
    driver or GPU, out of memory) the bindings raise `TypeError: pybind11::init(): factory function
    returned nullptr`, which becomes one EngineError here."""
    try:
        return factory(trt_logger)
    except TypeError as exc:
        detail = trt_logger.last_error or _first_line(exc)
        raise EngineError(f"TensorRT cannot create {what} (CUDA driver or GPU unusable?): {detail}") from None


def _use_timing_cache(config: Any, path: Path) -> None:
    """Give the build the timing cache of earlier builds; a cache TensorRT refuses (made on another
    GPU model or TensorRT build: `set_timing_cache` returns False) is replaced by a fresh one, so
    that the build goes on and its timings are saved."""
    data = b""
    try:
        data = path.read_bytes() if path.is_file() else b""
    except OSError as exc:
        log.warning("timing cache %s not read: %s", path, exc.strerror)
    if config.set_timing_cache(config.create_timing_cache(data), ignore_mismatch=False):
        return
    log.warning("timing cache %s does not fit this GPU or TensorRT; starting a new one", path)
    config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)


def _save_timing_cache(config: Any, path: Path) -> None:
    """Write the timing cache after a build; a failure costs only time on the next build, so it is
    logged and the engine is written all the same."""
    try:
        cache = config.get_timing_cache()
        if cache is None:
            log.warning("timing cache %s not written: the build had none", path)
            return
        write_atomically(path, bytes(memoryview(cache.serialize())))
    except (OSError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
        log.warning("timing cache %s not written: %s", path, _first_line(exc))


_LOGGER: Any = None
"""The process's one TensorRT logger: TensorRT keeps the logger of the first builder or runtime a
process creates and sends every later message there, so a second logger would never hear a thing."""


def make_logger(trt: ModuleType) -> Any:
    """The TensorRT logger of this process, writing to Python logging; remembers the last error for
    one-line messages (`clear()` it before an operation whose error you want)."""
    global _LOGGER
    if _LOGGER is not None and _LOGGER.module is trt:
        return _LOGGER

    class _Logger(trt.ILogger):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.module = trt
            self.last_error = ""

        def clear(self) -> None:
            self.last_error = ""

        def log(self, severity: Any, msg: str) -> None:
            severities = trt.ILogger.Severity
            if severity in (severities.INTERNAL_ERROR, severities.ERROR):
                self.last_error = str(msg).strip().splitlines()[0] if str(msg).strip() else ""
                log.error("TensorRT: %s", msg)
            elif severity == severities.WARNING:
                log.info("TensorRT: %s", msg)
            else:
                log.debug("TensorRT: %s", msg)

    _LOGGER = _Logger()
    return _LOGGER


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock file: several infer workers starting at once build an engine only once."""
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _major(version: str) -> int:
    try:
        return int(version.split(".", 1)[0])
    except ValueError:
        return 10


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
