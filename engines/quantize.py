"""INT8 on the CPU: ONNX Runtime static quantisation (QDQ), calibrated on real frames.

The calibration data are frames of a video passed through the task's own preprocessing, so the
activation ranges are those the model sees in the daemon. The result is an ordinary ONNX file, usable
as `model.path` of any config:

- height and width stay dynamic where the task asks for it (they are rewritten before quantising,
  so calibration runs at the frames' own size), and the batch dimension stays 1 in the file (the
  loader rewrites it for dynamic batching, as for the fp32 model);
- the opset is raised to 13 when lower (per-channel QDQ needs `axis` on DequantizeLinear).

What is quantised was chosen by measurement (docs/results/history.md, "INT8 on the CPU"): activations
uint8 and weights int8 (the u8s8 kernels of ONNX Runtime's MLAS; int8 activations measured slower,
the QOperator format no faster), weights symmetric and per output channel (more accurate than per
tensor at the same speed). MLAS's int8 convolutions read their input through a buffer of pointers, one per
output pixel and kernel tap, which costs more than the int8 arithmetic saves when a pixel holds few
channels: quantising every convolution made YuNet 18-54% slower than fp32 on the CPU (the first RGB
convolution was 2x, the depthwise layers at high resolution 2.5x slower than ONNX Runtime's fp32
NCHWc kernels), while its 1x1 convolutions of 32-64 channels ran 2.5-3x faster. So `float_convs`
keeps in fp32 the convolutions with fewer than `min_channels` input channels, and the depthwise
convolutions that would start an int8 region.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from framewire.pipeline.errors import ConfigError, EngineError

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)

QUANT_OPSET = 13
"""Lowest opset with per-axis QuantizeLinear/DequantizeLinear."""

METADATA_KEY = "framewire.quantization"
"""Model metadata entry recording how a file was quantised (JSON)."""

CALIBRATION_METHODS = ("minmax", "entropy", "percentile")

RECIPES = ("cpu", "tensorrt")
GPU_OP_TYPES = ("Conv", "ConvTranspose", "MatMul", "Gemm")
"""What the `tensorrt` recipe quantises: the weighted layers, where int8 pays on a GPU."""
"""`cpu`: what ONNX Runtime's CPU kernels run fastest (below). `tensorrt`: what TensorRT takes from
Q/DQ nodes: int8 activations and weights, both symmetric (zero point 0), weights per output channel,
biases left in fp32 (TensorRT folds them itself), every convolution quantised (TensorRT chooses per
layer whether int8 pays)."""


@dataclass(frozen=True)
class QuantizeOptions:
    """How to quantise; the defaults are the measured best for YuNet on an AVX-512 VNNI CPU."""

    per_channel: bool = True
    """Weights quantised per output channel (more accurate; per-tensor only saves a little memory)."""
    min_channels: int = 32
    """Rules of `float_convs`: fewer input channels than this stay fp32 (0 quantises every convolution)."""
    exclude: tuple[str, ...] = ()
    """Further node names to keep in fp32."""
    method: str = "minmax"
    """Calibration: minmax, entropy or percentile (the last two keep a histogram: slower)."""
    reduce_range: bool = False
    """7-bit weights: for CPUs without VNNI, where u8s8 products can saturate."""
    recipe: str = "cpu"
    """`cpu` (u8 activations, s8 weights, small convolutions kept fp32) or `tensorrt` (s8s8
    symmetric, for TensorRT's explicit quantisation; `min_channels` does not apply)."""

    def __post_init__(self) -> None:
        if self.recipe not in RECIPES:
            raise ConfigError(f"quantize recipe {self.recipe!r}: one of {', '.join(RECIPES)}")
        if self.method not in CALIBRATION_METHODS:
            raise ConfigError(f"calibration method {self.method!r}: one of {', '.join(CALIBRATION_METHODS)}")
        if self.min_channels < 0:
            raise ConfigError(f"min_channels must be >= 0, got {self.min_channels}")


@dataclass
class QuantizeReport:
    """What `quantize_model` did."""

    output: str
    frames: int
    seconds: float
    quantized_nodes: int
    float_nodes: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    source_sha256: str = ""


# --- calibration data ----------------------------------------------------------------------------


def _calibration_reader_base() -> type:
    from onnxruntime.quantization import CalibrationDataReader

    return CalibrationDataReader


class FeedReader(_calibration_reader_base()):  # type: ignore[misc]
    """ONNX Runtime's `CalibrationDataReader` over an iterator of model feeds (`{input name: array}`).

    Any iterable works, so tests feed it hand-made arrays and the CLI feeds it
    `framewire.app.engine_inputs.task_feeds(...)`.
    `count` says how many feeds were handed out; `limit` stops after that many.
    """

    def __init__(self, feeds: Iterable[Mapping[str, np.ndarray]], limit: int | None = None) -> None:
        self._feeds: Iterator[Mapping[str, np.ndarray]] = iter(feeds)
        self.limit = limit
        self.count = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.limit is not None and self.count >= self.limit:
            return None
        feed = next(self._feeds, None)
        if feed is None:
            return None
        self.count += 1
        return {name: np.ascontiguousarray(value) for name, value in feed.items()}


def video_frames(uri: str, count: int, *, stride: int | None = None) -> Iterator[np.ndarray]:
    """Up to `count` BGR frames of a video, every `stride`-th one (default: spread over the whole
    video when it says how long it is, else consecutive)."""
    from framewire.media.video_reader import VideoReader

    if count < 1:
        return
    with VideoReader("calibration", uri) as reader:
        total = reader.info.frame_count
        step = stride or (max(1, total // count) if total else 1)
        taken = 0
        for frame in reader.frames():
            if frame.index % step:
                continue
            yield frame.image
            taken += 1
            if taken >= count:
                # Stop decoding early: closing the reader is enough, no truncation check runs.
                return


def mixed_frames(uris: Sequence[str], count: int, *, stride: int | None = None) -> Iterator[np.ndarray]:
    """`count` frames shared among several videos (the first ones get the remainder), one video
    after the other."""
    for _, image in labelled_frames(uris, count, stride=stride):
        yield image


def labelled_frames(
    uris: Sequence[str], count: int, *, stride: int | None = None
) -> Iterator[tuple[str, np.ndarray]]:
    """`mixed_frames`, each with the video it came from."""
    for position, uri in enumerate(uris):
        share = count // len(uris) + (1 if position < count % len(uris) else 0)
        for image in video_frames(uri, share, stride=stride):
            yield uri, image


# --- the model -----------------------------------------------------------------------------------


def prepare_float_model(
    path: str | Path, dynamic_axes: Mapping[str, tuple[int, ...]] | None = None
) -> onnx.ModelProto:
    """The fp32 model ready to quantise: task axes dynamic, opset >= 13, every node named."""
    import onnx
    from onnx import version_converter

    from framewire.engines.onnx_model import load_model_bytes

    axes = {name: tuple(a for a in values if a != 0) for name, values in (dynamic_axes or {}).items()}
    model = onnx.load_from_string(load_model_bytes(path, axes))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset < QUANT_OPSET:
        try:
            model = version_converter.convert_version(model, QUANT_OPSET)
        except Exception as exc:  # noqa: BLE001 - the converter raises bare RuntimeErrors
            raise EngineError(f"model {path}: cannot raise opset {opset} to {QUANT_OPSET}: {exc}") from None
    names: set[str] = set()
    for index, node in enumerate(model.graph.node):
        if not node.name or node.name in names:
            node.name = f"{node.op_type}_{index}"
        names.add(node.name)
    return model


def float_convs(model: onnx.ModelProto, min_channels: int) -> list[str]:
    """Names of the Conv nodes to keep in fp32 (`min_channels` 0: none), by two rules measured on
    MLAS (module docstring): a convolution whose input has fewer than `min_channels` channels
    (input channels per group x groups), and a depthwise convolution whose input does not already
    come out of a quantised node (int8 depthwise is slower than fp32, so it is worth it only inside
    an int8 region, where it saves two conversions)."""
    if min_channels <= 0:
        return []
    from onnx import helper

    weights = {init.name: tuple(init.dims) for init in model.graph.initializer}
    names: list[str] = []
    quantised: set[str] = set()  # tensors that come out of an int8 convolution, directly or not
    for node in model.graph.node:  # graph order is topological
        data = [name for name in node.input if name and name not in weights]
        if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in weights:
            if any(name in quantised for name in data):
                quantised.update(node.output)
            continue
        dims = weights[node.input[1]]
        group = int(next((helper.get_attribute_value(a) for a in node.attribute if a.name == "group"), 1))
        channels = dims[1] * group if len(dims) >= 2 else 0
        depthwise = group > 1 and len(dims) >= 2 and dims[1] == 1
        if channels < min_channels or (depthwise and node.input[0] not in quantised):
            names.append(node.name)
        else:
            quantised.update(node.output)
    return names


def quantize_model(
    model_path: str | Path,
    output_path: str | Path,
    feeds: Iterable[Mapping[str, np.ndarray]],
    *,
    dynamic_axes: Mapping[str, tuple[int, ...]] | None = None,
    options: QuantizeOptions | None = None,
) -> QuantizeReport:
    """Quantise `model_path` (QDQ; u8 activations and s8 weights, or s8s8 symmetric with the
    `tensorrt` recipe) calibrated on `feeds`; write `output_path`. Raises EngineError when no feed
    came or the result does not load (it is loaded on the CPU, whatever the recipe)."""
    import onnx

    options = options or QuantizeOptions()
    started = time.monotonic()
    model = prepare_float_model(model_path, dynamic_axes)
    known = {node.name for node in model.graph.node}
    unknown = [name for name in options.exclude if name not in known]
    if unknown:
        raise ConfigError(f"--exclude: the model has no node(s) {', '.join(map(repr, unknown))}")
    gpu = options.recipe == "tensorrt"
    float_nodes = sorted(set([] if gpu else float_convs(model, options.min_channels)) | set(options.exclude))
    reader = FeedReader(feeds)
    output = Path(output_path)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="framewire-quantize-") as tmp, _quiet_quantizer():
        prepared = Path(tmp) / "float.onnx"
        onnx.save(model, str(prepared))
        try:
            _quantize_static(prepared, output, reader, options, float_nodes)
        except Exception as exc:  # noqa: BLE001 - ORT's quantiser raises whatever it meets
            if reader.count == 0:
                raise EngineError(f"quantize: no calibration frames reached the model {model_path}") from None
            raise EngineError(f"quantize: ONNX Runtime could not quantise {model_path}: {exc}") from None
    if reader.count == 0:
        raise EngineError(f"quantize: no calibration frames reached the model {model_path}")
    quantized = onnx.load(str(output))
    report = QuantizeReport(
        output=str(output),
        frames=reader.count,
        seconds=time.monotonic() - started,
        quantized_nodes=sum(1 for node in quantized.graph.node if node.op_type == "QuantizeLinear"),
        float_nodes=float_nodes,
        options=asdict(options),
        source_sha256=_sha256(model_path),
    )
    entry = quantized.metadata_props.add()
    entry.key = METADATA_KEY
    entry.value = json.dumps(
        {
            "source": Path(model_path).name,
            "source_sha256": report.source_sha256,
            "frames": report.frames,
            "format": "QDQ s8s8 symmetric (TensorRT)" if gpu else "QDQ u8s8",
            **report.options,
        }
    )
    onnx.save(quantized, str(output))
    _check_loads(output, dynamic_axes)
    return report


def _quantize_static(
    prepared: Path, output: Path, reader: FeedReader, options: QuantizeOptions, float_nodes: Sequence[str]
) -> None:
    """ONNX Runtime's static QDQ quantiser, set for the recipe: u8s8 for its CPU kernels, or s8s8
    symmetric on weighted layers only, what TensorRT wants from Q/DQ."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    gpu = options.recipe == "tensorrt"
    method = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }[options.method]
    quantize_static(
        str(prepared),
        str(output),
        reader,
        quant_format=QuantFormat.QDQ,
        per_channel=options.per_channel,
        reduce_range=options.reduce_range,
        activation_type=QuantType.QInt8 if gpu else QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        nodes_to_exclude=list(float_nodes),
        calibrate_method=method,
        extra_options=(
            {
                "WeightSymmetric": True,
                "ActivationSymmetric": True,
                "QuantizeBias": False,
                "OpTypesToExcludeOutputQuantization": list(GPU_OP_TYPES),
            }
            if gpu
            else {"WeightSymmetric": True, "ActivationSymmetric": False}
        ),
        # TensorRT wants Q/DQ on the inputs of weighted layers and fuses the rest itself;
        # quantising Add, MaxPool, Resize too cost YuNet 0.09-0.15 of face agreement here, and
        # quantising the layers' outputs (ONNX Runtime's default) rounded the detection heads'
        # maps to 8 bits: bigbuckbunny's agreement 0.690 with, 0.774 without (docs/gpu.md).
        op_types_to_quantize=list(GPU_OP_TYPES) if gpu else None,
    )


def save_with_info(model: onnx.ModelProto, path: str | Path, updates: Mapping[str, Any]) -> None:
    """Write `model` to `path` with its `framewire.quantization` metadata updated by `updates`."""
    import onnx

    entry = next((e for e in model.metadata_props if e.key == METADATA_KEY), None)
    if entry is None:
        entry = model.metadata_props.add()
        entry.key = METADATA_KEY
        entry.value = "{}"
    try:
        info = json.loads(entry.value)
    except ValueError:
        info = {}
    info.update(updates)
    entry.value = json.dumps(info)
    onnx.save(model, str(path))


def quantization_info(path: str | Path) -> dict[str, Any] | None:
    """The `framewire.quantization` metadata of a model file, None for a model not made by us."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for entry in model.metadata_props:
        if entry.key == METADATA_KEY:
            try:
                info = json.loads(entry.value)
            except ValueError:
                return None
            return info if isinstance(info, dict) else None
    return None


def _check_loads(path: Path, dynamic_axes: Mapping[str, tuple[int, ...]] | None) -> None:
    from framewire.engines.onnxruntime import OnnxRuntimeEngine

    try:
        OnnxRuntimeEngine(str(path), threads=1, dynamic_axes=dynamic_axes or None).close()
    except Exception as exc:  # noqa: BLE001 - reported as the quantiser's failure
        raise EngineError(f"quantize: the quantised model {path} does not load: {exc}") from None


def _sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[io.StringIO]:
    """ONNX Runtime's quantiser logs advice on the root logger ("consider pre-processing") and its
    histogram calibrators print progress to stdout; the command line shows its own summary instead
    (the progress goes to the debug log)."""
    root = logging.getLogger()

    def advice(record: logging.LogRecord) -> bool:
        return "pre-process" not in record.getMessage() and "preprocess" not in record.getMessage()

    root.addFilter(advice)
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            yield captured
    finally:
        root.removeFilter(advice)
        if captured.getvalue().strip():
            log.debug("quantiser output:\n%s", captured.getvalue().rstrip())


def describe_float_nodes(names: Sequence[str], limit: int = 8) -> str:
    """`a, b, c and 5 more`: a short list for a one-line summary."""
    if not names:
        return "none"
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"
