"""The precision of a TensorRT build that lives in the model or in its calibration: what the
parsed model says of itself (Q/DQ nodes, fixed batches), the fp16 or Q/DQ int8 model that TensorRT
11 builds (strongly typed networks only), and TensorRT 10's INT8 entropy calibrator.

`framewire.engines.trt_build` builds; this module only prepares what the build needs for its precision.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from framewire.engines.trt_calibration import Batches, BatchFeeder, calibration_cache_file, make_calibrator
from framewire.pipeline.errors import ConfigError

log = logging.getLogger(__name__)


class PrecisionRequest(Protocol):
    """What these steps read of a build's request (`framewire.engines.trt_build.BuildRequest`)."""

    @property
    def precision(self) -> str: ...

    @property
    def calibration(self) -> Callable[[], Batches] | None: ...

    @property
    def calibration_id(self) -> str: ...

    @property
    def calibration_frames(self) -> int: ...

    @property
    def calibration_batch(self) -> int: ...


@dataclass(frozen=True)
class ModelInfo:
    """What the builder needs to know of the parsed model."""

    qdq: bool
    """Explicit Q/DQ nodes: TensorRT needs no calibrator."""
    symmetric: bool
    """Every Q/DQ zero point is zero (int8 symmetric), as TensorRT requires."""
    batch: Mapping[str, int | None]
    """Each input's batch dim when it is fixed in the model, else None."""


def model_info(data: bytes) -> ModelInfo:
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(data)
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    qdq = [n for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    symmetric = True
    for node in qdq:
        zero_point = initializers.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if zero_point is not None:
            values = numpy_helper.to_array(zero_point)
            if values.dtype != np.int8 or np.any(values != 0):
                symmetric = False
    batch: dict[str, int | None] = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        batch[value.name] = int(dims[0].dim_value) if dims and dims[0].HasField("dim_value") else None
    return ModelInfo(bool(qdq), symmetric, batch)


def strongly_typed_model(request: PrecisionRequest, data: bytes, info: ModelInfo, directory: Path) -> bytes:
    """The model TensorRT 11 builds for `request.precision`: precision lives in the model."""
    if request.precision == "fp16":
        from framewire.engines.fp16 import convert_to_fp16

        return convert_to_fp16(data)
    if request.precision != "int8" or info.qdq:
        return data
    if request.calibration is None:
        raise ConfigError(
            "engine.calibration.video: precision int8 with TensorRT 11 needs a model with Q/DQ nodes "
            "(quantize --recipe tensorrt) or calibration frames to make one (set engine.calibration.video)"
        )
    cached = calibration_cache_file(directory, data, request.calibration_id).with_suffix(".onnx")
    if cached.is_file():
        log.info("calibration: using the Q/DQ model %s", cached)
        return cached.read_bytes()
    return _quantize_for_tensorrt(request, data, info, cached)


def _quantize_for_tensorrt(request: PrecisionRequest, data: bytes, info: ModelInfo, target: Path) -> bytes:
    """Q/DQ int8 (symmetric, per-channel weights) calibrated on the CPU with ONNX Runtime on the
    request's calibration frames, one frame per feed, cached in `target`."""
    import tempfile

    from framewire.engines.quantize import QuantizeOptions, quantize_model

    assert request.calibration is not None
    names = list(info.batch)

    def feeds() -> Iterator[dict[str, np.ndarray]]:
        feeder = BatchFeeder(request.calibration(), 1, names, limit=request.calibration_frames)  # type: ignore[misc]
        while (batch := feeder.next_batch()) is not None:
            yield batch

    log.warning("calibration: making a Q/DQ int8 model for TensorRT 11 on the CPU (once)")
    with tempfile.TemporaryDirectory(prefix="framewire-trt-int8-") as tmp:
        source = Path(tmp) / "model.onnx"
        source.write_bytes(data)
        quantize_model(source, target, feeds(), options=QuantizeOptions(recipe="tensorrt"))
    return target.read_bytes()


def int8_calibrator(
    trt: ModuleType,
    builder: Any,
    config: Any,
    request: PrecisionRequest,
    data: bytes,
    info: ModelInfo,
    directory: Path,
    input_names: Sequence[str],
) -> Any:
    """TensorRT 10's entropy calibrator for a model without Q/DQ nodes, set on the builder's config
    with a calibration profile of its own; fed by the request's calibration frames."""
    if request.calibration is None:
        raise ConfigError(
            "engine.calibration.video: precision int8 needs calibration frames (set "
            "engine.calibration.video), or a model with Q/DQ nodes"
        )
    # The calibration batches must fit the network: an input whose batch is fixed in the model
    # (often 1) takes batches of exactly that size, whatever engine.calibration.batch says.
    fixed = [size for name in input_names if (size := info.batch.get(name)) is not None]
    batch_size = request.calibration_batch
    if fixed:
        batch_size = min(fixed)
        if batch_size != request.calibration_batch:
            log.info(
                "calibration: the model's batch is fixed at %d; calibrating in batches of %d, not %d",
                batch_size,
                batch_size,
                request.calibration_batch,
            )
    feeder = BatchFeeder(request.calibration(), batch_size, input_names, limit=request.calibration_frames)
    cache_path = calibration_cache_file(directory, data, request.calibration_id)
    first = feeder.peek()
    if first is None:
        raise ConfigError(
            f"engine.calibration: fewer than {batch_size} frames to calibrate with (engine.calibration.batch)"
        )
    # With dynamic shapes TensorRT calibrates in a profile of its own: the calibration batch's shape.
    calibration_profile = builder.create_optimization_profile()
    for name, array in first.items():
        calibration_profile.set_shape(name, array.shape, array.shape, array.shape)
    config.set_calibration_profile(calibration_profile)
    calibrator = make_calibrator(trt, feeder, cache_path)
    config.int8_calibrator = calibrator
    return calibrator
