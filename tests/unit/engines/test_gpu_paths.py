"""The GPU paths as a user meets them on this machine (no fakes): one-line errors where TensorRT or a
GPU is missing; and, marked `gpu`, the real thing where they are present (skipped here)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from framewire.engines import cuda
from framewire.engines.registry import detect_machine
from framewire.config import Backend, EngineConfig
from framewire.pipeline.errors import EngineError

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None
HAS_GPU = cuda.device_count() > 0
HAS_CUDA_PROVIDER = "CUDAExecutionProvider" in ort.get_available_providers()
TENSORRT_MISSING = (
    "engine.backend: tensorrt: the tensorrt package is not installed (install the gpu extra: make EXTRAS=gpu)"
)


@pytest.mark.skipif(HAS_TENSORRT, reason="tensorrt is installed")
def test_tensorrt_missing_is_a_one_line_engine_error(conv_model: Path) -> None:
    from framewire.engines.registry import open_engine

    with pytest.raises(EngineError) as info:
        open_engine(EngineConfig(backend=Backend.TENSORRT), str(conv_model))
    assert str(info.value) == TENSORRT_MISSING


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_no_gpu_is_a_one_line_engine_error_and_auto_falls_back_to_the_cpu() -> None:
    with pytest.raises(EngineError) as info:
        cuda.require_device(0)
    message = str(info.value)
    assert message.startswith("no CUDA driver / GPU found") and "\n" not in message
    detect_machine.cache_clear()
    try:
        machine = detect_machine()
    finally:
        detect_machine.cache_clear()
    assert machine.gpus == 0


@pytest.mark.skipif(HAS_TENSORRT or HAS_GPU, reason="TensorRT or a GPU is present")
@pytest.mark.parametrize(
    "args",
    [
        ["run", "--no-progress", "--set", "engine.backend=tensorrt"],
        ["build-engine", "--precision", "fp16"],
    ],
    ids=["run", "build-engine"],
)
def test_the_cli_says_it_in_one_line(args: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "run_pipeline.py"), *args],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert result.stderr == f"framewire: error: {TENSORRT_MISSING}\n"
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.skipif(HAS_CUDA_PROVIDER, reason="this onnxruntime build has CUDA")
def test_cuda_provider_only_on_a_cpu_build_is_an_error_and_with_cpu_a_warning(
    conv_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from framewire.engines.onnxruntime import OnnxRuntimeEngine

    with pytest.raises(EngineError) as info:
        OnnxRuntimeEngine(str(conv_model), providers=("cuda",))
    assert str(info.value) == (
        "engine.providers: none of the execution providers ['cuda'] is available (this onnxruntime build "
        f"has {', '.join(sorted(ort.get_available_providers()))}; install the gpu extra: make EXTRAS=gpu)"
    )
    engine = OnnxRuntimeEngine(str(conv_model), providers=("cuda", "cpu"))
    assert engine.provider == "CPUExecutionProvider"


# --- real hardware -----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_TENSORRT and HAS_GPU), reason="needs tensorrt and an NVIDIA GPU")
@pytest.mark.timeout(600)
def test_tensorrt_builds_caches_and_matches_numpy(
    conv_model: Path, conv_weights: np.ndarray, tmp_path: Path
) -> None:
    from framewire.engines.tensorrt import TensorRTEngine
    from framewire.engines.trt_build import BuildRequest, ensure_engine

    request = BuildRequest(str(conv_model), cache_dir=str(tmp_path), min_batch=1, opt_batch=2, max_batch=4)
    path = ensure_engine(request)
    assert ensure_engine(request) == path
    engine = TensorRTEngine(path, cuda_graph=True)
    for batch in (1, 3, 3):
        x = np.random.default_rng(batch).random((batch, 3, 8, 8), dtype=np.float32)
        y = engine.infer({"x": x}, ["y"])["y"]
        reference = np.einsum("oc,nchw->nohw", conv_weights[:, :, 0, 0], x)
        np.testing.assert_allclose(y, reference, rtol=1e-3, atol=1e-4)
    engine.close()


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_CUDA_PROVIDER and HAS_GPU), reason="needs onnxruntime-gpu and an NVIDIA GPU")
def test_onnxruntime_cuda_with_io_binding(conv_model: Path, conv_weights: np.ndarray) -> None:
    from framewire.engines.onnxruntime import OnnxRuntimeEngine

    engine = OnnxRuntimeEngine(str(conv_model), providers=("cuda", "cpu"))
    assert engine.provider == "CUDAExecutionProvider"
    x = np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)
    y = engine.infer({"x": x}, ["y"])["y"]
    np.testing.assert_allclose(
        y, np.einsum("oc,nchw->nohw", conv_weights[:, :, 0, 0], x), rtol=1e-4, atol=1e-5
    )
