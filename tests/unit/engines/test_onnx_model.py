"""framewire.engines.onnx_model: describing model files and rewriting fixed input dims as dynamic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from framewire.engines.onnx_model import describe, load_model_bytes
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
YUNET = ROOT / "assets/models/yunet/face_detection_yunet_2023mar.onnx"
F32 = np.dtype(np.float32)


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param if d.HasField("dim_param") else d.dim_value for d in value.type.tensor_type.shape.dim]


def test_describe_reads_inputs_and_outputs(conv_model: Path) -> None:
    inputs, outputs = describe(conv_model)
    assert inputs == (TensorSpec("x", F32, (1, 3, 8, 8)),)
    assert outputs == (TensorSpec("y", F32, (1, 2, 8, 8)), TensorSpec("z", F32, (1, 64, 2)))


def test_rewrite_makes_the_axes_and_the_outputs_that_follow_them_symbolic(conv_model: Path) -> None:
    model = onnx.load_from_string(load_model_bytes(conv_model, {"x": (2, 3)}))

    assert _dims(model.graph.input[0]) == [1, 3, "x_2", "x_3"]
    assert len(model.graph.value_info) == 0
    y, z = model.graph.output
    assert _dims(y) == [1, 2, "y_2", "y_3"]
    assert _dims(z) == [1, "z_1", 2]
    assert len(model.graph.initializer) == 2


def test_describe_with_dynamic_axes_matches_the_rewrite(conv_model: Path) -> None:
    inputs, outputs = describe(conv_model, {"x": (2, 3)})
    assert inputs == (TensorSpec("x", F32, (1, 3, "x_2", "x_3")),)
    assert [o.shape for o in outputs] == [(1, 2, "y_2", "y_3"), (1, "z_1", 2)]


def test_yunet_grid_outputs_become_dynamic_and_the_rest_stay() -> None:
    inputs, outputs = describe(YUNET, {"input": (2, 3)})
    assert inputs[0].shape == (1, 3, "input_2", "input_3")
    shapes = {o.name: o.shape for o in outputs}
    assert shapes["cls_8"] == (1, "cls_8_1", 1)
    assert shapes["kps_32"] == (1, "kps_32_1", 10)


def test_missing_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.onnx"
    with pytest.raises(ConfigError, match=f"model file '{missing}' does not exist"):
        load_model_bytes(missing, {"x": (2,)})
    with pytest.raises(ConfigError, match="nope.onnx"):
        describe(missing)


@pytest.mark.parametrize("content", [b"", np.random.default_rng(3).bytes(4096)])
def test_corrupt_file_names_it(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_model_bytes(path, {"x": (2,)})
    assert f"model file '{path}' is not a valid ONNX model" in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_input_names_it_and_lists_the_inputs(conv_model: Path) -> None:
    with pytest.raises(ConfigError, match=r"has no input 'image' \(inputs: x\)"):
        load_model_bytes(conv_model, {"image": (2, 3)})


def test_axis_out_of_range(conv_model: Path) -> None:
    with pytest.raises(ConfigError, match="input 'x' has 4 dims, no axis 4"):
        load_model_bytes(conv_model, {"x": (4,)})
