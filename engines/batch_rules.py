"""The operator rules of the batch rewrite (engines.batch_rewrite): for each node the batch reaches,
whether its outputs still keep the frames of a batch apart, and what kind of tensor they are.

Per-sample operators keep dim 0 the batch; operators with an axis keep it when that axis is not 0;
shape arithmetic is followed while the batch size travels only as the first element of a shape;
`Reshape` to a constant `[1, ...]` is patched to `[0, ...]`. Anything else refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from framewire.engines.batch_facts import AXIS_ATTR, ELEMENTWISE, REDUCE, SPATIAL, BatchFacts, Kind, Refused

if TYPE_CHECKING:
    import onnx


class Analysis(BatchFacts):
    """Follows the batch dimension from the inputs to the outputs; raises Refused at the first doubt."""

    def __init__(self, model: onnx.ModelProto, inputs: set[str]) -> None:
        super().__init__(model, inputs)
        self.patches: dict[int, np.ndarray] = {}

    def run(self) -> dict[int, np.ndarray]:
        used = {name for node in self.model.graph.node for name in node.input}
        for index, node in enumerate(self.model.graph.node):
            if node.domain not in ("", "ai.onnx"):
                if any(self._kind(i) is not Kind.CONST for i in node.input if i):
                    raise Refused(
                        f"operator {node.domain}.{node.op_type} ({self._label(node, index)}) is not known"
                    )
                self._set(node, Kind.CONST)
                continue
            if node.op_type == "Constant":
                self._constant(node)
                continue
            kind = self._node(node, index, used)
            self._set(node, kind)
        for output in self.model.graph.output:
            if self._kind(output.name) is not Kind.BATCH:
                raise Refused(f"output {output.name!r} does not carry the batch")
        return self.patches

    # --- the rules ---------------------------------------------------------------------------

    def _node(self, node: Any, index: int, used: set[str]) -> Kind:
        label = self._label(node, index)
        op = node.op_type
        kinds = [self._kind(name) if name else None for name in node.input]
        present = [k for k in kinds if k is not None]
        if all(k is Kind.CONST for k in present):
            return Kind.CONST
        if op == "Shape":
            start = int(self._attr(node, "start", 0))
            if kinds[0] is not Kind.BATCH:
                return Kind.CONST  # the length of a shape vector does not depend on the batch
            if start == 0:
                return Kind.SHAPE
            if start > 0:
                return Kind.CONST
            raise Refused(f"{label}: negative start")
        if any(k in (Kind.SHAPE, Kind.SCALAR) for k in present):
            return self._shape_arithmetic(node, label, kinds)
        return self._data_node(node, index, used, label, kinds)

    def _data_node(self, node: Any, index: int, used: set[str], label: str, kinds: list[Kind | None]) -> Kind:
        """A node the batch reaches as data (its first dimension)."""
        op = node.op_type
        present = [k for k in kinds if k is not None]
        if op in SPATIAL:
            if kinds[0] is not Kind.BATCH or any(k is not Kind.CONST for k in present[1:]):
                raise Refused(f"{label}: weights that depend on the batch")
            if op == "MaxPool" and len(node.output) > 1 and node.output[1] in used:
                raise Refused(f"{label}: MaxPool indices count across the batch")
            return Kind.BATCH
        if op in ELEMENTWISE:
            self._check_broadcast(node, label, kinds)
            return Kind.BATCH
        if op in AXIS_ATTR:
            return self._axis_op(node, label, kinds)
        if op in REDUCE:
            return self._reduce(node, label, kinds)
        if op == "Reshape":
            return self._reshape(node, index, label, kinds)
        rule = self._DATA_RULES.get(op)
        if rule is None:
            raise Refused(f"operator {label} may mix the frames of a batch")
        return rule(self, node, label, kinds)

    def _quantize(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        present = [k for k in kinds if k is not None]
        if kinds[0] is not Kind.BATCH or any(k is not Kind.CONST for k in present[1:]):
            raise Refused(f"{label}: quantisation parameters that depend on the batch")
        scale = self.values.get(node.input[1])
        per_axis = scale is None or scale.size > 1
        if per_axis and self._axis(int(self._attr(node, "axis", 1)), node.input[0], label) == 0:
            raise Refused(f"{label}: quantised per item of the batch")
        return Kind.BATCH

    def _transpose(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        perm = self._attr(node, "perm")
        if perm is None or perm[0] != 0:
            raise Refused(f"{label}: moves the batch dimension")
        return Kind.BATCH

    def _squeeze(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        axes = self._attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = self._const_value(node.input[1], "axes", label).tolist()
        if axes is None:
            raise Refused(f"{label}: without axes it may drop the batch dimension")
        rank = self._rank(node.output[0] if node.op_type == "Unsqueeze" else node.input[0], label)
        if any((a if a >= 0 else a + rank) == 0 for a in axes):
            raise Refused(f"{label}: axis 0 is the batch")
        return Kind.BATCH

    def _gather(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        axis = self._axis(int(self._attr(node, "axis", 0)), node.input[0], label)
        if kinds[0] is not Kind.BATCH or kinds[1] is not Kind.CONST or axis == 0:
            raise Refused(f"{label}: gathers along the batch")
        return Kind.BATCH

    def _tile(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        repeats = self._const_value(node.input[1], "repeats", label)
        if kinds[0] is not Kind.BATCH or int(repeats.reshape(-1)[0]) != 1:
            raise Refused(f"{label}: tiles the batch")
        return Kind.BATCH

    def _cumsum(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        axis = int(self._const_value(node.input[1], "axis", label).reshape(-1)[0])
        if kinds[0] is not Kind.BATCH or self._axis(axis, node.input[0], label) == 0:
            raise Refused(f"{label}: sums along the batch")
        return Kind.BATCH

    def _gemm(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        if kinds[0] is not Kind.BATCH or int(self._attr(node, "transA", 0)) != 0:
            raise Refused(f"{label}: the batch is not the rows of A")
        if any(k is not Kind.CONST for k in kinds[1:] if k is not None):
            raise Refused(f"{label}: B or C depends on the batch")
        return Kind.BATCH

    _DATA_RULES: dict[str, Callable[[Any, Any, str, list[Kind | None]], Kind]] = {
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

    def _shape_arithmetic(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        """Where the batch size travels inside a shape tensor: only as its first element."""
        op = node.op_type
        first = kinds[0]
        if op in ("Cast", "Identity") and first in (Kind.SHAPE, Kind.SCALAR):
            return first
        if op == "Gather" and first is Kind.SHAPE and kinds[1] is Kind.CONST:
            indices = self._const_value(node.input[1], "indices", label)
            flat = indices.reshape(-1)
            if (flat < 0).any():
                raise Refused(f"{label}: negative indices into a shape")
            if (flat >= 1).all():
                return Kind.CONST
            if indices.ndim == 0:
                return Kind.SCALAR
            if indices.ndim == 1 and flat[0] == 0 and (flat[1:] >= 1).all():
                return Kind.SHAPE
            raise Refused(f"{label}: moves the batch size inside a shape")
        if op == "Slice" and first is Kind.SHAPE:
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
                raise Refused(f"{label}: an unusual slice of a shape")
            return Kind.SHAPE if starts[0] == 0 else Kind.CONST
        if op == "Concat" and first is Kind.SHAPE and all(k is Kind.CONST for k in kinds[1:]):
            return Kind.SHAPE
        if op == "Unsqueeze" and first is Kind.SCALAR:
            return Kind.SHAPE
        if op == "Reshape" and first is Kind.BATCH and kinds[1] is Kind.SHAPE:
            return Kind.BATCH
        if op in ("Resize", "Upsample") and first is Kind.BATCH:
            return self._resize(node, label, kinds)
        if op == "Expand" and first is Kind.CONST and kinds[1] is Kind.SHAPE:
            return Kind.BATCH
        if op == "ConstantOfShape" and first is Kind.SHAPE:
            return Kind.BATCH
        raise Refused(f"{label}: computes with the batch size")

    def _check_broadcast(self, node: Any, label: str, kinds: list[Kind | None]) -> None:
        out_rank = self.ranks.get(node.output[0])
        for name, kind in zip(node.input, kinds):
            if kind is None or kind is Kind.BATCH:
                continue
            if kind is not Kind.CONST:
                raise Refused(f"{label}: an operand depends on the batch size")
            rank = self.ranks.get(name)
            if rank is None or out_rank is None:
                raise Refused(f"{label}: cannot tell how operand {name!r} broadcasts")
            if rank < out_rank:
                continue
            value = self.values.get(name)
            if value is None or value.shape[0] != 1:
                raise Refused(f"{label}: operand {name!r} may have its own batch dimension")

    def _axis_op(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        op = node.op_type
        default = AXIS_ATTR[op]
        if op in ("Softmax", "LogSoftmax", "Hardmax") and self.opset >= 13:
            default = -1
        axis = self._axis(int(self._attr(node, "axis", default)), node.input[0], label)
        if axis == 0:
            raise Refused(f"{label}: works along axis 0, the batch")
        if op == "Concat" and any(k is not Kind.BATCH for k in kinds if k is not None):
            raise Refused(f"{label}: joins frames with a constant")
        if op != "Concat" and (kinds[0] is not Kind.BATCH or any(k is Kind.BATCH for k in kinds[1:])):
            raise Refused(f"{label}: parameters that depend on the batch")
        if op == "Split" and any(k is not Kind.CONST for k in kinds[1:] if k is not None):
            raise Refused(f"{label}: split sizes that depend on the batch")
        return Kind.BATCH

    def _reduce(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        axes = self._attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = self._const_value(node.input[1], "axes", label).tolist()
        if not axes:
            raise Refused(f"{label}: reduces over every axis, the batch too")
        rank = self._rank(node.input[0], label)
        if any((a if a >= 0 else a + rank) == 0 for a in axes):
            raise Refused(f"{label}: reduces over the batch")
        return Kind.BATCH

    def _slice_data(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        if any(k is not Kind.CONST for k in kinds[1:] if k is not None):
            raise Refused(f"{label}: slice bounds that depend on the batch")
        if self.opset < 10:
            axes = self._attr(node, "axes")
        else:
            axes = (
                self._const_value(node.input[3], "axes", label).tolist()
                if len(node.input) > 3 and node.input[3]
                else None
            )
        if axes is None:
            raise Refused(f"{label}: slices from axis 0, the batch")
        rank = self._rank(node.input[0], label)
        if any((a if a >= 0 else a + rank) == 0 for a in axes):
            raise Refused(f"{label}: slices the batch")
        return Kind.BATCH

    def _pad(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        if any(k is not Kind.CONST for k in kinds[1:] if k is not None):
            raise Refused(f"{label}: padding that depends on the batch")
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
                raise Refused(f"{label}: pads the batch")
        return Kind.BATCH

    def _reshape(self, node: Any, index: int, label: str, kinds: list[Kind | None]) -> Kind:
        if kinds[0] is not Kind.BATCH:
            raise Refused(f"{label}: reshapes the batch size into data")
        if kinds[1] is Kind.SHAPE:
            return Kind.BATCH
        target = self._const_value(node.input[1], "the target shape", label).astype(np.int64)
        if int(self._attr(node, "allowzero", 0)) != 0:
            raise Refused(f"{label}: allowzero")
        if target.ndim != 1 or target.size == 0:
            raise Refused(f"{label}: reshapes to a scalar")
        if target[0] == 0:
            return Kind.BATCH
        if target[0] == 1:
            patched = target.copy()
            patched[0] = 0  # copy dim 0 of the input: the batch
            self.patches[index] = patched
            return Kind.BATCH
        raise Refused(f"{label}: reshapes to {target.tolist()}, folding the batch into other dims")

    def _resize(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        if kinds[0] is not Kind.BATCH:
            raise Refused(f"{label}: resizes by the batch")
        if node.op_type == "Upsample" or self.opset < 11:
            scales_name = node.input[1] if len(node.input) > 1 else ""
            sizes_name = ""
        else:
            scales_name = node.input[2] if len(node.input) > 2 else ""
            sizes_name = node.input[3] if len(node.input) > 3 else ""
        if sizes_name:
            if kinds[3] is Kind.SHAPE:
                return Kind.BATCH
            raise Refused(f"{label}: output sizes that fix the batch")
        if scales_name:
            scales = self._const_value(scales_name, "scales", label).reshape(-1)
            if scales.size and float(scales[0]) == 1.0:
                return Kind.BATCH
            if not scales.size:
                raise Refused(f"{label}: neither scales nor sizes")
        raise Refused(f"{label}: scales the batch")

    def _matmul(self, node: Any, label: str, kinds: list[Kind | None]) -> Kind:
        a, b = kinds[0], kinds[1]
        rank_a = self._rank(node.input[0], label)
        if a is Kind.BATCH and b is Kind.CONST and rank_a >= 2 and self._rank(node.input[1], label) <= 2:
            return Kind.BATCH
        if a is Kind.BATCH and b is Kind.BATCH and rank_a >= 3 and self._rank(node.input[1], label) >= 3:
            return Kind.BATCH
        raise Refused(f"{label}: a product across the batch")
