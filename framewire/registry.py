"""One registry type for everything a config names by kind: tasks, steps, composites, outputs,
sources and backends.

The one plug-in rule: kind K comes from the entry-point group `framewire.K` (`framewire.tasks`,
`framewire.outputs`, ...), built-ins included (framewire's own pyproject.toml lists them), so a
package adds a task or an output by declaring an entry point, without editing framewire
(docs/guides/plugins.md). Entries are read lazily: the group is listed on first use and only the entry
asked for is imported. A name two distributions both register is refused, naming both, rather than
one silently shadowing the other.
"""

from __future__ import annotations

import difflib
import logging
from importlib import metadata
from typing import Any, Generic, TypeVar

from framewire.pipeline.errors import ConfigError, one_line

__all__ = ["BACKENDS", "COMPOSITES", "OUTPUTS", "SOURCES", "STEPS", "TASKS", "Registry"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind, read from the entry-point group `framewire.<kind>`."""

    def __init__(self, kind: str, noun: str) -> None:
        """`kind`: the group's suffix (`outputs`); `noun`: one entry in messages (`output`)."""
        self.kind = kind
        self.noun = noun
        self.group = f"framewire.{kind}"
        self._points: dict[str, list[metadata.EntryPoint]] | None = None
        self._loaded: dict[str, T] = {}

    def __repr__(self) -> str:
        return f"Registry({self.group!r})"

    def _entries(self) -> dict[str, list[metadata.EntryPoint]]:
        if self._points is None:
            points: dict[str, list[metadata.EntryPoint]] = {}
            for point in metadata.entry_points(group=self.group):
                same = points.setdefault(point.name, [])
                # One distribution found twice on sys.path (a checkout and its install) is one entry.
                if not any(p.value == point.value and _dist(p) == _dist(point) for p in same):
                    same.append(point)
            self._points = points
        return self._points

    def names(self) -> tuple[str, ...]:
        """Every registered name, sorted (nothing is imported)."""
        return tuple(sorted(self._entries()))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries()

    def get(self, name: str, key: str = "kind") -> T:
        """The entry `name`, imported on first use. Errors are one-line ConfigErrors naming `key`
        (the config key that named it): an unknown name lists the names there are."""
        if name in self._loaded:
            return self._loaded[name]
        points = self._entries().get(name)
        if not points:
            raise ConfigError(f"{key}: {self.unknown(name)}")
        if len(points) > 1:
            owners = " and ".join(f"{_dist(p)} ({p.value})" for p in points)
            raise ConfigError(f"{key}: {self.noun} {name!r} is registered twice in {self.group}, by {owners}; "
                              f"uninstall one of them")  # fmt: skip
        point = points[0]
        try:
            value: T = point.load()
        except Exception as exc:  # noqa: BLE001 - a plug-in's module may fail in any way on import
            raise ConfigError(
                f"{key}: cannot load {self.noun} {name!r} ({point.value}, from {_dist(point)}): {one_line(exc)}"
            ) from None
        log.debug("%s %s loaded from %s (%s)", self.noun, name, point.value, _dist(point))
        self._loaded[name] = value
        return value

    def unknown(self, name: str) -> str:
        """`unknown output 'x' (one of a, b, c; did you mean b?)`: what is wrong with `name`."""
        names = self.names()
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"unknown {self.noun} {name!r} (one of {', '.join(names) or 'none'}{hint})"

    def load_all(self) -> dict[str, T]:
        """Every entry, imported (the docs' reference and `validate` listings; not the run path)."""
        return {name: self.get(name, self.group) for name in self.names()}

    def distribution(self, name: str) -> str | None:
        """The distribution that registers `name` (None when unknown)."""
        points = self._entries().get(name)
        return _dist(points[0]) if points else None

    def forget(self) -> None:
        """Read the group again on next use (after installing a plug-in into this process)."""
        self._points = None
        self._loaded.clear()


def _dist(point: metadata.EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    return str(dist.name) if dist is not None else "(unknown distribution)"


TASKS: Registry[Any] = Registry("tasks", "task")
"""Task classes (`model.task`, `secondary[].task`): stages.tasks.base.Task or ObjectTask subclasses."""
STEPS: Registry[Any] = Registry("steps", "step")
"""Step classes (`steps[].kind`): stages.steps.base.Step subclasses with their `Params` model."""
COMPOSITES: Registry[Any] = Registry("composites", "composite")
"""Composite classes (`composite[].kind`): stages.composite.Composite subclasses with their `Params`."""
OUTPUTS: Registry[Any] = Registry("outputs", "output")
"""Output classes (`outputs[].kind`): built as `cls(config)`, their `Config` a model with a `kind` literal."""
SOURCES: Registry[Any] = Registry("sources", "source")
"""Source classes (`sources[].kind`): `cls.from_config(config)`, their `Config` a model with a `kind` literal."""
BACKENDS: Registry[Any] = Registry("backends", "backend")
"""Engine openers (`engine.backend`): `opener(engine_config, model_path, dynamic_axes, options) -> Engine`."""
