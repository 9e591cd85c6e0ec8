"""Sources' settings at run time (`PATCH /sources/{id}`, the settings keys of `POST /sources`, the
state file): checked here as the config is, since this layer knows the schema and the model.

The runtime (pipeline.ops.settings) calls `check_settings` through `Plan.settings.check` for every
change, and the job starts with the state file's settings, each checked the same way: a file that
cannot be read, or whose settings the config would refuse, stops the start with one line naming it
(exit code 2).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from framewire.app.compose.analytics import frame_size
from framewire.config import Config
from framewire.config.analytics import SourceAnalyticsConfig
from framewire.config.loading import describe_validation_error
from framewire.config.source_settings import SourceSettings, analytics_of, merged
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.ops import state_file
from framewire.pipeline.plan import SettingsHooks
from framewire.stages.tasks.base import Task
from framewire.stages.tasks.labels import class_filter

KEYS = frozenset(SourceSettings.model_fields)
TRACKER_KEYS = frozenset(KEYS - {"score_threshold"})
"""What needs `tracking:`: lines and zones count tracks; classes and interval are the tracker's."""


def settings_hooks(config: Config, task: Task) -> SettingsHooks | None:
    """How the job's sources' settings change at run time, and those it starts with (the state
    file's, checked); None without the HTTP API, the only way to change them."""
    if not config.http.enabled:
        return None
    path = config.http.state_file
    initial: dict[str, dict[str, Any]] = {}
    for source_id, kept in (state_file.load(path) if path else {}).items():
        try:
            initial[source_id] = check_settings(config, task, source_id, kept, {}, None)
        except ConfigError as exc:
            raise ConfigError(f"http.state_file: {path}: sources.{source_id}.{exc}: fix or remove it") from None
    check = functools.partial(check_settings, config, task)
    return SettingsHooks(KEYS, check, initial, path, functools.partial(applied_settings, config, task))


def applied_settings(config: Config, task: Task, source_id: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The source's settings over the config's own `analytics:` entry for it (its lines and zones as
    they count now), and the job's score threshold and interval where the source has none."""
    job = config.analytics.get(source_id)
    shown: dict[str, Any] = job.model_dump(mode="json") if job is not None else {"lines": [], "zones": []}
    threshold = getattr(task.params, "score_threshold", None)
    if threshold is not None:
        shown["score_threshold"] = threshold
    if config.tracking is not None:
        shown["interval"] = config.tracking.interval
        shown["classes"] = config.tracking.params.get("classes")
    return {**shown, **settings}


def check_settings(
    config: Config,
    task: Task,
    source_id: str,
    raw: Any,
    current: Mapping[str, Any],
    size: tuple[int, int] | None,
) -> dict[str, Any]:
    """The source's settings once the change `raw` applies over `current`, whole (JSON); ConfigError
    naming the key (`lines.0.start: ...`) when the config would refuse it. `size`: the source's
    frame, when known (else a local video file's, read from it), for pixel points."""
    try:
        change = SourceSettings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, model=SourceSettings)) from None
    given = sorted(k for k in change.model_fields_set if getattr(change, k) is not None)
    needs = [k for k in given if k in TRACKER_KEYS]
    if config.tracking is None and needs:
        raise ConfigError(f"{needs[0]}: needs tracking: in the job's config (lines and zones count tracks)")
    if "score_threshold" in given and "score_threshold" not in type(task.params).model_fields:
        raise ConfigError(f"score_threshold: the task {task.name} has no score threshold")
    settings = merged(current, change)
    try:
        analytics = analytics_of(settings, config.analytics.get(source_id))
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, model=SourceAnalyticsConfig)) from None
    labels = task.labels()
    count = len(labels) if labels else None
    if "classes" in settings:
        class_filter(settings["classes"], labels, count, "classes")
    if analytics is not None:
        for kind, i, _, _, classes in analytics.shapes():
            class_filter(classes, labels, count, f"{kind}.{i}.classes")
        size = size or _config_size(config, source_id)
        problem = analytics.outside(*size) if size and not analytics.normalized else None
        if problem:
            raise ConfigError(problem)
    return settings


def _config_size(config: Config, source_id: str) -> tuple[int, int] | None:
    """A config source's frame size when it is a local video file; None otherwise."""
    source = next((s for s in config.sources if s.id == source_id), None)
    return frame_size(source) if source is not None else None
