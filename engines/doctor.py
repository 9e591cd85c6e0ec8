"""`doctor`: what a user with a GPU runs first. Engine-level checks, each one line: ok, failed (why),
or skipped (because an earlier check failed).

- driver: the NVIDIA driver (libcuda) and the CUDA version it supports;
- cuda-python: its version and CUDA runtime, which the driver must support (same major or newer);
- gpus: how many, their names and memory;
- tensorrt: the package imports (its libraries load) and which major version (10: builder precision
  flags; 11: strongly typed);
- onnxruntime: its version and build; then each GPU provider of the build (cuda, tensorrt), tried on
  a tiny model: it must really start (ONNX Runtime falls back silently) and match the CPU;
- tensorrt fp32 / fp16: a tiny engine built with framewire's own builder in a temporary cache, run
  with framewire's own TensorRT engine, against ONNX Runtime on the CPU.

The tiny model is `y = 2x + 1` and `s = sum(x)` per frame over a [N, 3, 8, 8] input (elementwise
and reduction kernels, a dynamic batch, two outputs). The configured model's short benchmark is
added by the command (`framewire.app.commands.doctor`), which knows the config.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from framewire.engines import cuda, openvino_support
from framewire.pipeline.errors import EngineError, one_line

log = logging.getLogger(__name__)

OK, FAILED, SKIPPED = "ok", "failed", "skipped"


@dataclass
class Check:
    """One line of the doctor's summary."""

    name: str
    status: str
    detail: str

    @property
    def failed(self) -> bool:
        return self.status == FAILED


@dataclass
class Report:
    """What the doctor found (facts, for the top of its output) and its checks."""

    facts: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    def add(self, name: str, status: str, detail: str) -> Check:
        check = Check(name, status, detail)
        self.checks.append(check)
        return check

    def passed(self, name: str) -> bool:
        return any(c.name == name and c.status == OK for c in self.checks)

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.checks)


def run_checks(device: int = 0) -> Report:
    """Every engine-level check, on GPU `device`. Never raises: a check that breaks is a failed line."""
    report = Report()
    steps: list[tuple[str, Callable[[Report, int], None]]] = [
        ("driver", _driver),
        ("cuda-python", _cuda_python),
        ("gpus", _gpus),
        ("tensorrt", _tensorrt),
        ("onnxruntime", _onnxruntime),
    ]
    for name, step in steps:
        _guarded(report, name, lambda: step(report, device))
    _guarded(report, "openvino", lambda: report.facts.update(openvino_support.doctor_facts()))
    with tempfile.TemporaryDirectory(prefix="framewire-doctor-") as tmp:
        workdir = Path(tmp)
        model = tiny_model(workdir / "tiny.onnx")
        _guarded(report, "onnxruntime providers", lambda: _ort_providers(report, device, model, workdir))
        for precision in ("fp32", "fp16"):
            _guarded(
                report,
                f"tensorrt {precision} engine",
                lambda: _tensorrt_engine(report, device, model, workdir, precision),  # noqa: B023 - called at once
            )
    return report


def _guarded(report: Report, name: str, step: Callable[[], None]) -> None:
    """Run one check; whatever it raises is its failed line (the doctor reports, it never crashes)."""
    try:
        step()
    except Exception as exc:  # noqa: BLE001
        report.add(name, FAILED, one_line(exc))


# --- the machine ---------------------------------------------------------------------------------


def _driver(report: Report, device: int) -> None:
    kernel = _kernel_module()
    version = cuda.versions()["driver"] if _has_cuda_python() else _libcuda_version()
    if isinstance(version, str):  # why libcuda could not be asked
        report.add("driver", FAILED, version)
        return
    if not version:
        report.add("driver", FAILED, "no NVIDIA driver (libcuda.so.1 cannot be loaded or reports no CUDA)")
        return
    report.facts["driver"] = f"{kernel or 'NVIDIA driver'}, CUDA {cuda.version_text(version)}"
    report.add("driver", OK, report.facts["driver"])


def _cuda_python(report: Report, device: int) -> None:
    if not _has_cuda_python():
        report.add("cuda-python", FAILED, f"not installed ({cuda.INSTALL_HINT})")
        return
    versions = cuda.versions()
    runtime, driver = versions["runtime"], versions["driver"]
    report.facts["cuda-python"] = f"{_package_version('cuda-bindings', 'cuda-python')}, CUDA runtime {cuda.version_text(runtime)}"
    if runtime and driver and driver // 1000 < runtime // 1000:
        report.add(
            "cuda-python",
            FAILED,
            f"CUDA runtime {cuda.version_text(runtime)} needs a driver for CUDA {runtime // 1000}.x; this "
            f"driver supports {cuda.version_text(driver)} (update the driver, or install the extra of "
            "your CUDA: gpu for 12, gpu-cu13 for 13)",
        )
        return
    report.add("cuda-python", OK, report.facts["cuda-python"])


