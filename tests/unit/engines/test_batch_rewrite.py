"""framewire.engines.batch_rewrite: a batch-of-1 export made to take any batch, only where the graph allows it."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from framewire.engines.batch_rewrite import BATCH_DIM, make_batch_dynamic, with_batch_axis
from framewire.engines.onnx_model import describe, load_model_bytes

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
YUNET = ROOT / "assets/models/yunet/face_detection_yunet_2023mar.onnx"
U2NETP = ROOT / "assets/models/u2netp/u2netp.onnx"


def _dim0(value: onnx.ValueInfoProto) -> int | str:
    dim = value.type.tensor_type.shape.dim[0]
    return dim.dim_param if dim.HasField("dim_param") else dim.dim_value


def _session(data: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def _batched_equals_one_by_one(data: bytes, x: np.ndarray) -> None:
    session = _session(data)
    name = session.get_inputs()[0].name
    batched = session.run(None, {name: x})
    for i in range(len(x)):
        single = session.run(None, {name: x[i : i + 1]})
        for b, s in zip(batched, single, strict=True):
            assert b.shape[0] == len(x)
            np.testing.assert_allclose(b[i : i + 1], s, rtol=1e-5, atol=1e-5)


def test_yunet_batch_of_three_equals_three_single_frames() -> None:
    data = load_model_bytes(YUNET, {"input": (0, 2, 3)})
    model = onnx.load_from_string(data)
    assert _dim0(model.graph.input[0]) == BATCH_DIM
    assert all(_dim0(o) == BATCH_DIM for o in model.graph.output)
    x = np.random.default_rng(0).random((3, 3, 64, 96), dtype=np.float32) * 255
    _batched_equals_one_by_one(data, x)


def test_yunet_heads_reshape_to_one_is_patched_to_copy_the_batch() -> None:
    model = onnx.load(str(YUNET))
    result = make_batch_dynamic(model, ["input"])
    assert result.ok, result.reason
    assert len(result.patched) == 12  # one Reshape [1, -1, C] per head output
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Reshape":
            assert inits[node.input[1]][0] == 0


def test_u2netp_shape_arithmetic_keeps_frames_apart() -> None:
    data = load_model_bytes(U2NETP, {"input.1": (0, 2, 3)})
    x = np.random.default_rng(1).standard_normal((2, 3, 64, 64)).astype(np.float32)
    _batched_equals_one_by_one(data, x)


def test_describe_shows_the_symbolic_batch() -> None:
    inputs, outputs = describe(YUNET, {"input": (0, 2, 3)})
    assert inputs[0].shape == (BATCH_DIM, 3, "input_2", "input_3")
    assert {o.shape[0] for o in outputs} == {BATCH_DIM}


def test_without_axis_zero_the_batch_stays_fixed() -> None:
    inputs, _ = describe(YUNET, {"input": (2, 3)})
    assert inputs[0].shape[0] == 1


def _graph(nodes, initializers, out_shape, in_shape=(1, 3, 4, 4)) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(
    ("nodes", "inits", "out_shape", "why"),
    [
        (
            [helper.make_node("Reshape", ["x", "s"], ["y"])],
            [numpy_helper.from_array(np.array([-1, 4], dtype=np.int64), "s")],
            (12, 4),
            "folding the batch",
        ),
        ([helper.make_node("Softmax", ["x"], ["y"], axis=0)], [], (1, 3, 4, 4), "axis 0"),
        (
            [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)],
            [numpy_helper.from_array(np.array([0], dtype=np.int64), "axes")],
            (1, 3, 4, 4),
            "reduces over the batch",
        ),
        (
            [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0, 2, 3])],
            [],
            (3, 1, 4, 4),
            "moves the batch",
        ),
        ([helper.make_node("Einsum", ["x"], ["y"], equation="nchw->nchw")], [], (1, 3, 4, 4), "may mix"),
    ],
)
def test_graphs_that_mix_frames_are_left_alone(nodes, inits, out_shape, why) -> None:  # type: ignore[no-untyped-def]
    model = _graph(nodes, inits, out_shape)
    before = model.SerializeToString()
    result = make_batch_dynamic(model, ["x"])
    assert not result.ok
    assert why in result.reason
    assert model.SerializeToString() == before


def test_refusal_is_logged_and_the_input_keeps_batch_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "softmax0.onnx"
    onnx.save(_graph([helper.make_node("Softmax", ["x"], ["y"], axis=0)], [], (1, 3, 4, 4)), str(path))
    with caplog.at_level(logging.INFO, logger="framewire.engines.onnx_model"):
        inputs, _ = describe(path, {"x": (0, 2)})
    assert inputs[0].shape == (1, 3, "x_2", 4)
    assert "keeps its fixed batch of 1" in caplog.text and "axis 0" in caplog.text


def test_small_conv_model_reshape_is_patched(conv_model: Path) -> None:
    data = load_model_bytes(conv_model, {"x": (0,)})
    x = np.random.default_rng(2).random((4, 3, 8, 8), dtype=np.float32)
    _batched_equals_one_by_one(data, x)


def test_an_already_dynamic_batch_is_left_as_it_is() -> None:
    model = _graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=0)], [], ("n", 3, 4, 4), in_shape=("n", 3, 4, 4)
    )
    result = make_batch_dynamic(model, ["x"])
    assert result.ok and "already dynamic" in result.reason


def test_with_batch_axis_adds_axis_zero() -> None:
    assert with_batch_axis({"input": (2, 3)}, "input") == {"input": (0, 2, 3)}
    assert with_batch_axis({}, "input") == {"input": (0,)}
    assert with_batch_axis({"input": (0, 2)}, "input") == {"input": (0, 2)}
