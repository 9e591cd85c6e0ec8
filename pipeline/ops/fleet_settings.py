"""Sources' settings changed at run time in a fleet: kept in the store, applied where the source runs.

A source's settings travel in its item in the store (the `sources:` item with the settings keys
beside it, as POST /sources takes them). Any replica takes a PATCH: it checks the change as the
config is, against the item's settings, and writes the item back. The replica that runs the source
sees the new item at its agent's next round (a third of a lease) and applies it on its hub loop,
from the source's next frame there; one that takes the source over later starts it with them.
GET /sources/{id} answers from the store, wherever the source runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from framewire.pipeline.errors import FramewireError
from framewire.pipeline.ops.control import Command
from framewire.pipeline.ops.fleet_store import RedisStore
from framewire.pipeline.ops.settings import Settings

log = logging.getLogger(__name__)


class FleetSourceSettings:
    """The settings side of one replica: the commands' (`command`), and the hub loop's (`apply`)."""

    def __init__(self, store: RedisStore, settings: Settings | None) -> None:
        self.store = store
        self.settings = settings
        self.seen: dict[str, dict[str, Any]] = {}
        """Each source's settings as this replica last applied or wrote them (by source id)."""

    def split(self, item: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.settings.split(item) if self.settings is not None else (dict(item), {})

    def changed(self, source_id: str, item: Mapping[str, Any]) -> dict[str, Any] | None:
        """The agent's look at a held source's item: its settings when they differ from those applied."""
        settings = self.split(item)[1]
        if settings == self.seen.get(source_id, {}):
            return None
        self.seen[source_id] = settings
        return settings

    def apply(self, source_id: str, settings: dict[str, Any]) -> None:
        """On the hub loop: a source that runs here takes the store's settings (checked here too: its
        frame's size is known here)."""
        if self.settings is None:
            return
        try:
            checked = self.settings.hooks.check(source_id, settings, {}, self.settings.size(source_id))
        except FramewireError as exc:
            log.warning("fleet: source %s: its new settings cannot apply here: %s", source_id, exc)
            return
        self.settings.apply(source_id, checked, settings)

    def command(self, command: Command, source_id: str, change: Any = None, *, here: bool = False) -> None:
        """GET or PATCH of a source's settings on any replica; `here`: the source runs on this one."""
        if self.settings is None:
            command.answer(501, {"error": "this job's sources have no settings to change"})
            return
        item = self.store.item(source_id)
        if item is None:
            command.answer(404, {"error": f"no source {source_id!r} in the fleet"})
            return
        source, current = self.split(item)
        if command.action == "configure":
            size = self.settings.size(source_id) if here else None
            if not isinstance(change, dict):
                self.settings.check(source_id, change)  # the one-line refusal of a body that is no map
            current = self.settings.hooks.check(source_id, change, current, size)
            if not self.store.update(source_id, {**source, **current}):
                command.answer(409, {"error": f"source {source_id!r} has ended: its settings can no longer change"})
                return
            if here:  # at once, not at the agent's next round
                self.seen[source_id] = current
                self.settings.apply(source_id, current, change)
            log.info("fleet: source %s: settings changed", source_id)
        applied = self.settings.hooks.shown(source_id, current)
        command.answer(200, {"id": source_id, "settings": current, "applied": applied})
