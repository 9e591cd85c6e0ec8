"""Run in a subprocess against a real module: `python probe.py tensorrt|cuda < paths.json`.

Prints JSON: `version`, `facts` (what each requested path is, see surface.describe) and
`conventions` (how the real module fails without a usable CUDA, and framewire's own code run
against it). The TensorRT bindings import only because the test put stub TensorRT libraries on
LD_LIBRARY_PATH; those stubs return NULL from every factory, as TensorRT does when CUDA cannot
start.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.contract.surface import describe  # noqa: E402


def _error(call: Any) -> dict[str, str] | None:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - what it raises is the point
        return {"type": type(exc).__name__, "message": str(exc).strip().splitlines()[0]}
    return None


def tensorrt_conventions(trt: Any) -> dict[str, Any]:
    import numpy as np

    from framewire.engines import trt_build, trt_calibration

    found: dict[str, Any] = {
        "runtime_without_cuda": _error(lambda: trt.Runtime(trt.Logger())),
        "builder_without_cuda": _error(lambda: trt.Builder(trt.Logger())),
        "nptype_float": np.dtype(trt.nptype(trt.DataType.FLOAT)).name,
        "nptype_bf16": _error(lambda: trt.nptype(trt.DataType.BF16)),
    }
    # framewire's own code against the real bindings.
    sys.modules["tensorrt"] = trt
    logger = trt_build.make_logger(trt)
    found["logger_is_an_ilogger"] = isinstance(logger, trt.ILogger)
    found["one_logger"] = trt_build.make_logger(trt) is logger
    found["construct_builder"] = _error(lambda: trt_build.construct(trt.Builder, logger, what="a builder"))
    found["import_tensorrt"] = trt_build.import_tensorrt() is trt
    if hasattr(trt, "IInt8EntropyCalibrator2"):
        feeder = trt_calibration.BatchFeeder([np.zeros((1, 3), np.float32)], 1, ["x"])
        with tempfile.TemporaryDirectory() as tmp:
            calibrator = trt_calibration.make_calibrator(trt, feeder, Path(tmp) / "table")
            found["calibrator"] = {
                "is_calibrator": isinstance(calibrator, trt.IInt8EntropyCalibrator2),
                "batch_size": calibrator.get_batch_size(),
            }
    return found


def cuda_conventions(rt: Any) -> dict[str, Any]:
    from framewire.engines import cuda

    def shape(result: Any) -> list[Any]:
        items = result if isinstance(result, tuple) else (result,)
        return [getattr(items[0], "name", str(items[0]))] + [None if v is None else type(v).__name__ for v in items[1:]]

    driver = rt.cudaDriverGetVersion()
    found: dict[str, Any] = {
        "driver_version": [getattr(driver[0], "name", str(driver[0])), driver[1]],
        "runtime_version": rt.cudaRuntimeGetVersion()[1],
        "has_driver": bool(driver[1]),
    }
    if not driver[1]:
        # What every call returns without a driver, and what framewire makes of it.
        found["calls"] = {
            "cudaGetDeviceCount": shape(rt.cudaGetDeviceCount()),
            "cudaGetDeviceProperties": shape(rt.cudaGetDeviceProperties(0)),
            "cudaSetDevice": shape(rt.cudaSetDevice(0)),
            "cudaMalloc": shape(rt.cudaMalloc(16)),
            "cudaMallocHost": shape(rt.cudaMallocHost(16)),
            "cudaStreamCreateWithFlags": shape(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking)),
            "cudaMemGetInfo": shape(rt.cudaMemGetInfo()),
        }
        error = rt.cudaGetDeviceCount()[0]
        name = rt.cudaGetErrorName(error)
        found["error_name"] = [getattr(name[0], "name", str(name[0])), name[1].decode()]
        found["gpu_status"] = list(cuda.gpu_status())
        found["require_device"] = _error(lambda: cuda.require_device(0))
        found["versions"] = cuda.versions()
        found["stream_handle_is_int"] = int(rt.cudaStream_t(0)) == 0
    return found


def main() -> int:
    kind = sys.argv[1]
    paths = json.load(sys.stdin)
    if kind == "tensorrt":
        import tensorrt_bindings as module  # what `import tensorrt` re-exports (the meta package)

        version = str(module.__version__)
        conventions = tensorrt_conventions(module)
    else:
        import cuda.bindings
        from cuda.bindings import runtime as module

        version = str(cuda.bindings.__version__)
        conventions = cuda_conventions(module)
    facts = {path: describe(module, path) for path in paths}
    json.dump({"version": version, "facts": facts, "conventions": conventions}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
