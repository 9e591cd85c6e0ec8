"""Mixed precision for Q/DQ models: the fewest weighted layers kept in fp32 that bring an INT8 model
back within a tolerance.

A Q/DQ model made by `framewire.engines.quantize` keeps the fp32 model's tensor and node names: each weighted
layer (Conv, ConvTranspose, MatMul, Gemm) reads its activation and its weight through
DequantizeLinear. `keep_float` rewires named layers back to their fp32 inputs (the fp32 model's
weights) and drops the Q/DQ nodes nothing reads any more, without calibrating again: TensorRT then
runs those layers in fp16/fp32 and the rest in int8, and so does ONNX Runtime on the CPU.

Which layers, by measurement (docs/gpu.md, "Accuracy of the GPU recipes"):

1. `sensitivity`: for each quantised layer, the model with that layer alone in int8, its outputs
   against the fp32 outputs on a few frames (`output_error`: squared error relative to the output's
   energy, summed over outputs, averaged over frames). Measured on YuNet this ranks the damage where
   the opposite measure (all int8 but one layer) does not: errors of the other layers mask it.
2. `fewest_float`: keep the most sensitive layers fp32, as few as the caller's check allows (the
   task's own results against fp32, `framewire.app.mixed_precision`): 1, 2, 4, ... layers until one passes,
   then bisection between the last failing and the passing count; then each of those layers, least
   sensitive first, goes back to int8 if the check still passes. The result always passed the
   check (with the `tensorrt` recipe, every layer in fp32 is the fp32 model, which passes any check).

Both run on ONNX Runtime's CPU provider.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from framewire.pipeline.errors import EngineError

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)

WEIGHTED_OP_TYPES = ("Conv", "ConvTranspose", "MatMul", "Gemm")

Outputs = Mapping[str, np.ndarray]


def quantised_layers(qdq: onnx.ModelProto) -> list[str]:
    """Names of the weighted nodes that read a DequantizeLinear output, in graph order."""
    dequantised = {out for node in qdq.graph.node if node.op_type == "DequantizeLinear" for out in node.output}
    return [
        node.name
        for node in qdq.graph.node
        if node.op_type in WEIGHTED_OP_TYPES and any(name in dequantised for name in node.input)
    ]


def keep_float(qdq: onnx.ModelProto, float_model: onnx.ModelProto, names: Iterable[str]) -> onnx.ModelProto:
    """A copy of `qdq` whose `names` read the fp32 model's inputs again (its weights, the
    unquantised activations); Q/DQ nodes and initialisers that nothing reads any more are dropped.
    EngineError for a name that is not a node of both models with the same operator."""
    import onnx

    wanted = set(names)
    float_nodes = {node.name: node for node in float_model.graph.node if node.name in wanted}
    model = onnx.ModelProto()
    model.CopyFrom(qdq)
    present = {init.name for init in model.graph.initializer}
    # A quantised bias keeps its name as the output of its DequantizeLinear (ONNX Runtime's `cpu`
    # recipe): the fp32 bias then comes back under another name.
    produced = {out for node in model.graph.node for out in node.output} | {v.name for v in model.graph.input}
    float_inits = {init.name: init for init in float_model.graph.initializer}
    found: set[str] = set()
    for node in model.graph.node:
        if node.name not in wanted:
            continue
        original = float_nodes.get(node.name)
        if original is None or original.op_type != node.op_type:
            raise EngineError(f"keep fp32: node {node.name!r} is not the same layer in the fp32 model")
        found.add(node.name)
        del node.input[:]
        for name in original.input:
            if name in float_inits:
                target = f"{name}_fp32" if name in produced else name
                if target not in present:
                    init = model.graph.initializer.add()
                    init.CopyFrom(float_inits[name])
                    init.name = target
                    present.add(target)
                name = target
            node.input.append(name)
    missing = sorted(wanted - found)
    if missing:
        raise EngineError(f"keep fp32: the quantised model has no node(s) {', '.join(map(repr, missing))}")
    _drop_unread(model)
    return model


def _drop_unread(model: onnx.ModelProto) -> None:
    """Remove nodes none of whose outputs is read (graph outputs count as read), then unread
    initialisers."""
    graph = model.graph
    outputs = {value.name for value in graph.output}
    while True:
        read = outputs | {name for node in graph.node for name in node.input}
        dead = [node for node in graph.node if not any(out in read for out in node.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    read = outputs | {name for node in graph.node for name in node.input}
    kept = [init for init in graph.initializer if init.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def run_model(model: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]], threads: int = 0) -> list[dict[str, np.ndarray]]:
    """Every output of `model` for each feed, on ONNX Runtime's CPU provider."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime raises its own exception types
        raise EngineError(f"keep fp32: the mixed-precision model does not load: {exc}") from None
    names = [output.name for output in session.get_outputs()]
    return [dict(zip(names, session.run(names, dict(feed)))) for feed in feeds]


