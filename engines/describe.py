"""`validate`'s line on the engine: which backend will run the model, on what, at which precision,
and with how many processes, threads and streams, without loading the model."""

from __future__ import annotations

from framewire.config import Backend, EngineConfig
from framewire.engines.registry import choose_backend, fixed_precision, infer_workers


def how_it_runs(config: EngineConfig) -> str:
    """One line, e.g. `openvino on CPU, precision auto: bf16 (this CPU's default), 2 process(es) x
    1 thread(s), 1 stream(s)`. With backend openvino, `engine.device` is checked first (the same
    one-line ConfigError a run gives)."""
    choice = choose_backend(config, quiet=True)
    workers = infer_workers(config, quiet=True)
    threads = f"{config.threads} thread(s)" if config.threads else "the runtime's threads"
    auto = f" (auto: {choice.reason})" if config.backend is Backend.AUTO else ""
    if choice.backend is Backend.OPENVINO:
        from framewire.engines.openvino_support import preflight

        preflight(config)
        streams = f"{config.streams} stream(s)" if config.streams else "OpenVINO's streams"
        return (
            f"openvino on {config.device}{auto}, precision {config.precision}: {openvino_precision(config)}, "
            f"{workers} process(es) x {threads}, {streams}"
        )
    if choice.backend is Backend.ONNXRUNTIME:
        providers = ", ".join(choice.providers or config.providers)
        precision = fixed_precision(config)
        return f"onnxruntime on {providers}{auto}, {precision}, {workers} process(es) x {threads}"
    if choice.backend is Backend.TENSORRT:
        devices = ", ".join(map(str, config.devices))
        return f"tensorrt on GPU(s) {devices}{auto}, {fixed_precision(config)}, {workers} process(es)"
    return f"{choice.backend.value if isinstance(choice.backend, Backend) else choice.backend}{auto}"


def openvino_precision(config: EngineConfig) -> str:
    """What OpenVINO will run for `engine.precision` on `engine.device` (a CPU's from its flags)."""
    from framewire.engines.cpu_features import cpu_flags, default_precision

    cpu = config.device == "CPU" or config.device.startswith("AUTO") and "GPU" not in config.device
    if config.precision == "int8":
        return "int8 from the model's quantized nodes"
    if not cpu:
        return "the device's choice (f16 on Intel GPUs)" if config.precision == "auto" else config.precision
    flags = cpu_flags()
    native = default_precision(flags)
    if config.precision == "auto":
        return f"{native} (this CPU's default)"
    if config.precision == "bf16" and native == "fp32":
        return "fp32 (this CPU has no bf16 instructions: AMX or AVX-512 BF16)"
    if config.precision == "fp16" and not flags & {"amx_fp16", "avx512_fp16"}:
        return "fp32 or bf16 (this CPU has no fp16 instructions: AMX-FP16; the run's log says which)"
    return config.precision
