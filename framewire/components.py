"""framewire's building blocks, for a program that runs its own loop around framewire's tasks and
engines rather than a whole job (`framewire.start` runs jobs): build a config's task, engine, steps,
composites and middle stages; decode and encode video; read audio; write the daemon's records.

The benchmarks in bench/ use these names only (docs/benchmarks.md). Each name is loaded on first use,
so `from framewire.components import VideoReader` imports the video reader and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framewire.app.accuracy import Tolerance, TensorStats, task_summary, tensor_errors, verdict
    from framewire.app.engine_inputs import task_feeds, task_inputs
    from framewire.config import (
        Config, EngineConfig, JsonlOutput, SourceConfig, VideoFileOutput, ZmqOutput, resolve_inputs,
        resolve_path,
    )
    from framewire.engines.base import Engine
    from framewire.engines.openvino_gate import GATE
    from framewire.engines.openvino_gate import record as record_gate
    from framewire.engines.quantize import quantize_model, video_frames
    from framewire.engines.registry import OpenOptions, detect_machine, infer_workers, open_engine
    from framewire.media.audio import AudioDecoder, LogMel, MelSettings
    from framewire.media.video_reader import VideoReader
    from framewire.media.video_writer import VideoFileWriter as VideoWriter
    from framewire.pipeline.frame import Frame, Stage, StageContext
    from framewire.pipeline.uris import local_path
    from framewire.pipeline.wire.publish import Publisher
    from framewire.stages.bytetrack import ByteTracker
    from framewire.stages.cascade import CascadeStage
    from framewire.stages.composite import Composite
    from framewire.stages.detections import boxes, iou
    from framewire.stages.fused import Fused
    from framewire.stages.outputs.jsonl import JsonlWriter
    from framewire.stages.outputs.record import RECORD_VERSION, frame_record
    from framewire.stages.schedule import skipped
    from framewire.stages.steps.base import Step
    from framewire.stages.tasks.base import Result, Task

# name -> (module, its name there): re-exported as they are, loaded on first use.
_LAZY: dict[str, tuple[str, str]] = {
    # the config's parts and paths
    "EngineConfig": ("framewire.config", "EngineConfig"),
    "SourceConfig": ("framewire.config", "SourceConfig"),
    "JsonlOutput": ("framewire.config", "JsonlOutput"),
    "VideoFileOutput": ("framewire.config", "VideoFileOutput"),
    "ZmqOutput": ("framewire.config", "ZmqOutput"),
    "resolve_inputs": ("framewire.config", "resolve_inputs"),
    "resolve_path": ("framewire.config", "resolve_path"),
    "local_path": ("framewire.pipeline.uris", "local_path"),
    # frames and stages
    "Frame": ("framewire.pipeline.frame", "Frame"),
    "Stage": ("framewire.pipeline.frame", "Stage"),
    "StageContext": ("framewire.pipeline.frame", "StageContext"),
    "Task": ("framewire.stages.tasks.base", "Task"),
    "Result": ("framewire.stages.tasks.base", "Result"),
    "Step": ("framewire.stages.steps.base", "Step"),
    "Composite": ("framewire.stages.composite", "Composite"),
    "Fused": ("framewire.stages.fused", "Fused"),
    "CascadeStage": ("framewire.stages.cascade", "CascadeStage"),
    "skipped": ("framewire.stages.schedule", "skipped"),
    "task_feeds": ("framewire.app.engine_inputs", "task_feeds"),
    "task_inputs": ("framewire.app.engine_inputs", "task_inputs"),
    # engines and model files
    "Engine": ("framewire.engines.base", "Engine"),
    "OpenOptions": ("framewire.engines.registry", "OpenOptions"),
    "open_engine": ("framewire.engines.registry", "open_engine"),
    "detect_machine": ("framewire.engines.registry", "detect_machine"),
    "infer_workers": ("framewire.engines.registry", "infer_workers"),
    "quantize_model": ("framewire.engines.quantize", "quantize_model"),
    "record_gate": ("framewire.engines.openvino_gate", "record"),
    "GATE": ("framewire.engines.openvino_gate", "GATE"),
    "video_frames": ("framewire.engines.quantize", "video_frames"),
    # media
    "VideoReader": ("framewire.media.video_reader", "VideoReader"),
    "VideoWriter": ("framewire.media.video_writer", "VideoFileWriter"),
    "AudioDecoder": ("framewire.media.audio", "AudioDecoder"),
    "LogMel": ("framewire.media.audio", "LogMel"),
    "MelSettings": ("framewire.media.audio", "MelSettings"),
    # results: records, outputs, detections, tracks, accuracy
    "RECORD_VERSION": ("framewire.stages.outputs.record", "RECORD_VERSION"),
    "frame_record": ("framewire.stages.outputs.record", "frame_record"),
    "JsonlWriter": ("framewire.stages.outputs.jsonl", "JsonlWriter"),
    "Publisher": ("framewire.pipeline.wire.publish", "Publisher"),
    "boxes": ("framewire.stages.detections", "boxes"),
    "iou": ("framewire.stages.detections", "iou"),
    "ByteTracker": ("framewire.stages.bytetrack", "ByteTracker"),
    "Tolerance": ("framewire.app.accuracy", "Tolerance"),
    "TensorStats": ("framewire.app.accuracy", "TensorStats"),
    "task_summary": ("framewire.app.accuracy", "task_summary"),
    "tensor_errors": ("framewire.app.accuracy", "tensor_errors"),
    "verdict": ("framewire.app.accuracy", "verdict"),
}

_OWN = [
    "task_from_config", "composites_from_config", "steps_from_config", "stages_from_config",
    "secondary_stage_from_config", "slot_layout", "engine_for_task", "fp16_model",
]

__all__ = sorted([*_LAZY, *_OWN])


def task_from_config(config: Config) -> Task:
    """The config's primary model task, bound to what its model file says (input size, format,
    labels): `preprocess`, `postprocess` and the engine's feeds and outputs, as the stages use it."""
    from framewire.app.compose.model import build_task

    return build_task(config)


