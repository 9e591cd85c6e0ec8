"""Making a model exported with a fixed batch of 1 accept any batch, when the graph provably allows it.

Exporters often write batch 1 into the input and into `Reshape` targets (YuNet's heads reshape to
`[1, -1, C]`). Making dim 0 of the input symbolic is then not enough: such a Reshape would fold the
frames of a batch into one. `make_batch_dynamic` follows the batch dimension through the graph, node
by node, with rules that hold for every input size:

- per-sample operators (convolutions, pooling, element-wise arithmetic, ...) keep dim 0 the batch;
- operators with an axis (Concat, Softmax, Transpose, Slice, ...) keep it only when that axis is not 0;
- `Reshape` to a constant `[1, ...]` becomes `[0, ...]` ("copy dim 0"): for a batch of one the result
  is the same, and for a batch of N each frame is reshaped on its own;
- shape arithmetic (`Shape -> Slice/Gather -> Concat -> Resize/Reshape`) is followed as long as the
  batch size only ever travels as the first element of a shape;
- anything else that touches the batch (an unknown operator, a reduction over axis 0, `Reshape` to
  `[-1, C]`, a shape computed with the batch size) stops the rewrite, and the model keeps its fixed
  batch of 1: the caller then runs frame by frame.

The model is changed only when every rule holds and every graph output carries the batch.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from framewire.engines.batch_facts import BATCH_DIM, Refused
from framewire.engines.batch_rules import Analysis

if TYPE_CHECKING:
    import onnx

__all__ = ["BATCH_DIM", "BatchRewrite", "make_batch_dynamic", "with_batch_axis"]


@dataclass(frozen=True)
class BatchRewrite:
    """What `make_batch_dynamic` did: `ok` when the model now takes any batch; `reason` says why not."""

    ok: bool
    reason: str = ""
    patched: tuple[str, ...] = ()
    """Reshape nodes whose constant target `[1, ...]` became `[0, ...]`."""


def make_batch_dynamic(model: onnx.ModelProto, inputs: Collection[str]) -> BatchRewrite:
    """Make dim 0 of `inputs` and of every output symbolic (`batch`) when the graph keeps frames apart.

    Changes `model` in place only on success. A model whose inputs already have a symbolic dim 0 is
    left as it is (its exporter declared the batch dynamic).
    """
    graph = model.graph
    by_name = {value.name: value for value in graph.input}
    dims0: dict[str, Any] = {}
    for name in inputs:
        value = by_name.get(name)
        if value is None:
            return BatchRewrite(False, f"the model has no input {name!r}")
        shape = value.type.tensor_type.shape
        if not value.type.tensor_type.HasField("shape") or not shape.dim:
            return BatchRewrite(False, f"input {name!r} has no known rank")
        dims0[name] = shape.dim[0]
    if all(d.HasField("dim_param") or not d.HasField("dim_value") for d in dims0.values()):
        return BatchRewrite(True, "the batch dimension is already dynamic")
    if any(d.HasField("dim_value") and d.dim_value != 1 for d in dims0.values()):
        fixed = {n: d.dim_value for n, d in dims0.items() if d.HasField("dim_value")}
        return BatchRewrite(False, f"inputs have a fixed batch other than 1: {fixed}")
    try:
        patches = Analysis(model, set(inputs)).run()
    except Refused as exc:
        return BatchRewrite(False, str(exc))
    _apply(model, set(inputs), patches)
    nodes = model.graph.node
    return BatchRewrite(True, "", tuple(nodes[i].name or f"{nodes[i].op_type} #{i}" for i in patches))


def _apply(model: onnx.ModelProto, inputs: set[str], patches: Mapping[int, np.ndarray]) -> None:
    from onnx import numpy_helper

    graph = model.graph
    for value in graph.input:
        if value.name in inputs:
            value.type.tensor_type.shape.dim[0].dim_param = BATCH_DIM
    for output in graph.output:
        tensor_type = output.type.tensor_type
        if tensor_type.HasField("shape") and tensor_type.shape.dim:
            tensor_type.shape.dim[0].dim_param = BATCH_DIM
    taken = {init.name for init in graph.initializer}
    replaced: set[str] = set()
    for index, target in patches.items():
        node = graph.node[index]
        name = f"{node.input[1]}_any_batch"
        while name in taken:
            name += "_"
        taken.add(name)
        # A new initializer, not an edit of the old one: another node may share it.
        graph.initializer.append(numpy_helper.from_array(target, name))
        replaced.add(node.input[1])
        node.input[1] = name
    still_used = {name for node in graph.node for name in node.input}
    for init in [i for i in graph.initializer if i.name in replaced and i.name not in still_used]:
        graph.initializer.remove(init)
    del graph.value_info[:]  # batch 1 is written all over it


def with_batch_axis(
    dynamic_axes: Mapping[str, tuple[int, ...]], input_name: str
) -> dict[str, tuple[int, ...]]:
    """`dynamic_axes` with axis 0 of `input_name` added: ask the loader for a dynamic batch."""
    axes = {name: tuple(values) for name, values in dynamic_axes.items()}
    axes[input_name] = tuple(sorted({0, *axes.get(input_name, ())}))
    return axes
