"""A recording output's event history as the HTTP API asks it (pipeline.plan.EventStore): the
output's SQLite store (media.history) opened read-only for each question, on the server's thread
pool, so the API never holds the writer up (WAL: readers do not block it). A store not made yet
(no event so far) answers empty pages.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from framewire.app.recordings import recordings
from framewire.config import Config
from framewire.config.job import output_name
from framewire.media.history import DB, History


@dataclass(frozen=True)
class HistoryStore:
    """One recording output's store, by its stage name."""

    name: str
    path: str

    def events(self, filters: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int | None]:
        history = self._open()
        if history is None:
            return [], None
        try:
            page = history.events(**filters)
        finally:
            history.close()
        return page.items, page.next

    def clips(self, filters: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int | None]:
        history = self._open()
        if history is None:
            return [], None
        try:
            page = history.clips(**filters)
        finally:
            history.close()
        return page.items, page.next

    def clip_file(self, clip_id: int) -> str | None:
        return self._one("SELECT path FROM clips WHERE id = ?", clip_id)

    def snapshot_file(self, event_id: int) -> str | None:
        return self._one("SELECT path FROM snapshots WHERE event_id = ?", event_id)

    def _one(self, sql: str, row_id: int) -> str | None:
        history = self._open()
        if history is None:
            return None
        try:
            row = history.db.execute(sql, (row_id,)).fetchone()
        finally:
            history.close()
        return None if row is None else str(row[0])

    def _open(self) -> History | None:
        if not os.path.exists(self.path):
            return None
        try:
            return History.open(self.path, readonly=True)
        except sqlite3.OperationalError:  # made between the check and the open, not yet a database
            return None


def history_stores(config: Config) -> tuple[HistoryStore, ...]:
    """The stores of the job's recording outputs that keep a history (those with `clips:`)."""
    return tuple(HistoryStore(output_name(i, out.kind), os.path.join(out.folder, DB))
                 for i, out in recordings(config) if out.clips is not None)  # fmt: skip