def output_error(reference: Sequence[Outputs], test: Sequence[Outputs]) -> float:
    """Mean over frames of sum over outputs of |test - ref|^2 / |ref|^2 (0 for equal outputs)."""
    if len(reference) != len(test):
        raise ValueError(f"{len(test)} test frames against {len(reference)} reference frames")
    if not reference:
        return 0.0
    total = 0.0
    for ref, out in zip(reference, test):
        for name, value in ref.items():
            r = np.asarray(value, dtype=np.float64)
            diff = np.asarray(out[name], dtype=np.float64) - r
            total += float(np.sum(diff * diff)) / max(float(np.sum(r * r)), 1e-12)
    return total / len(reference)


def sensitivity(
    qdq: onnx.ModelProto,
    float_model: onnx.ModelProto,
    feeds: Sequence[Mapping[str, np.ndarray]],
    *,
    threads: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, float]:
    """For each quantised layer, `output_error` of the model with that layer alone in int8."""
    layers = quantised_layers(qdq)
    reference = run_model(float_model, feeds, threads)
    scores: dict[str, float] = {}
    for done, name in enumerate(layers, 1):
        alone = keep_float(qdq, float_model, [other for other in layers if other != name])
        scores[name] = output_error(reference, run_model(alone, feeds, threads))
        if progress:
            progress(done, len(layers))
    return scores


@dataclass
class Search:
    """What `fewest_float` tried: (layers kept fp32, passed) in order, and the answer (`kept` is
    None when nothing passed)."""

    order: list[str]
    trials: list[tuple[int, bool]] = field(default_factory=list)
    kept: list[str] | None = None


def fewest_float(order: Sequence[str], passes: Callable[[Sequence[str]], bool], *, prune: bool = True) -> Search:
    """The fewest layers of `order` (most sensitive first) found to pass `passes(names)`, the check
    of the model with `names` kept fp32:

    1. the shortest passing prefix: 0, 1, 2, 4, ... layers, then bisection between the last
       failing and the first passing count (the whole of `order` is checked too when nothing
       shorter passed);
    2. with `prune`, each layer of that prefix, least sensitive first, goes back to int8 when the
       check still passes without it (the prefix's check is noisy: a layer ranked high can be
       one the task does not need).

    `kept` stays None when even the whole of `order` fails (a model with quantised operators
    other than weighted layers, the `cpu` recipe's)."""
    search = Search(order=list(order))
    total = len(search.order)

    def check(names: Sequence[str]) -> bool:
        ok = passes(names)
        search.trials.append((len(names), ok))
        log.info("keep fp32: %d of %d layers: %s", len(names), total, "passes" if ok else "fails")
        return ok

    count = _shortest_prefix(search.order, check)
    if count is None:
        return search
    kept = search.order[:count]
    if prune:
        for name in reversed(search.order[:count]):
            fewer = [other for other in kept if other != name]
            if check(fewer):
                kept = fewer
    search.kept = kept
    return search


def _shortest_prefix(order: Sequence[str], check: Callable[[Sequence[str]], bool]) -> int | None:
    if check(order[:0]):
        return 0
    failing, passing, count = 0, None, 1
    while count < len(order):
        if check(order[:count]):
            passing = count
            break
        failing = count
        count *= 2
    if passing is None:
        if not check(order):
            return None
        passing = len(order)
    while passing - failing > 1:
        middle = (failing + passing) // 2
        if check(order[:middle]):
            passing = middle
        else:
            failing = middle
    return passing
