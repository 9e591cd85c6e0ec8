"""Tasks by name: the built-in model families and plug-ins' (the `framewire.tasks` entry-point
group, framewire.registry.TASKS); a module not packaged as a plug-in can still be named directly,
`package.module:Class`.

Modules are imported on first use, so a process that never runs a task does not load OpenCV.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from framewire.config import describe_validation_error
from framewire.pipeline.errors import ConfigError
from framewire.registry import TASKS
from framewire.stages.tasks.base import Result, Task, TaskParams
from framewire.stages.tasks.objects import ObjectTask

__all__ = [
    "TASKS",
    "ObjectTask",
    "Result",
    "Task",
    "TaskParams",
    "get_task_class",
    "resolve_object_task",
    "resolve_task",
    "validation_error",
]

log = logging.getLogger(__name__)

def get_task_class(name: str) -> type[Task]:
    """The Task class for a registered name (framewire.tasks) or a `package.module:Class`."""
    cls = _task_class(name, "model.task")
    if inspect.isclass(cls) and issubclass(cls, ObjectTask) and not issubclass(cls, Task):
        raise ConfigError(f"model.task: {name!r} runs on detected objects: use it in a secondary: item")
    if not (inspect.isclass(cls) and issubclass(cls, Task)) or inspect.isabstract(cls):
        raise ConfigError(
            f"model.task: {name!r} is not a concrete subclass of stages.tasks.base.Task "
            f"(registered: {', '.join(TASKS.names())})"
        )
    return cls


def resolve_object_task(task_name: str, params: Mapping[str, Any], key: str) -> ObjectTask:
    """A secondary model's task (an ObjectTask) from its name and keys; errors name `key`."""
    if task_name not in TASKS and ":" not in task_name:
        raise ConfigError(
            f"{key}.task: {TASKS.unknown(task_name)} (on objects: classification, text_recognition)"
        )
    cls = _task_class(task_name, f"{key}.task")
    if not (inspect.isclass(cls) and issubclass(cls, ObjectTask)) or inspect.isabstract(cls):
        raise ConfigError(
            f"{key}.task: {task_name!r} does not run on objects (not a stages.tasks.objects.ObjectTask; "
            f"on objects: classification, text_recognition)"
        )
    try:
        validated = cls.Params.model_validate(dict(params))
    except ValidationError as exc:
        from framewire.config import SecondaryConfig

        raise validation_error(exc, key, cls.Params, tuple(SecondaryConfig.model_fields)) from None
    task = cls(validated)
    task.key = key
    return task


def resolve_task(task_name: str, params: Mapping[str, Any]) -> Task:
    """A task built from its name and its `model:` keys (besides `path` and `task`), validated."""
    cls = get_task_class(task_name)
    try:
        validated = cls.Params.model_validate(dict(params))
    except ValidationError as exc:
        raise validation_error(exc, "model", cls.Params, ("path", "task")) from None
    return cls(validated)


def validation_error(
    exc: ValidationError, prefix: str, model: type[BaseModel] | None = None, also_known: Sequence[str] = ()
) -> ConfigError:
    """A one-line ConfigError as the config's own: unknown keys first, with a "did you mean" among
    the keys `model` (what was validated) and `also_known` take, each named `<prefix>.<key path>`."""
    return ConfigError(describe_validation_error(exc, prefix, model=model, also_known=also_known))


def _task_class(name: str, key: str) -> Any:
    """A registered task, or one named `package.module:Class` (a module not packaged as a plug-in)."""
    if ":" not in name:
        if name not in TASKS:
            raise ConfigError(f"{key}: {TASKS.unknown(name)}; or a class written package.module:Class")
        return TASKS.get(name, key)
    return _load_entry_point(name)


def _load_entry_point(entry: str) -> Any:
    module_name, _, attribute = entry.partition(":")
    if not module_name or not attribute:
        raise ConfigError(
            f"model.task: {entry!r} is not an entry point written package.module:Class "
            f"(registered: {', '.join(TASKS.names())})"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - a user's module may fail in any way on import
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ConfigError(
            f"model.task: cannot import module {module_name!r} for {entry!r}: {type(exc).__name__}: {reason}"
        ) from None
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ConfigError(f"model.task: module {module_name!r} has no {attribute!r} ({entry!r})")
        value = getattr(value, part)
    log.debug("task %s loaded from %s", entry, getattr(module, "__file__", module_name))
    return value
