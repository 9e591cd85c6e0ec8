"""framewire.engines.mixed_precision: layers of a Q/DQ model put back in fp32, their sensitivity, and the
search for the fewest that pass a check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from framewire.engines import mixed_precision as mp
from framewire.engines.quantize import QuantizeOptions, quantize_model
from framewire.pipeline.errors import EngineError

pytestmark = pytest.mark.timeout(60)


def _two_branches(path: Path) -> Path:
    """a [1,4,8,8] -> Conv_a -> ya; b [1,4,8,8] -> Conv_b -> yb (1x1 convolutions)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["a", "wa", "ba"], ["ya"], name="Conv_a"),
        helper.make_node("Conv", ["b", "wb", "bb"], ["yb"], name="Conv_b"),
    ]
    graph = helper.make_graph(
        nodes,
        "branches",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 8, 8]) for n in ("a", "b")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 8, 8]) for n in ("ya", "yb")],
        initializer=[
            numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "wa"),
            numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "wb"),
            numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "ba"),
            numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bb"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _feed(seed: int, outlier: float = 0.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.random((1, 4, 8, 8), dtype=np.float32)
    a[0, 0, 0, 0] += outlier
    return {"a": a, "b": rng.random((1, 4, 8, 8), dtype=np.float32)}


@pytest.fixture
def models(tmp_path: Path) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(fp32, Q/DQ) where branch a was calibrated on an outlier of 500: its int8 steps are ~4 wide
    for inputs in [0, 1], so Conv_a is by far the more sensitive layer."""
    source = _two_branches(tmp_path / "branches.onnx")
    out = tmp_path / "branches-int8.onnx"
    feeds = [_feed(seed, outlier=500.0 if seed == 0 else 0.0) for seed in range(6)]
    quantize_model(source, out, feeds, options=QuantizeOptions(recipe="tensorrt", min_channels=0))
    return onnx.load(str(source)), onnx.load(str(out))


def test_quantised_layers_are_the_weighted_nodes_behind_dequantize(models) -> None:  # type: ignore[no-untyped-def]
    fp32, qdq = models
    assert mp.quantised_layers(qdq) == ["Conv_a", "Conv_b"]
    assert mp.quantised_layers(fp32) == []


def test_keep_float_rewires_a_layer_to_its_fp32_inputs_and_drops_its_qdq(models) -> None:  # type: ignore[no-untyped-def]
    fp32, qdq = models
    mixed = mp.keep_float(qdq, fp32, ["Conv_a"])
    conv_a = next(n for n in mixed.graph.node if n.name == "Conv_a")
    assert list(conv_a.input) == ["a", "wa", "ba"]
    assert mp.quantised_layers(mixed) == ["Conv_b"]
    read = {name for node in mixed.graph.node for name in node.input}
    assert not any(node.op_type in ("QuantizeLinear", "DequantizeLinear") and node.input[0] == "a" for node in mixed.graph.node)
    assert all(init.name in read for init in mixed.graph.initializer)  # nothing left unread
    assert mp.quantised_layers(qdq) == ["Conv_a", "Conv_b"]  # the input model is untouched
    feeds = [_feed(7)]
    (reference,) = mp.run_model(fp32, feeds)
    (out,) = mp.run_model(mixed, feeds)
    np.testing.assert_allclose(out["ya"], reference["ya"], rtol=1e-5, atol=1e-5)
    assert not np.allclose(out["yb"], reference["yb"], rtol=1e-6, atol=1e-6)  # still int8


def test_keep_float_brings_back_a_bias_the_cpu_recipe_quantised(tmp_path: Path) -> None:
    """The `cpu` recipe quantises biases, and its DequantizeLinear's output keeps the bias's name:
    the fp32 bias comes back under another name, not as a second definition of that name."""
    source = _two_branches(tmp_path / "branches.onnx")
    out = tmp_path / "cpu-int8.onnx"
    quantize_model(source, out, [_feed(seed) for seed in range(4)], options=QuantizeOptions(min_channels=0))
    fp32, qdq = onnx.load(str(source)), onnx.load(str(out))
    assert "ba" in {o for n in qdq.graph.node for o in n.output}
    mixed = mp.keep_float(qdq, fp32, ["Conv_a"])
    conv_a = next(n for n in mixed.graph.node if n.name == "Conv_a")
    assert list(conv_a.input) == ["a", "wa", "ba_fp32"]
    feeds = [_feed(7)]
    (reference,) = mp.run_model(fp32, feeds)
    (before,) = mp.run_model(qdq, feeds)
    (after,) = mp.run_model(mixed, feeds)
    assert np.abs(after["ya"] - reference["ya"]).max() < np.abs(before["ya"] - reference["ya"]).max()


def test_every_layer_in_fp32_is_the_fp32_model(models) -> None:  # type: ignore[no-untyped-def]
    fp32, qdq = models
    mixed = mp.keep_float(qdq, fp32, mp.quantised_layers(qdq))
    assert {n.op_type for n in mixed.graph.node} == {"Conv"}
    feeds = [_feed(seed) for seed in range(3)]
    assert mp.output_error(mp.run_model(fp32, feeds), mp.run_model(mixed, feeds)) < 1e-10


def test_keep_float_names_an_unknown_layer(models) -> None:  # type: ignore[no-untyped-def]
    fp32, qdq = models
    with pytest.raises(EngineError, match="keep fp32: the quantised model has no node.*'Conv_z'"):
        mp.keep_float(qdq, fp32, ["Conv_a", "Conv_z"])


def test_sensitivity_ranks_the_badly_calibrated_layer_first(models) -> None:  # type: ignore[no-untyped-def]
    fp32, qdq = models
    seen: list[tuple[int, int]] = []
    scores = mp.sensitivity(qdq, fp32, [_feed(seed) for seed in range(10, 14)], progress=lambda d, t: seen.append((d, t)))
    assert set(scores) == {"Conv_a", "Conv_b"}
    assert scores["Conv_a"] > 100 * scores["Conv_b"] > 0
    assert seen == [(1, 2), (2, 2)]


def test_output_error_is_relative_squared_error() -> None:
    ref = [{"y": np.array([3.0, 4.0])}]
    assert mp.output_error(ref, ref) == 0.0
    assert mp.output_error(ref, [{"y": np.array([3.0, 9.0])}]) == pytest.approx(25 / 25)
    with pytest.raises(ValueError, match="1 test frames against 2"):
        mp.output_error(ref * 2, ref)


@pytest.mark.parametrize("needed", [0, 1, 2, 3, 5, 9, 16, 17])
def test_fewest_float_finds_the_shortest_passing_prefix(needed: int) -> None:
    order = [f"L{i}" for i in range(17)]
    search = mp.fewest_float(order, lambda names: len(names) >= needed, prune=False)
    assert search.kept == order[:needed]
    assert len(search.trials) <= 2 * 5 + 2  # doubling then bisection, not one trial per layer
    assert (needed, True) in search.trials


def test_fewest_float_prunes_the_layers_the_check_does_not_need() -> None:
    """Only L3 and L7 matter: the prefix search stops at 8 layers, pruning keeps those two."""
    order = [f"L{i}" for i in range(12)]
    search = mp.fewest_float(order, lambda names: {"L3", "L7"} <= set(names))
    assert search.kept == ["L3", "L7"]
    assert search.trials[:5] == [(0, False), (1, False), (2, False), (4, False), (8, True)]
    assert len(search.trials) == 5 + 2 + 8  # then 6 and 7 (fail), then one trial per layer of the 8


def test_fewest_float_says_when_nothing_passes() -> None:
    search = mp.fewest_float(["L0", "L1", "L2"], lambda names: False)
    assert search.kept is None
    assert search.trials[-1] == (3, False)
