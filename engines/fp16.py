"""fp16 in the model itself: what TensorRT 11 builds for `precision: fp16`, and what `quantize --recipe
fp16` writes.

TensorRT 11 builds strongly typed networks only: every tensor has the type the ONNX file gives it,
so half precision has to be in the file. The conversion keeps the model's inputs and outputs in fp32
(the frame pool, the tasks and every other backend feed and read fp32) and keeps in fp32 the
operators that lose too much in half precision: exponentials, logarithms, powers, divisions by
reductions and normalisations (range and accumulation), and those whose coordinates or indices must
stay exact (Resize, TopK, NonMaxSuppression, RoiAlign, Range, CumSum). The result runs on ONNX
Runtime's CPU provider too, which is how `bench accuracy` checks it before TensorRT sees it.

The conversion is ONNX Runtime's own (`onnxruntime.transformers.float16`, part of both the onnxruntime
and onnxruntime-gpu wheels), so nothing more is installed for it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from framewire.pipeline.errors import EngineError

log = logging.getLogger(__name__)

SENSITIVE_OPS: tuple[str, ...] = (
    "Exp",
    "Log",
    "Pow",
    "Sqrt",
    "Reciprocal",
    "Softmax",
    "LogSoftmax",
    "ReduceMean",
    "ReduceSum",
    "ReduceSumSquare",
    "ReduceL2",
    "ReduceLogSumExp",
    "LayerNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    "Resize",
    "Erf",
)
"""Operators kept in fp32, beside ONNX Runtime's own block list (NonMaxSuppression, TopK, RoiAlign,
Range, CumSum, Min, Max, Upsample and the ML operators)."""

METADATA_KEY = "framewire.fp16"
"""Model metadata entry recording how a file was converted (JSON)."""


def convert_to_fp16(data: bytes) -> bytes:
    """The serialized model with fp16 weights and activations, inputs and outputs kept fp32."""
    import onnx

    try:
        from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16
    except ImportError as exc:  # a stripped ONNX Runtime build
        raise EngineError(f"fp16: ONNX Runtime's float16 converter is missing ({exc})") from None
    model = onnx.load_from_string(data)
    if any(node.op_type in ("QuantizeLinear", "DequantizeLinear") for node in model.graph.node):
        raise EngineError("fp16: the model has Q/DQ nodes (it is int8 already); convert the fp32 model")
    converter_log = logging.getLogger("onnxruntime.transformers.float16")
    level = converter_log.level
    # It warns about every weight it clamps to the fp16 range; the summary below says it once.
    converter_log.setLevel(logging.ERROR)
    try:
        converted = convert_float_to_float16(
            model,
            keep_io_types=True,
            op_block_list=sorted(set(DEFAULT_OP_BLOCK_LIST) | set(SENSITIVE_OPS)),
        )
    except Exception as exc:  # noqa: BLE001 - the converter raises whatever it meets
        raise EngineError(f"fp16: the model cannot be converted: {_first_line(exc)}") from None
    finally:
        converter_log.setLevel(level)
    return bytes(converted.SerializeToString())


def convert_model_file(
    model_path: str | Path,
    output_path: str | Path,
    dynamic_axes: Mapping[str, tuple[int, ...]] | None = None,
) -> int:
    """Write the fp16 copy of `model_path` (task axes made dynamic first, as for any model) to
    `output_path`, recording how in its metadata; returns the count of fp32 nodes kept."""
    import hashlib

    import onnx

    from framewire.engines.onnx_model import load_model_bytes

    axes = {name: tuple(a for a in values if a != 0) for name, values in (dynamic_axes or {}).items()}
    data = load_model_bytes(model_path, axes) if axes else Path(model_path).read_bytes()
    converted = onnx.load_from_string(convert_to_fp16(data))
    kept = sum(1 for node in converted.graph.node if node.op_type in SENSITIVE_OPS)
    entry = converted.metadata_props.add()
    entry.key = METADATA_KEY
    entry.value = json.dumps(
        {
            "source": Path(model_path).name,
            "source_sha256": hashlib.sha256(Path(model_path).read_bytes()).hexdigest(),
            "io": "fp32",
            "kept_fp32": sorted(SENSITIVE_OPS),
        }
    )
    output = Path(output_path)
    output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(converted, str(output))
    return kept


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