def composites_from_config(config: Config) -> list[Composite]:
    """The config's `composite:` items, in order; each draws a task's result onto a frame in place."""
    from framewire.app.compose.outputs import build_composites

    return build_composites(config)


def steps_from_config(config: Config) -> list[Step]:
    """The config's `steps:` (the stages before the model, such as audio features), unstarted."""
    from framewire.app.compose.audio import build_steps

    return build_steps(config)


def stages_from_config(config: Config) -> Fused:
    """The config's middle stages fused as one infer worker runs them (steps, preprocess, infer,
    postprocess, tracking, secondary models, composite): `start`, then `process` frames, then `stop`.
    Its frames hold their pixels in the regions `slot_layout` names."""
    from framewire.app.compose.plan import fused_middle

    return fused_middle(config)


def secondary_stage_from_config(config: Config) -> CascadeStage:
    """The config's secondary models as one stage: crops of each frame's detections through each
    model, the answers added to the detections (`inferences` counts the model calls)."""
    from framewire.app.compose.cascade import _cascade

    return _cascade(config)


def slot_layout(
    config: Config, source_id: str, info: Mapping[str, Any]
) -> dict[str, tuple[tuple[int, ...], str]]:
    """The pixel regions a frame of `source_id` (`info` holds its width and height) needs in the
    config's stages: {region: (shape, dtype)}, the image, the model input and the composited frame."""
    from framewire.app.compose.frames import slot_layout as layout

    return layout(config, source_id, info)


def engine_for_task(config: Config, task: Task, model: str | None = None, worker: int = 0) -> Engine:
    """The engine an infer worker (`worker`, which picks the GPU) opens for `task`: the config's
    `engine:` on `model` (the config's model by default), batched when `engine.max_batch` > 1."""
    from framewire.app.compose.model import engine_axes, engine_options
    from framewire.engines.registry import open_engine as open_

    path = model if model is not None else config.model.path
    return open_(config.engine, path, engine_axes(config, task), engine_options(config, task, worker))


def fp16_model(
    model: str | Path, output: str | Path, dynamic_axes: Mapping[str, tuple[int, ...]] | None = None
) -> int:
    """Write the fp16 copy of the ONNX model at `model` to `output` (`dynamic_axes`: the task's, made
    dynamic first); returns the count of nodes kept in fp32."""
    from framewire.engines.fp16 import convert_model_file

    return convert_model_file(model, output, dynamic_axes)


def __getattr__(name: str) -> Any:
    found = _LAZY.get(name)
    if found is None:
        raise AttributeError(f"module 'framewire.components' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(found[0]), found[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
