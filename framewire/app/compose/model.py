"""The primary model's composer: its task, its engine, and the preprocess, infer and postprocess stages."""

from __future__ import annotations

import functools
import hashlib
import logging
from pathlib import Path

from framewire.config import Config
from framewire.config.engine import Backend
from framewire.config.job import INFER, POSTPROCESS, PREPROCESS
from framewire.config.keys import suggest
from framewire.config.loading import missing_file
from framewire.engines.base import Engine
from framewire.engines.batch_rewrite import with_batch_axis
from framewire.engines.registry import OpenOptions, choose_backend, device_of, infer_workers, open_engine
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import Stage
from framewire.pipeline.stagespec import StageSpec
from framewire.stages.infer import Infer
from framewire.stages.postprocess import Postprocess
from framewire.stages.preprocess import Preprocess
from framewire.stages.schedule import Schedule, Scheduled
from framewire.stages.tasks import resolve_task
from framewire.stages.tasks.base import ModelInfo, Task
from framewire.stages.tasks.detection_formats import detector_evidence

log = logging.getLogger(__name__)


def build_task(config: Config) -> Task:
    """The primary model's task, bound to what its model file says (input size, format, labels)."""
    name = config.model.task if config.model.task is not None else task_from_model(config)
    task = resolve_task(name, config.model.params)
    task.use_model(model_info(config.model.path, "model.path"))
    return task


def task_from_model(config: Config) -> str:
    """The task of a `model:` that names none, where the model file shows it beyond doubt: an
    Ultralytics detect export or a YOLOv8-style detector (detection_formats.detector_evidence)."""
    for key in config.model.params:  # `taks: detection` is a misspelt task, not a task parameter
        if suggest(key, ["task"]):
            raise ConfigError(f"model.{key}: unknown key (did you mean task?)")
    info = model_info(config.model.path, "model.path")
    found, why = detector_evidence(info.inputs, info.outputs, info.metadata)
    if not found:
        raise ConfigError(f"model.task: required key is missing ({why})")
    log.debug("model.task: detection, from the model (%s)", why)
    return "detection"


def model_info(path: str, key: str) -> ModelInfo:
    """The model file's tensors and metadata (read once per process and file version)."""
    file = Path(path)
    try:
        stat = file.stat()
    except OSError:
        raise ConfigError(missing_file(key, "model file", path)) from None
    return _model_info(str(file.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _model_info(path: str, mtime_ns: int, size: int) -> ModelInfo:
    from framewire.engines.model_file import read_model

    inputs, outputs, metadata = read_model(path)
    return ModelInfo(path, inputs, outputs, metadata)


def model_version(config: Config) -> str:
    """The label the records name the model by: `model.version`, else the file's name and the first
    12 hex digits of its SHA-256 (read once per file version; the file's name alone if unreadable)."""
    if config.model.version is not None:
        return config.model.version
    file = Path(config.model.path)
    try:
        stat = file.stat()
        digest = _digest(str(file.resolve()), stat.st_mtime_ns, stat.st_size)
    except OSError:
        return file.name
    return f"{file.name}@{digest[:12]}"


@functools.lru_cache(maxsize=8)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(functools.partial(f.read, 1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def check_model(config: Config, task: Task) -> None:
    """The model file is there, and its inputs and outputs fit the task."""
    from framewire.engines.model_file import describe

    model = Path(config.model.path)
    if not model.is_file():
        raise ConfigError(missing_file("model.path", "model file", config.model.path))
    inputs, outputs = describe(str(model), task.dynamic_axes())
    task.check_model(inputs, outputs)


def own_model_input(config: Config) -> bool:
    """Whether the model input lives in the infer worker's own memory, not in the frame pool: when
    preprocess runs in the infer process (`stages.fuse`) and the engine does not read the pool as
    pinned memory (TensorRT does). The pool then has no `input` region (for YuNet at 640x288, 2.2
    MB a slot against 0.5 MB of the frame), and the model reads a buffer still in the cache."""
    return config.stages.fuse and choose_backend(config.engine, quiet=True).backend is not Backend.TENSORRT


def engine_axes(config: Config, task: Task) -> dict[str, tuple[int, ...]]:
    """The input axes the engine makes dynamic: the task's, plus the batch when batching is on (a
    batch-of-1 export is rewritten where its graph allows it, else it runs frame by frame)."""
    axes = task.dynamic_axes()
    return with_batch_axis(axes, task.input_name) if config.engine.max_batch > 1 else axes


def engine_options(config: Config, task: Task, index: int = 0) -> OpenOptions:
    """Infer worker `index`'s GPU, and the task's data a TensorRT build needs (read only if built)."""
    from framewire.app.engine_inputs import calibration_batches, source_input_shapes

    calibration = config.engine.calibration
    return OpenOptions(
        device=device_of(config.engine, index),
        input_shapes=functools.partial(source_input_shapes, task, config.sources),
        calibration=(
            functools.partial(calibration_batches, task, calibration.video, calibration.frames)
            if calibration.video
            else None
        ),
    )


def model_stages(config: Config) -> list[StageSpec]:
    """Preprocess, infer and postprocess: the model's input made, the model run (batched over
    sources up to `engine.max_batch`, with the credits to fill a batch and one more), its output read."""
    own_input = max(1, config.engine.max_batch) if own_model_input(config) else 0
    credits = max(config.transport.credits_per_worker, 2 * config.engine.max_batch)
    stages = config.stages
    pre = functools.partial(_preprocess, config, own_input)
    infer = functools.partial(_infer, config)
    post = functools.partial(_postprocess, config, model_version(config))
    return [
        StageSpec.of(PREPROCESS, stages.preprocess.workers, pre, Preprocess.facts),
        StageSpec.of(INFER, infer_workers(config.engine), infer, Infer.facts, credits=credits),
        StageSpec.of(POSTPROCESS, stages.postprocess.workers, post, Postprocess.facts),
    ]


# Factories: module-level so that spawn can pickle them by reference; called in the worker.


def _scheduled(config: Config, stage: Stage, *, last: bool = False, follow: bool = True) -> Stage:
    """The stage as is, or, with tracking, skipping the frames `tracking.interval` leaves to the
    tracker (an interval of 0 too: a source's interval may change while the job runs)."""
    if config.tracking is None:
        return stage
    return Scheduled(stage, Schedule(config.tracking.interval), last=last, follow=follow)


def _preprocess(config: Config, own_input: int = 0) -> Stage:
    return _scheduled(config, Preprocess(build_task(config), own_input), follow=False)


def _engine(config: Config, task: Task, index: int = 0) -> Engine:
    """The infer stage's engine, opened in its worker for `task` (the stage's own)."""
    axes = engine_axes(config, task)
    return open_engine(config.engine, config.model.path, axes, engine_options(config, task, index))


def _infer(config: Config) -> Stage:
    task = build_task(config)
    infer = Infer(
        task,
        functools.partial(_engine, config, task),
        max_batch=config.engine.max_batch,
        max_delay_ms=config.engine.max_delay_ms,
    )
    return _scheduled(config, infer)


def _postprocess(config: Config, version: str | None = None) -> Stage:
    return _scheduled(config, Postprocess(build_task(config), version), last=True)
