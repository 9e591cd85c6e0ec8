"""Engine test helpers: a small ONNX model built in place."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.unit.engines.gpu_fakes import fake_cuda, fake_trt, fake_trt11  # noqa: F401 - fixtures of the GPU fakes

CONV_WEIGHTS = np.arange(6, dtype=np.float32).reshape(2, 3, 1, 1) / 10.0


@pytest.fixture
def conv_model(tmp_path: Path) -> Path:
    """A tiny model file: x [1,3,8,8] -> 1x1 conv -> y [1,2,8,8] -> transpose, reshape -> z [1,64,2]."""
    return _build_conv_model(tmp_path / "conv.onnx")


def _build_conv_model(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Conv", ["x", "w"], ["y"]),
        helper.make_node("Transpose", ["y"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["t", "shape"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 64, 2]),
        ],
        initializer=[
            numpy_helper.from_array(CONV_WEIGHTS, "w"),
            numpy_helper.from_array(np.array([1, -1, 2], dtype=np.int64), "shape"),
        ],
        value_info=[helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 8, 8, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def conv_weights() -> np.ndarray:
    """The 1x1 conv weights of `conv_model`, [2, 3, 1, 1]."""
    return CONV_WEIGHTS.copy()
