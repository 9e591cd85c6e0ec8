"""`quantize --backend openvino`: int8 by NNCF's post-training quantization, the recipe OpenVINO's
CPU plugin is tuned for, on frames of the config's calibration videos through the task's own
preprocessing (`framewire.app.engine_inputs.task_feeds`).

framewire's `cpu` recipe is ONNX Runtime's: u8 activations, convolutions with few channels kept
fp32, because that is what ONNX Runtime's kernels run fastest. OpenVINO runs NNCF's placement
(quantize/dequantize pairs where its CPU plugin fuses them, bias correction): on NanoDet the ONNX
Runtime recipe ran on OpenVINO at 10-11.5 ms against bf16's 6.5 ms (issue 40's numbers). The result
is an OpenVINO IR (`model.xml` and its `.bin`), used as any model: `--set model.path=x.xml --set
engine.backend=openvino --set engine.precision=int8`. NNCF's ONNX output (Q/DQ nodes) was not used:
on this development machine's CPU (AVX2, no VNNI) OpenVINO ran NanoDet's Q/DQ ONNX with errors as
large as the scores themselves, while NNCF's own OpenVINO model stayed within 0.05 of fp32's.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from framewire.engines.quantize import METADATA_KEY, QuantizeReport, _sha256, prepare_float_model
from framewire.pipeline.errors import ConfigError, EngineError

log = logging.getLogger(__name__)

PRESETS = ("performance", "mixed")
"""NNCF's presets: symmetric activations and weights (performance), or asymmetric activations (mixed:
for activations far from zero-centred, e.g. after a ReLU6-free head)."""


def quantize_for_openvino(
    model_path: str | Path,
    output_path: str | Path,
    feeds: Iterable[Mapping[str, np.ndarray]],
    *,
    dynamic_axes: Mapping[str, tuple[int, ...]] | None = None,
    preset: str = "performance",
    fast_bias_correction: bool = True,
) -> QuantizeReport:
    """Quantise `model_path` with NNCF (its OpenVINO backend, target CPU) on `feeds`; write the IR
    to `output_path` (.xml, its .bin beside it). EngineError when nncf is missing, no feed came, or
    the result does not compile on OpenVINO."""
    if preset not in PRESETS:
        raise ConfigError(f"--preset: {preset!r} is not one of {', '.join(PRESETS)}")
    try:
        import nncf
    except ImportError:
        raise EngineError(
            "quantize --backend openvino needs nncf: pip install 'framewire[openvino-quantize]'"
        ) from None
    output = Path(output_path)
    if output.suffix != ".xml":
        raise ConfigError(
            f"--output: {output_path!r}: --backend openvino writes an OpenVINO IR: name it FILE.xml"
        )
    import openvino as ov

    from framewire.engines.openvino import is_quantized, read

    started = time.monotonic()
    model = read(ov.Core(), str(model_path), dynamic_axes or {})
    data = [dict(feed) for feed in feeds]
    if not data:
        raise EngineError(f"quantize: no calibration frames reached the model {model_path}")
    quantized = _nncf(nncf, model, data, preset, fast_bias_correction, model_path)
    if not is_quantized(quantized):
        raise EngineError(f"quantize: NNCF left {model_path} without int8 nodes")
    report = QuantizeReport(
        output=str(output),
        frames=len(data),
        seconds=time.monotonic() - started,
        quantized_nodes=sum(1 for op in quantized.get_ops() if op.get_type_name() == "FakeQuantize"),
        options={"recipe": "openvino", "preset": preset, "fast_bias_correction": fast_bias_correction},
        source_sha256=_sha256(model_path),
    )
    _stamp(quantized, model_path, report, nncf.__version__)
    output.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(quantized, str(output), compress_to_fp16=False)
    _check_compiles(output, dynamic_axes)
    return report


def _nncf(
    nncf: Any, model: Any, data: list[dict[str, np.ndarray]], preset: str, fast_bias: bool, path: str | Path
) -> Any:
    """NNCF's post-training quantization of `model` on `data`, its failure as one EngineError."""
    presets = {"performance": nncf.QuantizationPreset.PERFORMANCE, "mixed": nncf.QuantizationPreset.MIXED}
    try:
        return nncf.quantize(
            model,
            nncf.Dataset(data),
            preset=presets[preset],
            target_device=nncf.TargetDevice.CPU,
            subset_size=len(data),
            fast_bias_correction=fast_bias,
        )
    except Exception as exc:  # noqa: BLE001 - NNCF raises whatever its backends meet
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EngineError(f"quantize: NNCF could not quantise {path}: {reason}") from None


def _stamp(quantized: Any, model_path: str | Path, report: QuantizeReport, version: str) -> None:
    """How the file was made, in its rt_info (framework/framewire.quantization), as the Q/DQ
    models record it in their metadata."""
    info = {
        "source": Path(model_path).name,
        "source_sha256": report.source_sha256,
        "frames": report.frames,
        "format": f"FakeQuantize by NNCF {version} for OpenVINO's CPU",
        **report.options,
    }
    quantized.set_rt_info(json.dumps(info), ["framework", METADATA_KEY])


def _check_compiles(path: Path, dynamic_axes: Mapping[str, tuple[int, ...]] | None) -> None:
    from framewire.engines.openvino import OpenVinoEngine

    try:
        OpenVinoEngine(str(path), precision="int8", dynamic_axes=dynamic_axes or None, cache=False).close()
    except Exception as exc:  # noqa: BLE001 - reported as the quantiser's failure
        raise EngineError(
            f"quantize: the quantised model {path} does not compile on OpenVINO: {exc}"
        ) from None
