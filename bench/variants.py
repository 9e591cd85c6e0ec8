"""The backend x device x precision combinations that `bench engine` and `bench accuracy` run.

A variant is written `backend:device:precision`, e.g. `onnxruntime:cpu:fp32` (the reference),
`onnxruntime:cpu:int8` (the model quantised by `quantize`), `onnxruntime:cuda:fp32`,
`onnxruntime:tensorrt:fp16` (ONNX Runtime's TensorRT provider), `tensorrt:gpu:fp16` (native
TensorRT) or `openvino:cpu:bf16` (OpenVINO on `engine.device` CPU; gpu, npu and auto too; its int8
runs the quantised model). `available()` lists what this machine can run; GPU variants appear only
with a GPU, OpenVINO's where it is installed.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framewire import UsageError

if TYPE_CHECKING:
    from framewire import Config
    from framewire.components import Engine, EngineConfig, Task

log = logging.getLogger(__name__)

BACKENDS = ("onnxruntime", "tensorrt", "openvino")
ORT_DEVICES = ("cpu", "cuda", "tensorrt")
OPENVINO_DEVICES = ("cpu", "gpu", "npu", "auto")
PRECISIONS = ("fp32", "fp16", "int8")
OPENVINO_PRECISIONS = ("fp32", "bf16", "fp16", "int8")


@dataclass(frozen=True)
class Variant:
    backend: str
    device: str
    precision: str

    @property
    def label(self) -> str:
        return f"{self.backend}:{self.device}:{self.precision}"

    @property
    def uses_int8_model(self) -> bool:
        """ONNX Runtime on the CPU and OpenVINO run INT8 from a quantised model file (QDQ); the
        TensorRT paths calibrate the fp32 model themselves."""
        on_cpu = self.backend == "onnxruntime" and self.device == "cpu"
        return self.precision == "int8" and (on_cpu or self.backend == "openvino")

    @property
    def uses_fp16_model(self) -> bool:
        """ONNX Runtime on the CPU runs fp16 from a converted model file (`quantize --recipe fp16`)."""
        return self.backend == "onnxruntime" and self.device == "cpu" and self.precision == "fp16"

    @property
    def on_gpu(self) -> bool:
        """On an NVIDIA GPU (whose memory the bench reads); OpenVINO's GPU is an Intel one."""
        return self.backend != "openvino" and self.device != "cpu"


REFERENCE = Variant("onnxruntime", "cpu", "fp32")


def parse(text: str) -> list[Variant]:
    """`onnxruntime:cpu:fp32,tensorrt:gpu:fp16` -> variants; `tensorrt:fp16` is short for
    `tensorrt:gpu:fp16`. UsageError names a bad item."""
    out: list[Variant] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) == 2 and parts[0] == "tensorrt":
            parts = ["tensorrt", "gpu", parts[1]]
        if len(parts) != 3:
            raise UsageError(f"--variants: {item!r} is not backend:device:precision")
        backend, device, precision = parts
        if backend not in BACKENDS:
            raise UsageError(f"--variants: {item!r}: backend must be one of {', '.join(BACKENDS)}")
        if backend == "openvino":
            if device not in OPENVINO_DEVICES or precision not in OPENVINO_PRECISIONS:
                raise UsageError(
                    f"--variants: {item!r}: OpenVINO's device is one of {', '.join(OPENVINO_DEVICES)}, its "
                    f"precision one of {', '.join(OPENVINO_PRECISIONS)}"
                )
            if Variant(backend, device, precision) not in out:
                out.append(Variant(backend, device, precision))
            continue
        if precision not in PRECISIONS:
            raise UsageError(f"--variants: {item!r}: precision must be one of {', '.join(PRECISIONS)}")
        if backend == "onnxruntime" and device not in ORT_DEVICES:
            raise UsageError(
                f"--variants: {item!r}: ONNX Runtime device must be one of {', '.join(ORT_DEVICES)}"
            )
        if backend == "onnxruntime" and device == "cuda" and precision == "fp16":
            raise UsageError(
                f"--variants: {item!r}: ONNX Runtime runs fp16 through its TensorRT provider, or on the "
                "CPU from an fp16 model (onnxruntime:cpu:fp16)"
            )
        if backend == "onnxruntime" and device == "cuda" and precision == "int8":
            raise UsageError(f"--variants: {item!r}: INT8 on ONNX Runtime is the CPU (quantize) or TensorRT")
        if backend == "tensorrt" and device != "gpu":
            raise UsageError(f"--variants: {item!r}: native TensorRT runs on device 'gpu'")
        variant = Variant(backend, device, precision)
        if variant not in out:
            out.append(variant)
    if not out:
        raise UsageError("--variants: no variant given")
    return out


