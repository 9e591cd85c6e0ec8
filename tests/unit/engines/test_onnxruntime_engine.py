"""OnnxRuntimeEngine on the CPU: loading, providers, dynamic dims, inference and its errors."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from framewire.engines.onnxruntime import OnnxRuntimeEngine
from framewire.pipeline.errors import ConfigError, EngineError
from framewire.pipeline.wire.tensors import TensorSpec

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
YUNET = ROOT / "assets/models/yunet/face_detection_yunet_2023mar.onnx"
F32 = np.dtype(np.float32)
HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers()


def _reference(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    return np.einsum("oc,nchw->nohw", weights[:, :, 0, 0], x)


def test_loads_on_cpu_and_describes_the_model(conv_model: Path, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="framewire.engines.onnxruntime"):
        engine = OnnxRuntimeEngine(str(conv_model), threads=1)
    assert engine.backend == "onnxruntime"
    assert engine.provider == "CPUExecutionProvider"
    assert engine.inputs == (TensorSpec("x", F32, (1, 3, 8, 8)),)
    assert engine.outputs == (TensorSpec("y", F32, (1, 2, 8, 8)), TensorSpec("z", F32, (1, 64, 2)))
    assert [r.getMessage() for r in caplog.records] == [f"model {conv_model} loaded on CPUExecutionProvider"]


def test_infer_returns_outputs_by_name(conv_model: Path, conv_weights: np.ndarray) -> None:
    engine = OnnxRuntimeEngine(str(conv_model))
    x = np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)

    everything = engine.infer({"x": x})
    assert list(everything) == ["y", "z"]
    np.testing.assert_allclose(everything["y"], _reference(x, conv_weights), rtol=1e-5)
    np.testing.assert_array_equal(everything["z"], everything["y"].transpose(0, 2, 3, 1).reshape(1, -1, 2))

    only_z = engine.infer({"x": x}, ["z"])
    assert list(only_z) == ["z"]


def test_dynamic_axes_accept_other_sizes(conv_model: Path, conv_weights: np.ndarray) -> None:
    engine = OnnxRuntimeEngine(str(conv_model), dynamic_axes={"x": (2, 3)}, graph_optimization="basic")
    assert engine.inputs[0].shape == (1, 3, "x_2", "x_3")
    x = np.random.default_rng(1).random((1, 3, 16, 24), dtype=np.float32)
    out = engine.infer({"x": x})
    assert out["y"].shape == (1, 2, 16, 24) and out["z"].shape == (1, 384, 2)
    np.testing.assert_allclose(out["y"], _reference(x, conv_weights), rtol=1e-5)


def test_yunet_at_640x288() -> None:
    engine = OnnxRuntimeEngine(str(YUNET), threads=2, dynamic_axes={"input": (2, 3)})
    out = engine.infer({"input": np.zeros((1, 3, 288, 640), np.float32)})
    assert out["cls_8"].shape == (1, 2880, 1)
    assert out["bbox_16"].shape == (1, 720, 4)
    assert out["kps_32"].shape == (1, 180, 10)
    engine.close()


@pytest.mark.skipif(HAS_CUDA, reason="this onnxruntime build has CUDA")
def test_unavailable_provider_is_skipped_with_one_warning(conv_model: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="framewire.engines.onnxruntime"):
        engine = OnnxRuntimeEngine(str(conv_model), providers=("tensorrt", "cuda", "cpu"))
    assert engine.provider == "CPUExecutionProvider"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        (
            "execution provider(s) TensorrtExecutionProvider, CUDAExecutionProvider "
            "not available in this onnxruntime build, skipped"
        )
    ]


@pytest.mark.skipif(HAS_CUDA, reason="this onnxruntime build has CUDA")
def test_no_available_provider_is_an_engine_error(conv_model: Path) -> None:
    with pytest.raises(EngineError, match=r"none of the execution providers \['cuda'\] is available"):
        OnnxRuntimeEngine(str(conv_model), providers=("cuda",))


def test_empty_provider_list_is_an_engine_error(conv_model: Path) -> None:
    with pytest.raises(EngineError, match="none of the execution providers"):
        OnnxRuntimeEngine(str(conv_model), providers=())


def test_unknown_provider_name_is_a_config_error(conv_model: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"unknown execution provider\(s\) 'gpu' \(one of cpu, cuda, tensorrt\)"
    ):
        OnnxRuntimeEngine(str(conv_model), providers=("gpu", "cpu"))


def test_unknown_optimisation_level_is_a_config_error(conv_model: Path) -> None:
    with pytest.raises(ConfigError, match="'max'"):
        OnnxRuntimeEngine(str(conv_model), graph_optimization="max")


def test_missing_model_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.onnx"
    with pytest.raises(ConfigError, match=f"model file '{missing}' does not exist"):
        OnnxRuntimeEngine(str(missing))


@pytest.mark.parametrize("dynamic_axes", [None, {"x": (2, 3)}])
def test_corrupt_model_names_the_file(tmp_path: Path, dynamic_axes) -> None:
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(np.random.default_rng(4).bytes(2048))
    with pytest.raises(ConfigError) as info:
        OnnxRuntimeEngine(str(path), dynamic_axes=dynamic_axes)
    message = str(info.value)
    assert f"model file '{path}' is not a valid ONNX model" in message
    assert "\n" not in message


def test_inference_error_names_the_model_and_the_input(conv_model: Path) -> None:
    engine = OnnxRuntimeEngine(str(conv_model))
    with pytest.raises(EngineError) as info:
        engine.infer({"x": np.zeros((1, 3, 5, 5), np.float32)})
    message = str(info.value)
    assert message.startswith(f"model {conv_model}: inference failed for input 'x' float32 (1, 3, 5, 5): ")
    assert "\n" not in message

    with pytest.raises(EngineError, match="'x' float64"):
        engine.infer({"x": np.zeros((1, 3, 8, 8), np.float64)})
    with pytest.raises(EngineError, match="'image'"):
        engine.infer({"image": np.zeros((1, 3, 8, 8), np.float32)})


def test_closed_engine_refuses_to_infer(conv_model: Path) -> None:
    engine = OnnxRuntimeEngine(str(conv_model))
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.infer({"x": np.zeros((1, 3, 8, 8), np.float32)})


def test_optimized_model_is_written(conv_model: Path, tmp_path: Path) -> None:
    target = tmp_path / "optimized.onnx"
    OnnxRuntimeEngine(str(conv_model), optimized_model_path=str(target), graph_optimization="extended")
    assert target.is_file() and target.stat().st_size > 0


def test_negative_thread_count_is_a_config_error(conv_model: Path) -> None:
    with pytest.raises(ConfigError, match="threads=-1"):
        OnnxRuntimeEngine(str(conv_model), threads=-1)
