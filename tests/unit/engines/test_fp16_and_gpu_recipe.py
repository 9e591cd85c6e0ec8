"""The models TensorRT 11 builds from, made on the CPU: fp16 (inputs and outputs kept fp32) and Q/DQ
int8 with the `tensorrt` recipe (symmetric, weighted layers only). Both run on ONNX Runtime's CPU
provider, close to the fp32 model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from framewire.engines.fp16 import METADATA_KEY, convert_model_file, convert_to_fp16
from framewire.engines.onnxruntime import OnnxRuntimeEngine
from framewire.engines.quantize import QuantizeOptions, quantization_info, quantize_model
from framewire.engines.trt_precision import model_info
from framewire.pipeline.errors import ConfigError, EngineError

pytestmark = pytest.mark.timeout(60)


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((1, 3, 8, 8), dtype=np.float32)


def test_fp16_keeps_fp32_inputs_and_outputs_and_runs_on_the_cpu(conv_model: Path, tmp_path: Path) -> None:
    converted = onnx.load_from_string(convert_to_fp16(conv_model.read_bytes()))
    elem = {v.name: v.type.tensor_type.elem_type for v in [*converted.graph.input, *converted.graph.output]}
    assert set(elem.values()) == {TensorProto.FLOAT}
    assert any(init.data_type == TensorProto.FLOAT16 for init in converted.graph.initializer)
    out = tmp_path / "conv-fp16.onnx"
    convert_model_file(conv_model, out, {"x": (2, 3)})
    assert any(p.key == METADATA_KEY for p in onnx.load(str(out)).metadata_props)
    half = OnnxRuntimeEngine(str(out), dynamic_axes={"x": (2, 3)})
    full = OnnxRuntimeEngine(str(conv_model), dynamic_axes={"x": (2, 3)})
    for seed in range(3):
        np.testing.assert_allclose(
            half.infer({"x": _x(seed)})["y"], full.infer({"x": _x(seed)})["y"], atol=2e-3
        )


def test_fp16_refuses_a_model_that_is_int8_already(conv_model: Path, tmp_path: Path) -> None:
    model = _recipe(conv_model, tmp_path, "tensorrt")
    with pytest.raises(EngineError, match="has Q/DQ nodes"):
        convert_to_fp16(model.read_bytes())


def _recipe(conv_model: Path, tmp_path: Path, recipe: str) -> Path:
    out = tmp_path / f"conv-{recipe}.onnx"
    feeds = ({"x": _x(i)} for i in range(8))
    quantize_model(conv_model, out, feeds, options=QuantizeOptions(recipe=recipe, min_channels=0))
    return out


def test_the_tensorrt_recipe_is_symmetric_int8_on_weighted_layers(conv_model: Path, tmp_path: Path) -> None:
    model_path = _recipe(conv_model, tmp_path, "tensorrt")
    model = onnx.load(str(model_path))
    initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    quantize = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert quantize
    for node in quantize:
        zero_point = initializers[node.input[2]]
        assert zero_point.dtype == np.int8 and not zero_point.any()
    # Q/DQ sit only on the convolution's inputs (activation and weight): none on its output (a
    # detector's box and score heads would be rounded to 8 bits; TensorRT requantises where the
    # next int8 layer reads) and none inside Transpose or Reshape, which TensorRT places itself.
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    dequantised = {n.output[0] for n in quantize if n.op_type == "DequantizeLinear"}
    assert set(conv.input) <= dequantised
    quantised_inputs = {n.input[0] for n in quantize if n.op_type == "QuantizeLinear"}
    assert quantised_inputs == {"x"}
    info = model_info(model_path.read_bytes())
    assert info.qdq and info.symmetric
    assert quantization_info(model_path)["format"] == "QDQ s8s8 symmetric (TensorRT)"  # type: ignore[index]
    cpu = model_info(_recipe(conv_model, tmp_path, "cpu").read_bytes())
    assert cpu.qdq and not cpu.symmetric  # u8 activations: not for TensorRT
    int8 = OnnxRuntimeEngine(str(model_path))
    full = OnnxRuntimeEngine(str(conv_model))
    y, reference = int8.infer({"x": _x(0)})["y"], full.infer({"x": _x(0)})["y"]
    assert float(np.abs(y - reference).max()) < 0.05 * float(np.abs(reference).max())


def test_an_unknown_recipe_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="quantize recipe 'gpu': one of cpu, tensorrt"):
        QuantizeOptions(recipe="gpu")
