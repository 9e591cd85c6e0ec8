"""What the batch rewrite (engines.batch_rewrite) knows of each tensor of a graph as it walks it:
whether it depends on the batch and how (`Kind`), its constant value, its rank; and what each
operator it knows does with dim 0.

The operator rules that decide each node's kind are engines.batch_rules; a rule that cannot prove
the frames of a batch stay apart raises `Refused`, and the model keeps its fixed batch.
"""

from __future__ import annotations

import logging
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)

BATCH_DIM = "batch"
"""The symbolic name given to dim 0 of the inputs and outputs of a rewritten model."""


class Kind(Enum):
    CONST = "const"  # does not depend on the batch at all (weights, shapes of per-sample dims)
    BATCH = "batch"  # data whose dim 0 is the batch, frames kept apart
    SHAPE = "shape"  # a 1-D shape tensor whose first element is the batch size
    SCALAR = "scalar"  # the batch size itself (a scalar)


class Refused(Exception):
    """A rule could not prove that the frames of a batch stay apart: the reason, in words."""


# Operators that work on each sample alone, whatever their inputs' shapes (inputs 1.. are weights).
SPATIAL = frozenset(
    {
        "Conv",
        "ConvTranspose",
        "ConvInteger",
        "QLinearConv",
        "AveragePool",
        "LpPool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "GlobalLpPool",
        "BatchNormalization",
        "InstanceNormalization",
        "LRN",
        "DepthToSpace",
        "SpaceToDepth",
        "MaxPool",
    }
)
# Element-wise operators: per sample as long as a constant operand does not broadcast along dim 0.
ELEMENTWISE = frozenset(
    {
        "Relu",
        "Sigmoid",
        "Tanh",
        "LeakyRelu",
        "PRelu",
        "Elu",
        "Selu",
        "Celu",
        "HardSigmoid",
        "HardSwish",
        "Softplus",
        "Softsign",
        "Mish",
        "Gelu",
        "Clip",
        "Exp",
        "Log",
        "Sqrt",
        "Reciprocal",
        "Neg",
        "Abs",
        "Erf",
        "Floor",
        "Ceil",
        "Round",
        "Sign",
        "Not",
        "Cast",
        "Identity",
        "Dropout",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Max",
        "Min",
        "Sum",
        "Mean",
        "Where",
        "Equal",
        "Less",
        "Greater",
        "LessOrEqual",
        "GreaterOrEqual",
        "And",
        "Or",
        "Xor",
        "IsNaN",
        "IsInf",
        "ThresholdedRelu",
        "Sin",
        "Cos",
        "Tan",
        "Atan",
        "Sinh",
        "Cosh",
        "Asin",
        "Acos",
    }
)
# Operators with one `axis` attribute that must not be 0 (default given when the attribute is absent).
AXIS_ATTR: dict[str, int] = {
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
REDUCE = frozenset(
    {
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    }
)


class BatchFacts:
    """The kind, value and rank of every tensor known so far, from the inputs forwards."""

    def __init__(self, model: onnx.ModelProto, inputs: set[str]) -> None:
        from onnx import numpy_helper

        self.model = model
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        graph = model.graph
        self.values: dict[str, np.ndarray] = {
            init.name: numpy_helper.to_array(init) for init in graph.initializer
        }
        self.kinds: dict[str, Kind] = {name: Kind.CONST for name in self.values}
        for value in graph.input:
            if value.name not in self.values:
                self.kinds[value.name] = Kind.BATCH if value.name in inputs else Kind.CONST
        self.ranks = self._ranks(inputs)

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

    def _kind(self, name: str) -> Kind:
        kind = self.kinds.get(name)
        if kind is None:
            raise Refused(f"tensor {name!r} is used before it is computed")
        return kind

    def _set(self, node: Any, kind: Kind) -> None:
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
        self._set(node, Kind.CONST)

    def _const_value(self, name: str, what: str, label: str) -> np.ndarray:
        if name not in self.values:
            raise Refused(f"{label}: {what} is not a constant")
        return self.values[name]

    def _rank(self, name: str, label: str) -> int:
        rank = self.ranks.get(name)
        if rank is None:
            raise Refused(f"{label}: the rank of {name!r} is unknown")
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
