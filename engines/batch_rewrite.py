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

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)

BATCH_DIM = "batch"
"""The symbolic name given to dim 0 of the inputs and outputs of a rewritten model."""


class _Kind(Enum):
    CONST = "const"  # does not depend on the batch at all (weights, shapes of per-sample dims)
    BATCH = "batch"  # data whose dim 0 is the batch, frames kept apart
    SHAPE = "shape"  # a 1-D shape tensor whose first element is the batch size
    SCALAR = "scalar"  # the batch size itself (a scalar)


@dataclass(frozen=True)
class BatchRewrite:
    """What `make_batch_dynamic` did: `ok` when the model now takes any batch; `reason` says why not."""

    ok: bool
    reason: str = ""
    patched: tuple[str, ...] = ()
    """Reshape nodes whose constant target `[1, ...]` became `[0, ...]`."""


class _Refused(Exception):
    pass


# Operators that work on each sample alone, whatever their inputs' shapes (inputs 1.. are weights).
_SPATIAL = frozenset(
    {
        "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "AveragePool", "LpPool",
        "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "BatchNormalization",
        "InstanceNormalization", "LRN", "DepthToSpace", "SpaceToDepth", "MaxPool",
    }
)  # fmt: skip
# Element-wise operators: per sample as long as a constant operand does not broadcast along dim 0.
_ELEMENTWISE = frozenset(
    {
        "Relu", "Sigmoid", "Tanh", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "HardSigmoid",
        "HardSwish", "Softplus", "Softsign", "Mish", "Gelu", "Clip", "Exp", "Log", "Sqrt",
        "Reciprocal", "Neg", "Abs", "Erf", "Floor", "Ceil", "Round", "Sign", "Not", "Cast", "Identity",
        "Dropout", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal",
        "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "IsNaN", "IsInf",
        "ThresholdedRelu", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asin", "Acos",
    }
)  # fmt: skip
# Operators with one `axis` attribute that must not be 0 (default given when the attribute is absent).
_AXIS_ATTR: dict[str, int] = {
    "Softmax": 1,  # opset < 13 default; 13+ is -1: looked up by opset below
    "LogSoftmax": 1,
    "Hardmax": 1,
    "Concat": 0,
    "Split": 0,
    "Flatten": 1,
    "LpNormalization": -1,
    "LayerNormalization": -1,
    "ArgMax": 0,
    "ArgMin": 0,
}
_REDUCE = frozenset(
    {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
     "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}
)  # fmt: skip


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
        patches = _Analysis(model, set(inputs)).run()
    except _Refused as exc:
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


class _Analysis:
    """Follows the batch dimension from the inputs to the outputs; raises _Refused at the first doubt."""

    def __init__(self, model: onnx.ModelProto, inputs: set[str]) -> None:
        from onnx import numpy_helper

        self.model = model
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        graph = model.graph
        self.values: dict[str, np.ndarray] = {
            init.name: numpy_helper.to_array(init) for init in graph.initializer
        }
        self.kinds: dict[str, _Kind] = {name: _Kind.CONST for name in self.values}
        for value in graph.input:
            if value.name not in self.values:
                self.kinds[value.name] = _Kind.BATCH if value.name in inputs else _Kind.CONST
        self.ranks = self._ranks(inputs)
        self.patches: dict[int, np.ndarray] = {}

    def run(self) -> dict[int, np.ndarray]:
        used = {name for node in self.model.graph.node for name in node.input}
        for index, node in enumerate(self.model.graph.node):
            if node.domain not in ("", "ai.onnx"):
                if any(self._kind(i) is not _Kind.CONST for i in node.input if i):
                    raise _Refused(
                        f"operator {node.domain}.{node.op_type} ({self._label(node, index)}) is not known"
                    )
                self._set(node, _Kind.CONST)
                continue
            if node.op_type == "Constant":
                self._constant(node)
                continue
            kind = self._node(node, index, used)
            self._set(node, kind)
        for output in self.model.graph.output:
            if self._kind(output.name) is not _Kind.BATCH:
                raise _Refused(f"output {output.name!r} does not carry the batch")
        return self.patches

    # --- helpers -----------------------------------------------------------------------------

    def _ranks(self, inputs: set[str]) -> dict[str, int]:
        import onnx
        from onnx import shape_inference

        probe = onnx.ModelProto()
        probe.CopyFrom(self.model)
        for value in probe.graph.input:
            if value.name in inputs:
                value.type.tensor_type.shape.dim[0].dim_param = BATCH_DIM
        del probe.graph.value_info[:]
        ranks: dict[str, int] = {name: array.ndim for name, array in self.values.items()}
        try:
            inferred = shape_inference.infer_shapes(probe)
        except Exception as exc:  # noqa: BLE001 - custom ops: ranks stay unknown, rules needing them refuse
            log.debug("shape inference failed: %s", exc)
            inferred = probe
        for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
            tensor_type = value.type.tensor_type
            if tensor_type.HasField("shape"):
                ranks[value.name] = len(tensor_type.shape.dim)
        return ranks

    def _kind(self, name: str) -> _Kind:
        kind = self.kinds.get(name)
        if kind is None:
            raise _Refused(f"tensor {name!r} is used before it is computed")
        return kind

    def _set(self, node: Any, kind: _Kind) -> None:
        for name in node.output:
            if name:
                self.kinds[name] = kind

    def _constant(self, node: Any) -> None:
        from onnx import helper, numpy_helper

        for attr in node.attribute:
            if attr.name == "value":
                self.values[node.output[0]] = numpy_helper.to_array(attr.t)
            elif attr.name in ("value_int", "value_float", "value_ints", "value_floats"):
                self.values[node.output[0]] = np.asarray(helper.get_attribute_value(attr))
        if node.output[0] in self.values:
            self.ranks[node.output[0]] = self.values[node.output[0]].ndim
        self._set(node, _Kind.CONST)

    def _const_value(self, name: str, what: str, label: str) -> np.ndarray:
        if name not in self.values:
            raise _Refused(f"{label}: {what} is not a constant")
        return self.values[name]

    def _rank(self, name: str, label: str) -> int:
        rank = self.ranks.get(name)
        if rank is None:
            raise _Refused(f"{label}: the rank of {name!r} is unknown")
        return rank

    def _axis(self, axis: int, name: str, label: str) -> int:
        return axis if axis >= 0 else axis + self._rank(name, label)

    @staticmethod
    def _label(node: Any, index: int) -> str:
        return f"{node.op_type} {node.name}" if node.name else f"{node.op_type} #{index}"

    @staticmethod
    def _attr(node: Any, name: str, default: Any = None) -> Any:
        from onnx import helper

        for attr in node.attribute:
            if attr.name == name:
                return helper.get_attribute_value(attr)
        return default

    # --- the rules ---------------------------------------------------------------------------

    def _node(self, node: Any, index: int, used: set[str]) -> _Kind:
        label = self._label(node, index)
        op = node.op_type
        kinds = [self._kind(name) if name else None for name in node.input]
        present = [k for k in kinds if k is not None]
        if all(k is _Kind.CONST for k in present):
            return _Kind.CONST
        if op == "Shape":
            start = int(self._attr(node, "start", 0))
            if kinds[0] is not _Kind.BATCH:
                return _Kind.CONST  # the length of a shape vector does not depend on the batch
            if start == 0:
                return _Kind.SHAPE
            if start > 0:
                return _Kind.CONST
            raise _Refused(f"{label}: negative start")
        if any(k in (_Kind.SHAPE, _Kind.SCALAR) for k in present):
            return self._shape_arithmetic(node, label, kinds)
        return self._data_node(node, index, used, label, kinds)

    def _data_node(self, node: Any, index: int, used: set[str], label: str, kinds: list[_Kind | None]) -> _Kind:
        """A node the batch reaches as data (its first dimension)."""
        op = node.op_type
        present = [k for k in kinds if k is not None]
        if op in _SPATIAL:
            if kinds[0] is not _Kind.BATCH or any(k is not _Kind.CONST for k in present[1:]):
                raise _Refused(f"{label}: weights that depend on the batch")
            if op == "MaxPool" and len(node.output) > 1 and node.output[1] in used:
                raise _Refused(f"{label}: MaxPool indices count across the batch")
            return _Kind.BATCH
        if op in _ELEMENTWISE:
            self._check_broadcast(node, label, kinds)
            return _Kind.BATCH
        if op in _AXIS_ATTR:
            return self._axis_op(node, label, kinds)
        if op in _REDUCE:
            return self._reduce(node, label, kinds)
        if op == "Reshape":
            return self._reshape(node, index, label, kinds)
        rule = self._DATA_RULES.get(op)
        if rule is None:
            raise _Refused(f"operator {label} may mix the frames of a batch")
        return rule(self, node, label, kinds)

    def _quantize(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        present = [k for k in kinds if k is not None]
        if kinds[0] is not _Kind.BATCH or any(k is not _Kind.CONST for k in present[1:]):
            raise _Refused(f"{label}: quantisation parameters that depend on the batch")
        scale = self.values.get(node.input[1])
        per_axis = scale is None or scale.size > 1
        if per_axis and self._axis(int(self._attr(node, "axis", 1)), node.input[0], label) == 0:
            raise _Refused(f"{label}: quantised per item of the batch")
        return _Kind.BATCH

    def _transpose(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        perm = self._attr(node, "perm")
        if perm is None or perm[0] != 0:
            raise _Refused(f"{label}: moves the batch dimension")
        return _Kind.BATCH

    def _squeeze(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        axes = self._attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = self._const_value(node.input[1], "axes", label).tolist()
        if axes is None:
            raise _Refused(f"{label}: without axes it may drop the batch dimension")
        rank = self._rank(node.output[0] if node.op_type == "Unsqueeze" else node.input[0], label)
        if any((a if a >= 0 else a + rank) == 0 for a in axes):
            raise _Refused(f"{label}: axis 0 is the batch")
        return _Kind.BATCH

    def _gather(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        axis = self._axis(int(self._attr(node, "axis", 0)), node.input[0], label)
        if kinds[0] is not _Kind.BATCH or kinds[1] is not _Kind.CONST or axis == 0:
            raise _Refused(f"{label}: gathers along the batch")
        return _Kind.BATCH

    def _tile(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        repeats = self._const_value(node.input[1], "repeats", label)
        if kinds[0] is not _Kind.BATCH or int(repeats.reshape(-1)[0]) != 1:
            raise _Refused(f"{label}: tiles the batch")
        return _Kind.BATCH

    def _cumsum(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        axis = int(self._const_value(node.input[1], "axis", label).reshape(-1)[0])
        if kinds[0] is not _Kind.BATCH or self._axis(axis, node.input[0], label) == 0:
            raise _Refused(f"{label}: sums along the batch")
        return _Kind.BATCH

    def _gemm(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        if kinds[0] is not _Kind.BATCH or int(self._attr(node, "transA", 0)) != 0:
            raise _Refused(f"{label}: the batch is not the rows of A")
        if any(k is not _Kind.CONST for k in kinds[1:] if k is not None):
            raise _Refused(f"{label}: B or C depends on the batch")
        return _Kind.BATCH

    _DATA_RULES: dict[str, Callable[[Any, Any, str, list[_Kind | None]], _Kind]] = {
        "QuantizeLinear": _quantize,
        "DequantizeLinear": _quantize,
        "Transpose": _transpose,
        "Squeeze": _squeeze,
        "Unsqueeze": _squeeze,
        "Slice": lambda self, node, label, kinds: self._slice_data(node, label, kinds),
        "Pad": lambda self, node, label, kinds: self._pad(node, label, kinds),
        "Gather": _gather,
        "Tile": _tile,
        "CumSum": _cumsum,
        "Resize": lambda self, node, label, kinds: self._resize(node, label, kinds),
        "Upsample": lambda self, node, label, kinds: self._resize(node, label, kinds),
        "MatMul": lambda self, node, label, kinds: self._matmul(node, label, kinds),
        "Gemm": _gemm,
    }
    """The data operators that keep the frames of a batch apart under conditions, each its check."""

    def _shape_arithmetic(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        """Where the batch size travels inside a shape tensor: only as its first element."""
        op = node.op_type
        first = kinds[0]
        if op in ("Cast", "Identity") and first in (_Kind.SHAPE, _Kind.SCALAR):
            return first
        if op == "Gather" and first is _Kind.SHAPE and kinds[1] is _Kind.CONST:
            indices = self._const_value(node.input[1], "indices", label)
            flat = indices.reshape(-1)
            if (flat < 0).any():
                raise _Refused(f"{label}: negative indices into a shape")
            if (flat >= 1).all():
                return _Kind.CONST
            if indices.ndim == 0:
                return _Kind.SCALAR
            if indices.ndim == 1 and flat[0] == 0 and (flat[1:] >= 1).all():
                return _Kind.SHAPE
            raise _Refused(f"{label}: moves the batch size inside a shape")
        if op == "Slice" and first is _Kind.SHAPE:
            starts = self._const_value(node.input[1], "starts", label).reshape(-1)
            axes = (
                self._const_value(node.input[3], "axes", label).reshape(-1)
                if len(node.input) > 3 and node.input[3]
                else np.zeros(1, dtype=np.int64)
            )
            steps = (
                self._const_value(node.input[4], "steps", label).reshape(-1)
                if len(node.input) > 4 and node.input[4]
                else np.ones(1, dtype=np.int64)
            )
            if starts.size != 1 or axes.tolist() != [0] or steps.tolist() != [1] or starts[0] < 0:
                raise _Refused(f"{label}: an unusual slice of a shape")
            return _Kind.SHAPE if starts[0] == 0 else _Kind.CONST
        if op == "Concat" and first is _Kind.SHAPE and all(k is _Kind.CONST for k in kinds[1:]):
            return _Kind.SHAPE
        if op == "Unsqueeze" and first is _Kind.SCALAR:
            return _Kind.SHAPE
        if op == "Reshape" and first is _Kind.BATCH and kinds[1] is _Kind.SHAPE:
            return _Kind.BATCH
        if op in ("Resize", "Upsample") and first is _Kind.BATCH:
            return self._resize(node, label, kinds)
        if op == "Expand" and first is _Kind.CONST and kinds[1] is _Kind.SHAPE:
            return _Kind.BATCH
        if op == "ConstantOfShape" and first is _Kind.SHAPE:
            return _Kind.BATCH
        raise _Refused(f"{label}: computes with the batch size")

    def _check_broadcast(self, node: Any, label: str, kinds: list[_Kind | None]) -> None:
        out_rank = self.ranks.get(node.output[0])
        for name, kind in zip(node.input, kinds):
            if kind is None or kind is _Kind.BATCH:
                continue
            if kind is not _Kind.CONST:
                raise _Refused(f"{label}: an operand depends on the batch size")
            rank = self.ranks.get(name)
            if rank is None or out_rank is None:
                raise _Refused(f"{label}: cannot tell how operand {name!r} broadcasts")
            if rank < out_rank:
                continue
            value = self.values.get(name)
            if value is None or value.shape[0] != 1:
                raise _Refused(f"{label}: operand {name!r} may have its own batch dimension")

    def _axis_op(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        op = node.op_type
        default = _AXIS_ATTR[op]
        if op in ("Softmax", "LogSoftmax", "Hardmax") and self.opset >= 13:
            default = -1
        axis = self._axis(int(self._attr(node, "axis", default)), node.input[0], label)
        if axis == 0:
            raise _Refused(f"{label}: works along axis 0, the batch")
        if op == "Concat" and any(k is not _Kind.BATCH for k in kinds if k is not None):
            raise _Refused(f"{label}: joins frames with a constant")
        if op != "Concat" and (kinds[0] is not _Kind.BATCH or any(k is _Kind.BATCH for k in kinds[1:])):
            raise _Refused(f"{label}: parameters that depend on the batch")
        if op == "Split" and any(k is not _Kind.CONST for k in kinds[1:] if k is not None):
            raise _Refused(f"{label}: split sizes that depend on the batch")
        return _Kind.BATCH

    def _reduce(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        axes = self._attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = self._const_value(node.input[1], "axes", label).tolist()
        if not axes:
            raise _Refused(f"{label}: reduces over every axis, the batch too")
        rank = self._rank(node.input[0], label)
        if any((a if a >= 0 else a + rank) == 0 for a in axes):
            raise _Refused(f"{label}: reduces over the batch")
        return _Kind.BATCH

    def _slice_data(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        if any(k is not _Kind.CONST for k in kinds[1:] if k is not None):
            raise _Refused(f"{label}: slice bounds that depend on the batch")
        if self.opset < 10:
            axes = self._attr(node, "axes")
        else:
            axes = (
                self._const_value(node.input[3], "axes", label).tolist()
                if len(node.input) > 3 and node.input[3]
                else None
            )
        if axes is None:
            raise _Refused(f"{label}: slices from axis 0, the batch")
        rank = self._rank(node.input[0], label)
        if any((a if a >= 0 else a + rank) == 0 for a in axes):
            raise _Refused(f"{label}: slices the batch")
        return _Kind.BATCH

    def _pad(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        if any(k is not _Kind.CONST for k in kinds[1:] if k is not None):
            raise _Refused(f"{label}: padding that depends on the batch")
        pads = self._attr(node, "pads")
        if pads is None:
            pads = self._const_value(node.input[1], "pads", label).tolist()
        axes = None
        if len(node.input) > 3 and node.input[3]:
            axes = self._const_value(node.input[3], "axes", label).tolist()
        rank = self._rank(node.input[0], label)
        axes = [a if a >= 0 else a + rank for a in axes] if axes is not None else list(range(rank))
        half = len(pads) // 2
        for position, axis in enumerate(axes):
            if axis == 0 and (pads[position] != 0 or pads[position + half] != 0):
                raise _Refused(f"{label}: pads the batch")
        return _Kind.BATCH

    def _reshape(self, node: Any, index: int, label: str, kinds: list[_Kind | None]) -> _Kind:
        if kinds[0] is not _Kind.BATCH:
            raise _Refused(f"{label}: reshapes the batch size into data")
        if kinds[1] is _Kind.SHAPE:
            return _Kind.BATCH
        target = self._const_value(node.input[1], "the target shape", label).astype(np.int64)
        if int(self._attr(node, "allowzero", 0)) != 0:
            raise _Refused(f"{label}: allowzero")
        if target.ndim != 1 or target.size == 0:
            raise _Refused(f"{label}: reshapes to a scalar")
        if target[0] == 0:
            return _Kind.BATCH
        if target[0] == 1:
            patched = target.copy()
            patched[0] = 0  # copy dim 0 of the input: the batch
            self.patches[index] = patched
            return _Kind.BATCH
        raise _Refused(f"{label}: reshapes to {target.tolist()}, folding the batch into other dims")

    def _resize(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        if kinds[0] is not _Kind.BATCH:
            raise _Refused(f"{label}: resizes by the batch")
        if node.op_type == "Upsample" or self.opset < 11:
            scales_name = node.input[1] if len(node.input) > 1 else ""
            sizes_name = ""
        else:
            scales_name = node.input[2] if len(node.input) > 2 else ""
            sizes_name = node.input[3] if len(node.input) > 3 else ""
        if sizes_name:
            if kinds[3] is _Kind.SHAPE:
                return _Kind.BATCH
            raise _Refused(f"{label}: output sizes that fix the batch")
        if scales_name:
            scales = self._const_value(scales_name, "scales", label).reshape(-1)
            if scales.size and float(scales[0]) == 1.0:
                return _Kind.BATCH
            if not scales.size:
                raise _Refused(f"{label}: neither scales nor sizes")
        raise _Refused(f"{label}: scales the batch")

    def _matmul(self, node: Any, label: str, kinds: list[_Kind | None]) -> _Kind:
        a, b = kinds[0], kinds[1]
        rank_a = self._rank(node.input[0], label)
        if a is _Kind.BATCH and b is _Kind.CONST and rank_a >= 2 and self._rank(node.input[1], label) <= 2:
            return _Kind.BATCH
        if a is _Kind.BATCH and b is _Kind.BATCH and rank_a >= 3 and self._rank(node.input[1], label) >= 3:
            return _Kind.BATCH
        raise _Refused(f"{label}: a product across the batch")


def with_batch_axis(
    dynamic_axes: Mapping[str, tuple[int, ...]], input_name: str
) -> dict[str, tuple[int, ...]]:
    """`dynamic_axes` with axis 0 of `input_name` added: ask the loader for a dynamic batch."""
    axes = {name: tuple(values) for name, values in dynamic_axes.items()}
    axes[input_name] = tuple(sorted({0, *axes.get(input_name, ())}))
    return axes