def _gpus(report: Report, device: int) -> None:
    count, why = cuda.gpu_status()
    if not count:
        report.add("gpus", FAILED, why or cuda.NO_GPU)
        return
    names = []
    for index in range(count):
        memory = cuda.memory_info(index)
        size = f", {memory[1] / (1 << 30):.0f} GiB" if memory else ""
        names.append(f"{index}: {cuda.device_name(index)}{size}")
    report.facts["gpus"] = "; ".join(names)
    if not 0 <= device < count:
        report.add("gpus", FAILED, f"GPU {device} not found (this machine has {count}: 0-{count - 1})")
        return
    report.add("gpus", OK, report.facts["gpus"])


def _tensorrt(report: Report, device: int) -> None:
    from framewire.engines.trt_build import import_tensorrt, trt_major

    try:
        trt = import_tensorrt()
    except EngineError as exc:
        report.add("tensorrt", FAILED, str(exc).removeprefix("engine.backend: tensorrt: "))
        return
    major = trt_major(trt)
    mode = "strongly typed networks: precision in the model" if major >= 11 else "builder precision flags"
    report.facts["tensorrt"] = f"{trt.__version__} ({mode})"
    report.add("tensorrt", OK, report.facts["tensorrt"])


def _onnxruntime(report: Report, device: int) -> None:
    import onnxruntime as ort

    providers = ort.get_available_providers()
    report.facts["onnxruntime"] = f"{ort.__version__} ({_package_name()}), build providers: {', '.join(providers)}"
    report.add("onnxruntime", OK, report.facts["onnxruntime"])


# --- providers and engines that really run -------------------------------------------------------


def tiny_model(path: Path) -> Path:
    """x [N, 3, 8, 8] -> y = 2x + 1, s = sum over all but the batch ([N])."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Mul", ["x", "two"], ["twice"]),
        helper.make_node("Add", ["twice", "one"], ["y"]),
        helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "framewire-doctor",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 8, 8]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, ["N"]),
        ],
        initializer=[
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
            numpy_helper.from_array(np.array(1.0, np.float32), "one"),
            numpy_helper.from_array(np.array([1, 2, 3], np.int64), "axes"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _sample(batch: int = 2) -> np.ndarray:
    return np.random.default_rng(7).random((batch, 3, 8, 8), dtype=np.float32)


def _reference(model: Path) -> dict[str, np.ndarray]:
    from framewire.engines.onnxruntime import OnnxRuntimeEngine

    engine = OnnxRuntimeEngine(str(model), providers=("cpu",), threads=1)
    try:
        return engine.infer({"x": _sample()})
    finally:
        engine.close()


def _compare(outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray], tolerance: float) -> str:
    """'' when every output is within `tolerance` (relative to its range), else what differs."""
    for name, expected in reference.items():
        got = outputs.get(name)
        if got is None or got.shape != expected.shape:
            return f"output {name}: shape {None if got is None else list(got.shape)}, expected {list(expected.shape)}"
        error = float(np.abs(got.astype(np.float64) - expected).max()) / max(float(np.abs(expected).max()), 1e-12)
        if not error <= tolerance:
            return f"output {name}: max relative error {error:.2g} > {tolerance:g}"
    return ""


def _ort_providers(report: Report, device: int, model: Path, workdir: Path) -> None:
    import onnxruntime as ort

    from framewire.engines.onnxruntime import PROVIDERS, OnnxRuntimeEngine

    available = set(ort.get_available_providers())
    reference = _reference(model)
    started = []
    for short in ("cuda", "tensorrt"):
        name = f"onnxruntime {short}"
        if PROVIDERS[short] not in available:
            report.add(name, FAILED, f"not in this onnxruntime build ({_package_name()}; install a gpu extra)")
            continue
        missing = provider_library_error(short)
        if missing:
            report.add(name, FAILED, f"its library does not load: {missing}")
            continue
        if not report.passed("gpus"):
            report.add(name, SKIPPED, "needs a GPU (see gpus)")
            continue
        with _quiet():
            engine = OnnxRuntimeEngine(
                str(model), providers=(short, "cpu"), device_id=device, cache_dir=str(workdir / "ort"), threads=1
            )
        try:
            if engine.provider != PROVIDERS[short]:
                report.add(name, FAILED, f"ONNX Runtime could not start it and runs on {engine.provider}")
                continue
            difference = _compare(engine.infer({"x": _sample()}), reference, 1e-3)
        finally:
            engine.close()
        if difference:
            report.add(name, FAILED, f"runs, but differs from the CPU: {difference}")
        else:
            started.append(short)
            report.add(name, OK, f"starts on GPU {device} and matches the CPU")
    report.facts["providers that start"] = ", ".join([*started, "cpu"])


def provider_library_error(short: str) -> str:
    """Why ONNX Runtime's `cuda` or `tensorrt` provider library cannot load (the library it lacks,
    e.g. `libcublasLt.so.12: cannot open shared object file`), '' when it loads. ONNX Runtime itself
    only falls back to the CPU, with the reason on its own log."""
    import onnxruntime as ort

    path = Path(ort.__file__).parent / "capi" / f"libonnxruntime_providers_{short}.so"
    if not path.is_file():
        return f"{path.name} is not in this onnxruntime package"
    try:
        ctypes.CDLL(str(path), mode=os.RTLD_LAZY | os.RTLD_LOCAL)
    except OSError as exc:
        return str(exc).split(": ", 1)[-1] if str(exc).startswith(str(path)) else str(exc)
    return ""


def _tensorrt_engine(report: Report, device: int, model: Path, workdir: Path, precision: str) -> None:
    name = f"tensorrt {precision} engine"
    if not report.passed("tensorrt") or not report.passed("gpus"):
        needs = [n for n in ("gpus", "tensorrt") if not report.passed(n)]
        report.add(name, SKIPPED, f"needs {' and '.join(needs)} (see above)")
        return
    from framewire.engines.tensorrt import TensorRTEngine
    from framewire.engines.trt_build import BuildRequest, ensure_engine

    request = BuildRequest(
        str(model),
        precision=precision,
        min_batch=1,
        opt_batch=2,
        max_batch=4,
        cache_dir=str(workdir / "engines"),
        device=device,
        workspace_mb=256,
    )
    with _quiet():
        path = ensure_engine(request)
    engine = TensorRTEngine(path, device=device, model_path=str(model))
    try:
        outputs = engine.infer({"x": _sample()})
    finally:
        engine.close()
    tolerance = 1e-4 if precision == "fp32" else 1e-2
    difference = _compare(outputs, _reference(model), tolerance)
    if difference:
        report.add(name, FAILED, f"built and ran, but differs from ONNX Runtime on the CPU: {difference}")
    else:
        report.add(name, OK, f"built, ran on GPU {device}, matches ONNX Runtime on the CPU (within {tolerance:g})")


# --- helpers -------------------------------------------------------------------------------------


def _has_cuda_python() -> bool:
    try:
        cuda.runtime()
    except EngineError:
        return False
    return True


def _libcuda_version() -> int | str:
    """The driver's CUDA version straight from libcuda, or why it cannot be asked."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver (libcuda.so.1 cannot be loaded)"
    version = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return "the NVIDIA driver does not answer (cuDriverGetVersion failed)"
    return version.value


