"""The secondary models' composer (`secondary:`): their tasks and engines, and the stage that runs
them on crops of the primary model's detections."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from framewire.app.compose.model import model_info
from framewire.config import Config
from framewire.config.job import SECONDARY
from framewire.engines.base import Engine
from framewire.engines.batch_rewrite import with_batch_axis
from framewire.engines.registry import OpenOptions, device_of, open_engine
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.stagespec import StageSpec
from framewire.stages.cascade import CascadeStage, Secondary
from framewire.stages.tasks import resolve_object_task
from framewire.stages.tasks.base import Task
from framewire.stages.tasks.labels import class_filter


def build_secondaries(config: Config) -> list[Secondary]:
    """The secondary models' tasks, each bound to its model file; errors name `secondary.<index>`."""
    out = []
    for i, item in enumerate(config.secondary):
        key = f"secondary.{i}"
        task = resolve_object_task(item.task, item.params, key)
        task.use_model(model_info(item.path, f"{key}.path"))
        out.append(
            Secondary(
                item.name,
                task,
                item.classes,
                item.min_size,
                item.max_objects,
                item.max_batch,
                item.expand,
                item.reinfer_every,
            )
        )
    return out


def needs_boxes(config: Config, task: Task) -> None:
    """Secondary models and tracking need a primary model that gives boxes."""
    follows = [f"secondary.{i}" for i in range(len(config.secondary))]
    follows += ["tracking"] if config.tracking else []
    if follows and not task.gives_boxes:
        raise ConfigError(
            f"{follows[0]}: needs a model that gives boxes, but model.task {task.name!r} gives none "
            f"(detection, face_detection, text_detection do)"
        )


def check_secondaries(config: Config, labels: Sequence[str] | None) -> None:
    """Each secondary's `classes` are the primary model's."""
    for i, secondary in enumerate(build_secondaries(config)):
        class_filter(secondary.classes, labels, len(labels) if labels else None, f"secondary.{i}.classes")


def cascade_stages(config: Config) -> list[StageSpec]:
    """The secondary stage, when the job has secondary models."""
    if not config.secondary:
        return []
    facts = CascadeStage.declare(item.reinfer_every for item in config.secondary)
    factory = functools.partial(_cascade, config)
    return [StageSpec.of(SECONDARY, config.stages.secondary.workers, factory, facts)]


# Factories: module-level so that spawn can pickle them by reference; called in the worker.


def _secondary_engine(config: Config, secondary: int, index: int = 0) -> Engine:
    """A secondary model's engine in worker `index`: its task's axes plus the batch of crops."""
    item = config.secondary[secondary]
    task = build_secondaries(config)[secondary].task
    axes = with_batch_axis(task.dynamic_axes(), task.input_name)
    options = OpenOptions(device=device_of(config.engine, index), secondary=item.name)
    return open_engine(config.engine, item.path, axes, options)


def _cascade(config: Config) -> CascadeStage:
    return CascadeStage(build_secondaries(config), functools.partial(_secondary_engine, config))