def available() -> list[Variant]:
    """Every variant this machine can run: the CPU ones always, GPU ones where a GPU and the
    backend are present."""
    from framewire.components import detect_machine

    machine = detect_machine()
    out = [REFERENCE, Variant("onnxruntime", "cpu", "int8")]
    if machine.gpus:
        if "CUDAExecutionProvider" in machine.ort_providers:
            out.append(Variant("onnxruntime", "cuda", "fp32"))
        if "TensorrtExecutionProvider" in machine.ort_providers:
            out += [Variant("onnxruntime", "tensorrt", "fp32"), Variant("onnxruntime", "tensorrt", "fp16")]
        if machine.tensorrt:
            out += [Variant("tensorrt", "gpu", p) for p in PRECISIONS]
    else:
        log.info("no GPU variants: %s", machine.no_gpu)
    if machine.openvino:
        out += [Variant("openvino", "cpu", p) for p in ("fp32", "bf16", "int8")]
    return out


def engine_config(
    base: EngineConfig, variant: Variant, max_batch: int, calibration_video: str
) -> EngineConfig:
    """`base` set up for `variant` with an optimisation profile up to `max_batch`."""
    from framewire.components import EngineConfig

    data = base.model_dump()
    data.update(backend=variant.backend, max_batch=max_batch, min_batch=1, opt_batch=None)
    if variant.backend == "onnxruntime":
        data["providers"] = {"cpu": ["cpu"], "cuda": ["cuda"], "tensorrt": ["tensorrt", "cuda"]}[
            variant.device
        ]
    if variant.backend == "openvino":
        data["device"] = variant.device.upper()
    # INT8 on ONNX Runtime's CPU is in the model file; the engine's precision is TensorRT's (and
    # OpenVINO's, whose int8 checks that the model is quantized).
    from_file = (variant.uses_int8_model or variant.uses_fp16_model) and variant.backend != "openvino"
    data["precision"] = "fp32" if from_file else variant.precision
    if variant.precision == "int8" and not variant.uses_int8_model and not data["calibration"].get("video"):
        data["calibration"] = {**data["calibration"], "video": calibration_video}
    return EngineConfig.model_validate(data)


def model_path(config: Config, variant: Variant, int8_model: str | None, fp16_model: str | None = None) -> str:
    if variant.uses_fp16_model:
        if fp16_model is None:
            raise UsageError(f"{variant.label} needs an fp16 model (--fp16-model, or let the bench convert)")
        return fp16_model
    if variant.uses_int8_model:
        if int8_model is None:
            raise UsageError(f"{variant.label} needs an INT8 model (--int8-model, or let the bench quantise)")
        return int8_model
    return config.model.path


def open_variant(
    config: Config, variant: Variant, model: str, max_batch: int, video: str, task: Task
) -> Engine:
    """An engine of `variant` as an infer worker would open it (batch rewrite when `max_batch > 1`)."""
    from framewire.components import SourceConfig, engine_for_task

    engine = engine_config(config.engine, variant, max_batch, video)
    job = config.model_copy(update={"engine": engine, "sources": (SourceConfig(id="bench", uri=video),)})
    return engine_for_task(job, task, model)


def ensure_int8_model(
    config: Config, task: Task, given: str | None, video: str, frames: int, workdir: str | None = None
) -> tuple[str, dict[str, Any] | None]:
    """`given`, or a model quantised now on `frames` frames of `video` (in `workdir`, else a
    temporary folder that lives as long as the process). Returns the path and the quantise report."""
    if given:
        if not Path(given).is_file():
            raise UsageError(f"--int8-model: file not found: {given}")
        return given, None
    from dataclasses import asdict

    from framewire.components import quantize_model, task_feeds, video_frames

    folder = Path(workdir or tempfile.mkdtemp(prefix="framewire-bench-int8-"))
    output = folder / (Path(config.model.path).stem + "-int8.onnx")
    report = quantize_model(
        config.model.path,
        output,
        task_feeds(task, video_frames(video, frames)),
        dynamic_axes=task.dynamic_axes(),
    )
    log.info("quantised %s on %d frames of %s: %s", config.model.path, report.frames, video, output)
    return str(output), asdict(report)


def ensure_fp16_model(config: Config, task: Task, given: str | None) -> str:
    """`given`, or the config's model converted to fp16 now (a temporary folder)."""
    if given:
        if not Path(given).is_file():
            raise UsageError(f"--fp16-model: file not found: {given}")
        return given
    from framewire.components import fp16_model

    output = Path(tempfile.mkdtemp(prefix="framewire-bench-fp16-")) / (Path(config.model.path).stem + "-fp16.onnx")
    fp16_model(config.model.path, output, task.dynamic_axes())
    return str(output)