KERNEL_MODULE_VERSION = Path("/proc/driver/nvidia/version")


def _kernel_module(path: Path | None = None) -> str:
    """The kernel module and its version from /proc, '' without the module: `NVIDIA UNIX x86_64 Kernel
    Module 550.54.15` (the proprietary module), `NVIDIA UNIX Open Kernel Module for x86_64 580.159.04`
    (the open one, the default from driver 560 and on Hopper and newer GPUs)."""
    try:
        first = (path or KERNEL_MODULE_VERSION).read_text().splitlines()[0]
    except (OSError, IndexError):
        return ""
    found = re.search(r"(NVIDIA\b.*?Kernel Module.*?)\s+(\d+\.\d+(?:\.\d+)*)\b", first)
    if found is None:
        return " ".join(first.split())
    return f"{' '.join(found.group(1).split())} {found.group(2)}"


def _package_version(*names: str) -> str:
    from importlib import metadata

    for name in names:
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return "version unknown"


def _package_name() -> str:
    from importlib import metadata

    for name in ("onnxruntime-gpu", "onnxruntime"):
        try:
            metadata.version(name)
            return name
        except metadata.PackageNotFoundError:
            continue
    return "onnxruntime"


@contextmanager
def _quiet() -> Iterator[None]:
    """TensorRT and ONNX Runtime warn about a tiny model (building, fallbacks); the doctor's lines say
    what matters."""
    previous = logging.getLogger("engines").level
    logging.getLogger("engines").setLevel(logging.ERROR if previous < logging.ERROR else previous)
    try:
        yield
    finally:
        logging.getLogger("engines").setLevel(previous)


def render(report: Report) -> str:
    """The facts, then one line per check."""
    lines = ["framewire doctor"]
    for key, value in report.facts.items():
        lines.append(f"  {key:<22} {value}")
    lines.append("")
    width = max((len(c.name) for c in report.checks), default=10)
    for check in report.checks:
        lines.append(f"{check.status:<8} {check.name:<{width}}  {check.detail}")
    failed = sum(c.failed for c in report.checks)
    lines.append("")
    lines.append(f"{failed} check(s) failed" if failed else "every check passed")
    return "\n".join(lines)


def as_dict(report: Report) -> dict[str, Any]:
    return {"facts": report.facts, "checks": [c.__dict__ for c in report.checks], "failed": report.failed}
