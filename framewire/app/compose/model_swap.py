"""A running job's model, pointed at a new file (`POST /model`): the new file checked as the config's
model is, and the new specs of the stages that hold the model (pipeline.hub.swap starts them).

A new version of the same model: the same task, and, where the frame pool holds the model's input
(unfused stages, TensorRT), the same input size, since the pool's slots were laid out for it. Every
other key of the job stays; the task's parameters (thresholds, labels) are the config's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from framewire.app.compose.frames import slot_layout
from framewire.app.compose.model import model_version
from framewire.config import Config
from framewire.config.job import INFER, POSTPROCESS, PREPROCESS
from framewire.config.keys import suggest
from framewire.engines.registry import preflight
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.plan import ModelVersion, StageUpdate
from framewire.pipeline.stagespec import StageSpec
from framewire.stages.tasks.base import Task

log = logging.getLogger(__name__)

KEYS = ("path", "version")
"""What a request may set: the new file, and the label its records carry."""
MODEL_STAGES = frozenset({PREPROCESS, INFER, POSTPROCESS})
"""The stages that build the model's task or engine: swapped, or the fused stage that runs them."""
KEYED = re.compile(r"^[\w.\[\]-]+: ")
"""A message that starts with the key it is about (`tracking.classes: ...`)."""
SIZES = ((640, 480), (1280, 720), (1920, 1080), (3840, 2160))
"""Frame sizes whose slot layouts the old and the new model must agree on."""


def model_update(
    config: Config,
    task: Task,
    check: Callable[[Config], Task],
    stage_specs: Callable[[Config], list[StageSpec]],
    body: Mapping[str, Any],
) -> StageUpdate:
    """The new model's stages, after every check the config's model passes at start (`check`, the
    plan's: the task, the model file, the labels tracking and cascades name). `task`: the running
    job's; `stage_specs`: the plan's list of stages. Raises ConfigError in one line naming `model.<key>`."""
    new = _config(config, body)
    try:
        new_task = check(new)
    except ConfigError as exc:
        text = str(exc)
        raise ConfigError(text if KEYED.match(text) else f"model.path: {text}") from None
    preflight(new.engine, new.model.path)
    if type(new_task) is not type(task):
        raise ConfigError(
            f"model.path: {new.model.path} is a model for {type(new_task).__name__}, the job runs "
            f"{type(task).__name__}: a new task needs a restart"
        )
    for width, height in SIZES:
        info = {"width": width, "height": height}
        if slot_layout(new, "", info, new_task) != slot_layout(config, "", info, task):
            raise ConfigError(
                f"model.path: {new.model.path} takes another input than the running model at "
                f"{width}x{height}, and the frame pool is laid out for the old one: a restart is needed"
            )
    stages = tuple(s for s in stage_specs(new) if MODEL_STAGES & set(s.runs))
    return StageUpdate(ModelVersion(new.model.path, model_version(new)), stages)


def _config(config: Config, body: Mapping[str, Any]) -> Config:
    """The job's config with the request's model path and version (checked for shape only)."""
    for key in body:
        if key not in KEYS:
            near = suggest(str(key), KEYS)
            raise ConfigError(f"model.{key}: unknown key" + (f" (did you mean {near}?)" if near else ""))
    path, version = body.get("path"), body.get("version")
    if path is None:
        raise ConfigError("model.path: required key is missing")
    if not isinstance(path, str) or not path:
        raise ConfigError(f"model.path: not a file name: {path!r}")
    if version is not None and (not isinstance(version, str) or not version):
        raise ConfigError(f"model.version: not a label: {version!r}")
    # The daemon's working folder, as for a source added over the API; absolute from here on.
    model = config.model.model_copy(update={"path": str(Path(path).absolute()), "version": version})
    return config.model_copy(update={"model": model})
