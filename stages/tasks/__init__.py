"""Tasks by name: the built-in model families and users' own, named `package.module:Class`.

Modules are imported on first use, so a process that never runs a task does not load OpenCV.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from pipeline.errors import ConfigError
from stages.tasks.base import Result, Task, TaskParams

__all__ = [
    "BUILTIN_TASKS",
    "Result",
    "Task",
    "TaskParams",
    "get_task_class",
    "resolve_task",
    "validation_error",
]

log = logging.getLogger(__name__)

BUILTIN_TASKS: dict[str, str] = {
    "face_detection": "stages.tasks.face_detection:FaceDetection",
    "matting": "stages.tasks.matting:Matting",
    "generator": "stages.tasks.generator:Generator",
}
"""Built-in task names and the class each one loads."""


def get_task_class(name: str) -> type[Task]:
    """The Task class for a built-in name or a `package.module:Class` entry point."""
    entry = BUILTIN_TASKS.get(name)
    if entry is None and ":" not in name:
        raise ConfigError(
            f"model.task: unknown task {name!r} (built-in: {', '.join(BUILTIN_TASKS)}; "
            f"or a Python entry point written package.module:Class)"
        )
    cls = _load_entry_point(entry or name)
    if not (inspect.isclass(cls) and issubclass(cls, Task)) or inspect.isabstract(cls):
        raise ConfigError(
            f"model.task: {name!r} is not a concrete subclass of stages.tasks.base.Task "
            f"(built-in: {', '.join(BUILTIN_TASKS)})"
        )
    return cls


def resolve_task(task_name: str, params: Mapping[str, Any]) -> Task:
    """A task built from its name and its `model:` keys (besides `path` and `task`), validated."""
    cls = get_task_class(task_name)
    try:
        validated = cls.Params.model_validate(dict(params))
    except ValidationError as exc:
        raise validation_error(exc, "model") from None
    return cls(validated)


def validation_error(exc: ValidationError, prefix: str) -> ConfigError:
    """A one-line ConfigError naming each bad key as `<prefix>.<key path>` and the value given."""
    problems = []
    for error in exc.errors():
        path = ".".join([prefix, *(str(part) for part in error["loc"])])
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{path}: {message} (got {error['input']!r})")
    return ConfigError("; ".join(problems))


def _load_entry_point(entry: str) -> Any:
    module_name, _, attribute = entry.partition(":")
    if not module_name or not attribute:
        raise ConfigError(
            f"model.task: {entry!r} is not an entry point written package.module:Class "
            f"(built-in: {', '.join(BUILTIN_TASKS)})"
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
