"""Reading a model file without running it, whatever its format: an ONNX file (`onnx_model`) or an
OpenVINO IR (`.xml` beside its `.bin`, read by OpenVINO: what `quantize --backend openvino`
writes). What `validate` and the tasks read of `model.path`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from framewire.engines import onnx_model
from framewire.pipeline.wire.tensors import TensorSpec


def is_ir(path: str | Path) -> bool:
    return Path(path).suffix == ".xml"


def describe(
    path: str | Path, dynamic_axes: Mapping[str, tuple[int, ...]] | None = None
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """Inputs and outputs of the model file, with `dynamic_axes` made dynamic (onnx_model.describe)."""
    if is_ir(path):
        from framewire.engines.openvino_support import describe_ir

        return describe_ir(path, dynamic_axes)
    return onnx_model.describe(path, dynamic_axes)


def read_model(path: str | Path) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...], dict[str, str]]:
    """Inputs, outputs and metadata of the model file (onnx_model.read_model); an IR has none."""
    if is_ir(path):
        from framewire.engines.openvino_support import describe_ir

        return (*describe_ir(path), {})
    return onnx_model.read_model(path)
