"""Reading ONNX files without running them: tensor descriptions, and rewriting fixed dims as dynamic.

Fully convolutional models (YuNet, U²-Netp) are often exported with a fixed input size; making the
height and width symbolic lets one model serve any frame size without resizing to a square.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import Dim, TensorSpec

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)


def load_model_bytes(path: str | Path, dynamic_axes: Mapping[str, tuple[int, ...]]) -> bytes:
    """Serialized model with the given axes of the given inputs made symbolic (`dim_param`).

    Stale `graph.value_info` is dropped, and output dims that no longer follow from the inputs become
    symbolic too, so that runtimes neither trust nor warn about the old fixed sizes. Axis 0 (the
    batch) becomes symbolic only where `framewire.engines.batch_rewrite` proves the graph keeps frames apart;
    otherwise it stays fixed, and callers see that in the model's inputs.
    """
    model = _load(path)
    _make_dynamic(model, path, dynamic_axes)
    return bytes(model.SerializeToString())


def describe(
    path: str | Path, dynamic_axes: Mapping[str, tuple[int, ...]] | None = None
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """Inputs and outputs of the model file (after the rewrite of `dynamic_axes`, if any), no session."""
    model = _load(path)
    if dynamic_axes:
        _make_dynamic(model, path, dynamic_axes)
    graph = model.graph
    # Old exporters list initializers among the inputs; they are weights, not feeds.
    weights = {init.name for init in graph.initializer}
    inputs = tuple(_spec(value, path) for value in graph.input if value.name not in weights)
    outputs = tuple(_spec(value, path) for value in graph.output)
    return inputs, outputs


def read_model(
    path: str | Path,
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...], dict[str, str]]:
    """Inputs, outputs (as declared in the file) and metadata (`metadata_props`) of a model file, in
    one read: what a task takes from the model itself (Ultralytics' `names`, PaddleOCR's `character`)."""
    model = _load(path)
    weights = {init.name for init in model.graph.initializer}
    inputs = tuple(_spec(value, path) for value in model.graph.input if value.name not in weights)
    outputs = tuple(_spec(value, path) for value in model.graph.output)
    return inputs, outputs, {prop.key: prop.value for prop in model.metadata_props}


def _load(path: str | Path) -> onnx.ModelProto:
    import onnx  # lazy: only validate and dynamic-shape loading need it

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"model file {str(file)!r} does not exist")
    try:
        model = onnx.load(str(file))
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, external data errors, ...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"model file {str(file)!r} is not a valid ONNX model: {reason}") from None
    # Protobuf happily parses an empty or truncated file into an empty message.
    if model.ir_version <= 0 or not model.graph.output:
        raise ConfigError(f"model file {str(file)!r} is not a valid ONNX model: no graph outputs")
    return model


def _make_dynamic(
    model: onnx.ModelProto, path: str | Path, dynamic_axes: Mapping[str, tuple[int, ...]]
) -> None:
    graph = model.graph
    by_name = {value.name: value for value in graph.input}
    for input_name, axes in dynamic_axes.items():
        value = by_name.get(input_name)
        if value is None:
            raise ConfigError(
                f"model file {str(path)!r} has no input {input_name!r} (inputs: {', '.join(sorted(by_name))})"
            )
        dims = value.type.tensor_type.shape.dim
        for axis in axes:
            if not 0 <= axis < len(dims):
                raise ConfigError(
                    f"model file {str(path)!r}: input {input_name!r} has {len(dims)} dims, "
                    f"no axis {axis} to make dynamic"
                )
            if axis == 0 or dims[axis].HasField("dim_param"):
                continue  # axis 0, the batch, only where the graph allows it: below
            dims[axis].dim_param = f"{input_name}_{axis}"  # clears dim_value (a oneof)
    batch_inputs = [name for name, axes in dynamic_axes.items() if 0 in axes]
    if batch_inputs:
        from framewire.engines.batch_rewrite import make_batch_dynamic

        rewrite = make_batch_dynamic(model, batch_inputs)
        if not rewrite.ok:
            log.info("model %s keeps its fixed batch of 1: %s", path, rewrite.reason)
    if not dynamic_axes:
        return
    del graph.value_info[:]
    _relax_outputs(model)


def _relax_outputs(model: onnx.ModelProto) -> None:
    """Make symbolic every output dim that shape inference can no longer prove to be fixed."""
    import onnx
    from onnx import shape_inference

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for output in probe.graph.output:
        output.type.tensor_type.ClearField("shape")
    inferred: dict[str, Any] = {}
    try:
        result = shape_inference.infer_shapes(probe)
        inferred = {value.name: value for value in result.graph.output}
    except Exception as exc:  # noqa: BLE001 - custom ops and the like: every fixed dim may change
        log.debug("shape inference failed (%s); treating all output dims as dynamic", exc)
    for output in model.graph.output:
        tensor_type = output.type.tensor_type
        if not tensor_type.HasField("shape"):
            continue
        known = inferred.get(output.name)
        known_dims = (
            list(known.type.tensor_type.shape.dim)
            if known is not None and known.type.tensor_type.HasField("shape")
            else []
        )
        for axis, dim in enumerate(tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                continue
            proven = axis < len(known_dims) and known_dims[axis].HasField("dim_value")
            if proven and known_dims[axis].dim_value == dim.dim_value:
                continue
            dim.dim_param = f"{output.name}_{axis}"


def _spec(value: Any, path: str | Path) -> TensorSpec:
    from onnx import helper

    tensor_type = value.type.tensor_type
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
    except (KeyError, TypeError, ValueError):
        raise ConfigError(
            f"model file {str(path)!r}: tensor {value.name!r} has an unsupported element type "
            f"({tensor_type.elem_type})"
        ) from None
    shape: tuple[Dim, ...] = ()
    if tensor_type.HasField("shape"):
        shape = tuple(_dim(d) for d in tensor_type.shape.dim)
    return TensorSpec(value.name, dtype, shape)


def _dim(dim: Any) -> Dim:
    if dim.HasField("dim_value"):
        return int(dim.dim_value)
    if dim.HasField("dim_param"):
        return str(dim.dim_param)
    return None
