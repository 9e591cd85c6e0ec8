"""Choosing and opening a backend from the config: one opener per backend, looked up by name in
framewire.registry.BACKENDS (the `framewire.backends` entry-point group, where a plug-in adds its own)."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from framewire.engines.base import Engine
from framewire.config import Backend, EngineConfig
from framewire.registry import BACKENDS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OpenOptions:
    """What one infer worker adds to the config: its GPU, and data only some backends need, as
    callables so that nothing is read unless the backend asks (TensorRT's profile and calibration)."""

    device: int = 0
    secondary: str | None = None
    """Which model of the config this is: None the primary, else a secondary's `name` (a server
    backend looks its model up by it)."""
    input_shapes: Callable[[], Mapping[str, Sequence[tuple[int, ...]]]] | None = None
    """The model input shapes (batch of one) the sources will feed, by input name."""
    calibration: Callable[[], Iterable[Any]] | None = None
    """Batches of preprocessed frames for INT8 calibration."""


def open_onnxruntime(
    config: EngineConfig,
    model_path: str,
    dynamic_axes: Mapping[str, tuple[int, ...]],
    options: OpenOptions = OpenOptions(),
) -> Engine:
    """`backend: onnxruntime`: a session with the config's providers, threads and caches."""
    from framewire.engines.onnxruntime import OnnxRuntimeEngine

    several = config.processes_per_device > 1
    return OnnxRuntimeEngine(
        model_path,
        threads=config.threads,
        graph_optimization=config.graph_optimization,
        providers=config.providers,
        dynamic_axes=dynamic_axes,
        device_id=options.device,
        precision=fixed_precision(config),
        cache_dir=config.cache_dir,
        optimized_cache=config.optimized_model_cache,
        gpu_mem_limit=_gpu_mem_limit(config, options.device) if "cuda" in config.providers else None,
        cudnn_conv_algo_search=config.cudnn_conv_algo_search or ("heuristic" if several else "exhaustive"),
        trt_profile=_ort_trt_profile(config, model_path, dynamic_axes, options)
        if "tensorrt" in config.providers
        else None,
    )


def _gpu_mem_limit(config: EngineConfig, device: int) -> int | None:
    """Bytes of ONNX Runtime's CUDA arena for one infer process: `gpu_mem_limit_mb`, or with several
    processes on one GPU 90% of its memory shared among them (each arena otherwise grows until the
    GPU is full, and the last process to ask fails)."""
    if config.gpu_mem_limit_mb:
        return config.gpu_mem_limit_mb << 20
    if config.processes_per_device < 2:
        return None
    from framewire.engines import cuda

    memory = cuda.memory_info(device)
    if memory is None:
        log.warning(
            "engine.gpu_mem_limit_mb: GPU %d's memory is unknown (no cuda-python?); the %d processes "
            "on it share it without limits",
            device,
            config.processes_per_device,
        )
        return None
    return int(memory[1] * 0.9) // config.processes_per_device


def _ort_trt_profile(
    config: EngineConfig,
    model_path: str,
    dynamic_axes: Mapping[str, tuple[int, ...]],
    options: OpenOptions,
) -> Any:
    """The optimisation profile ONNX Runtime's TensorRT provider builds its engine for: the same
    batches and source sizes as native TensorRT's; None (ORT's own run-time rebuilds) when the
    sources give no sizes."""
    from framewire.engines.onnx_model import describe
    from framewire.engines.trt_build import make_profile
    from framewire.pipeline.errors import ConfigError

    inputs, _ = describe(model_path, dynamic_axes or None)
    try:
        return make_profile(
            inputs,
            min_batch=config.min_batch,
            opt_batch=config.opt_batch or config.max_batch,
            max_batch=config.max_batch,
            examples=dict(options.input_shapes()) if options.input_shapes else {},
        )
    except ConfigError as exc:
        log.info("ONNX Runtime TensorRT provider without a profile: %s", exc)
        return None


def open_tensorrt(
    config: EngineConfig,
    model_path: str,
    dynamic_axes: Mapping[str, tuple[int, ...]],
    options: OpenOptions = OpenOptions(),
) -> Engine:
    """`backend: tensorrt`: the engine built (or found in the cache) for this model and GPU."""
    from framewire.engines import cuda
    from framewire.engines.tensorrt import TensorRTEngine
    from framewire.engines.trt_build import ensure_engine, import_tensorrt

    import_tensorrt()  # the clear errors first: no TensorRT, no GPU
    cuda.require_device(options.device)
    path = ensure_engine(build_request(config, model_path, dynamic_axes, options))
    return TensorRTEngine(
        path,
        device=options.device,
        cuda_graph=config.cuda_graph,
        spin_wait=config.spin_wait,
        model_path=model_path,
    )


def build_request(
    config: EngineConfig,
    model_path: str,
    dynamic_axes: Mapping[str, tuple[int, ...]],
    options: OpenOptions = OpenOptions(),
) -> Any:
    """The `trt_build.BuildRequest` of this config (also what `build-engine` builds)."""
    from framewire.engines.trt_build import BuildRequest

    calibration = config.calibration
    identity = ""
    if calibration.video:
        try:
            size = os.stat(calibration.video).st_size
        except OSError:
            size = -1
        identity = f"{os.path.abspath(calibration.video)}:{size}:{calibration.frames}:{calibration.batch}"
    return BuildRequest(
        model_path=model_path,
        precision=fixed_precision(config),
        dynamic_axes=dict(dynamic_axes),
        min_batch=config.min_batch,
        opt_batch=config.opt_batch or config.max_batch,
        max_batch=config.max_batch,
        examples=dict(options.input_shapes()) if options.input_shapes else {},
        workspace_mb=config.workspace_mb,
        cache_dir=config.cache_dir,
        device=options.device,
        calibration=options.calibration if calibration.video else None,
        calibration_id=identity,
        calibration_frames=calibration.frames,
        calibration_batch=calibration.batch,
    )


def open_triton(
    config: EngineConfig,
    model_path: str,
    dynamic_axes: Mapping[str, tuple[int, ...]],
    options: OpenOptions = OpenOptions(),
) -> Engine:
    """`backend: triton`: the model on a Triton server (engine.triton), over gRPC."""
    from framewire.engines.triton import TritonEngine, model_name

    settings = config.triton
    name = model_name(settings, model_path, options.secondary)
    version = settings.version if options.secondary is None else ""
    return TritonEngine(settings, name, dynamic_axes, device=options.device, version=version)


def open_openvino(
    config: EngineConfig,
    model_path: str,
    dynamic_axes: Mapping[str, tuple[int, ...]],
    options: OpenOptions = OpenOptions(),
) -> Engine:
    """`backend: openvino`: the model compiled by OpenVINO for `engine.device`, at the precision the
    accuracy gate allows (`framewire.engines.openvino_gate`), with this process's threads and streams."""
    from framewire.engines.cpu_features import cpu_flags, default_precision
    from framewire.engines.openvino import OpenVinoEngine
    from framewire.engines.openvino_gate import gated_precision

    native = default_precision(cpu_flags()) if config.device == "CPU" else "fp32"  # others: not gated
    return OpenVinoEngine(
        model_path,
        device=config.device,
        precision=gated_precision(model_path, config.precision, native),
        threads=config.threads,
        streams=config.streams,
        dynamic_axes=dynamic_axes,
        input_shapes=options.input_shapes,
        cache_dir=config.cache_dir,
    )


def fixed_precision(config: EngineConfig) -> str:
    """engine.precision for ONNX Runtime and TensorRT: `auto` is fp32 there."""
    return "fp32" if config.precision == "auto" else config.precision


Opener = Callable[[EngineConfig, str, Mapping[str, tuple[int, ...]], OpenOptions], Engine]
"""What an entry of the `framewire.backends` group is: (engine config, model path, dynamic axes,
options) -> an open Engine."""


# --- backend: auto -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    """What this machine offers the backends."""

    tensorrt: str | None
    """Version of an importable tensorrt package with a builder, else None."""
    gpus: int
    no_gpu: str
    """Why `gpus` is 0 (no driver, no device, no cuda-python and no libcuda)."""
    ort_providers: frozenset[str]
    openvino: str | None = None
    """Version of the installed openvino package, else None."""
    cpu_flags: frozenset[str] = frozenset()
    """The CPU's flags (framewire.engines.cpu_features): AMX and VNNI make OpenVINO worth it."""


@functools.lru_cache(maxsize=1)
def detect_machine() -> Machine:
    """Probe once per process; never raises (cuda-python raises without a driver: caught)."""
    from framewire.engines import cuda
    from framewire.engines.cpu_features import cpu_flags
    from framewire.engines.trt_build import import_tensorrt
    from framewire.pipeline.errors import EngineError

    try:
        version: str | None = str(import_tensorrt().__version__)
    except EngineError:
        version = None
    gpus, why = cuda.gpu_status()
    try:
        import onnxruntime as ort

        providers = frozenset(ort.get_available_providers())
    except ImportError:
        providers = frozenset()
    return Machine(version, gpus, why, providers, _openvino_version(), cpu_flags())


def _openvino_version() -> str | None:
    """The openvino package's version, without importing it (its import starts no threads, but
    costs a fifth of a second in every process that only asks)."""
    from importlib import metadata
    from importlib.util import find_spec

    if find_spec("openvino") is None:
        return None
    try:
        return metadata.version("openvino")
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Choice:
    backend: Backend | str
    """A built-in backend, or the name of a plug-in's (`framewire.backends`)."""
    providers: tuple[str, ...]
    """ONNX Runtime providers (short names); empty for TensorRT."""
    gpu: bool
    """Whether infer runs on GPUs, so that each of `devices` gets `processes_per_device` workers."""
    reason: str


def choose_backend(config: EngineConfig, machine: Machine | None = None, *, quiet: bool = False) -> Choice:
    """The backend that runs `config`. `auto`: TensorRT when it imports and a GPU is present, else
    ONNX Runtime with CUDA when its build has the provider and a GPU is present, else OpenVINO on
    the CPU where it is installed and the CPU has AMX or VNNI, else ONNX Runtime on the CPU
    (`engine.providers` then does not apply). The choice is logged in one line, once per process
    (`quiet`: at debug level, for the infer workers, so a job says it once): a warning when GPU
    packages are installed but no GPU can be used, or a GPU is present but no package can use it,
    since that user expected a GPU, and when openvino is installed on a CPU it does not speed up."""
    if config.backend is Backend.TENSORRT:
        return Choice(Backend.TENSORRT, (), True, "engine.backend is tensorrt")
    if config.backend is Backend.TRITON:  # the server holds the GPUs: processes_per_device clients
        return Choice(Backend.TRITON, (), False, "engine.backend is triton")
    if config.backend is Backend.OPENVINO:  # one device per process (engine.device)
        return Choice(Backend.OPENVINO, (), False, "engine.backend is openvino")
    if not isinstance(config.backend, Backend):  # a plug-in's: it knows its devices
        return Choice(config.backend, (), False, f"engine.backend is {config.backend}")
    machine = machine or detect_machine()
    if config.backend is Backend.ONNXRUNTIME:
        from framewire.engines.onnxruntime import PROVIDERS

        gpu = machine.gpus > 0 and any(
            name != "cpu" and PROVIDERS.get(name) in machine.ort_providers for name in config.providers
        )
        return Choice(Backend.ONNXRUNTIME, tuple(config.providers), gpu, "engine.backend is onnxruntime")
    choice = _auto(machine)
    if choice not in _logged:  # once per process, however often it is asked
        _logged.add(choice)
        # A warning where the user likely expected a GPU: GPU packages with no usable GPU, or a GPU
        # with no package that can use it.
        gpu_packages = machine.tensorrt is not None or "CUDAExecutionProvider" in machine.ort_providers
        unexpected = (gpu_packages or machine.gpus > 0) and not choice.gpu
        level = logging.DEBUG if quiet else logging.WARNING if unexpected else logging.INFO
        log.log(level, "engine.backend auto: %s (%s)", _name(choice.backend), choice.reason)
    return choice


def _auto(machine: Machine) -> Choice:
    """`backend: auto` on this machine (choose_backend says the order)."""
    from framewire.engines.cpu_features import gains_from_openvino

    if machine.tensorrt and machine.gpus:
        return Choice(
            Backend.TENSORRT, (), True, f"TensorRT {machine.tensorrt} and {machine.gpus} GPU(s) found"
        )
    if "CUDAExecutionProvider" in machine.ort_providers and machine.gpus:
        return Choice(
            Backend.ONNXRUNTIME,
            ("cuda", "cpu"),
            True,
            f"ONNX Runtime with CUDA on {machine.gpus} GPU(s); no usable tensorrt package",
        )
    if machine.gpus:
        why = (
            f"{machine.gpus} GPU(s) found, but this onnxruntime build has no CUDA provider and no "
            "tensorrt package imports (install the gpu extra of your CUDA: docs/gpu.md)"
        )
        return Choice(Backend.ONNXRUNTIME, ("cpu",), False, f"ONNX Runtime on the CPU: {why}")
    if machine.openvino and (gains := gains_from_openvino(machine.cpu_flags)):
        return Choice(
            Backend.OPENVINO, (), False, f"OpenVINO {machine.openvino} on the CPU ({gains}); {machine.no_gpu}"
        )
    without = (
        f"openvino {machine.openvino} is installed, but this CPU has neither AMX nor VNNI, so it "
        "would be no faster; "
        if machine.openvino
        else ""
    )
    return Choice(Backend.ONNXRUNTIME, ("cpu",), False, f"ONNX Runtime on the CPU: {without}{machine.no_gpu}")


_logged: set[Choice] = set()


def infer_workers(config: EngineConfig, machine: Machine | None = None, *, quiet: bool = False) -> int:
    """Infer processes: len(devices) x processes_per_device on GPUs, processes_per_device on the CPU.
    `quiet`: the backend choice is logged at debug level (a worker asking, not the job)."""
    gpu = choose_backend(config, machine, quiet=quiet).gpu
    return config.processes_per_device * (len(config.devices) if gpu else 1)


def device_of(config: EngineConfig, worker: int) -> int:
    """The GPU of infer worker `worker`: devices[worker // processes_per_device]."""
    return config.devices[(worker // config.processes_per_device) % len(config.devices)]


def preflight(config: EngineConfig, model_path: str | None = None) -> Choice:
    """Fail fast, in one line, where the configured backend cannot run here (no TensorRT, no GPU,
    a GPU id this machine lacks, no Triton answering with the model), before any worker starts."""
    from framewire.engines import cuda
    from framewire.engines.trt_build import import_tensorrt

    choice = choose_backend(config)
    if not isinstance(choice.backend, Backend):
        BACKENDS.get(choice.backend, "engine.backend")  # a plug-in that does not import: one line now
    elif choice.backend is Backend.TENSORRT:
        import_tensorrt()
        for device in config.devices:
            cuda.require_device(device)
    elif choice.backend is Backend.TRITON and model_path is not None:
        from framewire.engines import triton

        triton.preflight(config.triton, model_path)
    elif choice.backend is Backend.OPENVINO:
        from framewire.engines.openvino_support import preflight as openvino_preflight

        openvino_preflight(config)
    elif config.backend is Backend.ONNXRUNTIME:
        from framewire.engines.onnxruntime import check_providers

        check_providers(config.providers)
    return choice


def open_engine(
    config: EngineConfig,
    model_path: str,
    dynamic_axes: Mapping[str, tuple[int, ...]] | None = None,
    options: OpenOptions | None = None,
) -> Engine:
    """The engine of `config` for one worker (`options.device` is its GPU)."""
    choice = choose_backend(config, quiet=True)  # the supervisor's preflight said it already
    if choice.gpu and not config.spin_wait:
        _sleep_while_the_gpu_works(options.device if options else 0)
    if config.backend is Backend.AUTO:
        config = config.model_copy(update={"backend": choice.backend, "providers": choice.providers})
    opener: Opener = BACKENDS.get(_name(choice.backend), "engine.backend")
    return opener(config, model_path, dynamic_axes or {}, options or OpenOptions())


def _sleep_while_the_gpu_works(device: int) -> None:
    """This worker's waits on its GPU sleep instead of spinning a core (engine.spin_wait: false).
    Only a cost where it fails: one line, and the waits spin as before."""
    from framewire.engines import cuda
    from framewire.pipeline.errors import EngineError

    try:
        cuda.runtime()
    except EngineError as exc:  # onnxruntime-gpu without cuda-python: its waits spin, as they always did
        log.debug("GPU %d: ONNX Runtime's waits spin (%s)", device, exc)
        return
    if cuda.device_count() == 0:
        return  # the engine itself says what is missing, in one line
    try:
        cuda.schedule_blocking(device)
    except EngineError as exc:
        log.warning("GPU %d: waits for the GPU spin a core (%s)", device, exc)


def _name(backend: Backend | str) -> str:
    return backend.value if isinstance(backend, Backend) else backend
