"""Sources' settings changed at run time, on the hub loop: `PATCH /sources/{id}`, the settings keys of
`POST /sources`, and `GET /sources/{id}`.

A change is checked as the config is (Plan.settings.check, made by the composition root, which knows
the schema and the model), written to the state file (pipeline.ops.state_file) before it applies, sent
to the workers (pipeline.hub.source_settings: from each worker's next frame of the source), and announced to
every output as a `configured` event (pipeline.hub.events). Nothing here knows a key of the settings.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.hub.events import Events
from framewire.pipeline.hub.inputs import Inputs
from framewire.pipeline.hub.source_settings import SourceSettings
from framewire.pipeline.ops import state_file
from framewire.pipeline.plan import SettingsHooks

log = logging.getLogger(__name__)


class Settings:
    """Checks, keeps, sends and announces each change of a source's settings."""

    def __init__(self, hooks: SettingsHooks, current: SourceSettings, inputs: Inputs, events: Events) -> None:
        self.hooks = hooks
        self.current = current
        self.inputs = inputs
        self.events = events

    def split(self, body: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """A POST /sources body as its `sources:` item and its settings (lines, zones...)."""
        item = {k: v for k, v in body.items() if k not in self.hooks.keys}
        return item, {k: v for k, v in body.items() if k in self.hooks.keys}

    def check(self, source_id: str, change: Any) -> dict[str, Any]:
        """The source's settings once `change` applies, whole; ConfigError naming the key at fault."""
        if not isinstance(change, dict):
            keys = ", ".join(sorted(self.hooks.keys))
            raise ConfigError(f"the body must be a JSON object of the settings to change ({keys})")
        return self.hooks.check(source_id, change, self.current.of(source_id), self.size(source_id))

    def change(self, source_id: str, change: Any) -> dict[str, Any]:
        """Check `change` and apply it; the source's new settings."""
        settings = self.check(source_id, change)
        self.apply(source_id, settings, change)
        return settings

    def apply(self, source_id: str, settings: Mapping[str, Any], change: Mapping[str, Any]) -> None:
        """Kept first (a change the daemon could not keep is not made), then sent and announced."""
        if self.hooks.state_file is not None:
            kept = {**self.current.current, source_id: dict(settings)}
            state_file.save(self.hooks.state_file, {k: v for k, v in kept.items() if v})
        sent = self.current.set(source_id, settings)
        log.info("source %s: new settings sent to %d worker(s)", source_id, sent)
        self.events.configured(source_id, settings, change)

    def forget(self, source_id: str) -> None:
        """A source removed for good: its settings go (from the state file too)."""
        if source_id in self.current.current:
            self.apply(source_id, {}, {})

    def describe(self, source_id: str) -> dict[str, Any]:
        """GET /sources/{id}: the settings changed at run time, and what applies (over the config's)."""
        settings = self.current.of(source_id)
        return {"id": source_id, "settings": settings, "applied": self.hooks.shown(source_id, settings)}

    def size(self, source_id: str) -> tuple[int, int] | None:
        """The source's frame size, once it has opened: points are checked against it."""
        record = self.inputs.sources.get(source_id)
        info = record.info if record is not None else None
        if not info:
            return None
        width, height = info.get("width"), info.get("height")
        return (int(width), int(height)) if isinstance(width, int) and isinstance(height, int) else None
