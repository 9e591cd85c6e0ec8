"""The event history: events, clips and snapshots of a `recording` output, in SQLite beside them.

One writer (the output, in its worker) and any number of readers (the HTTP API's routes open their
own `History` read-only: `History.open(path, readonly=True)`). WAL mode: readers never block the
writer, and a transaction cut short by a SIGKILL is rolled back at the next open, so the store is
always as of its last commit. Each clip is a row from the moment its file is created (`writing`),
so a clip cut short by a crash is found at the next start and kept as `cut` (it plays up to the
crash: media.remux), with its size as found.

Queries (`events`, `clips`) filter by source, label, line or zone and a time range (wall clock,
epoch seconds: `since` inclusive, `until` exclusive) and come in pages, newest first: a `Page`'s
`next` is the cursor that gives the following page.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS clips (
  id INTEGER PRIMARY KEY, source TEXT NOT NULL, path TEXT NOT NULL, state TEXT NOT NULL,
  start_wall REAL NOT NULL, end_wall REAL, start_s REAL NOT NULL, end_s REAL,
  frames INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS clips_by_source ON clips (source, start_wall);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY, source TEXT NOT NULL, event TEXT NOT NULL, label TEXT, place TEXT,
  track_id INTEGER, wall REAL NOT NULL, time_s REAL, clip_id INTEGER REFERENCES clips (id) ON DELETE SET NULL,
  data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_source ON events (source, wall);
CREATE INDEX IF NOT EXISTS events_by_wall ON events (wall);
CREATE TABLE IF NOT EXISTS snapshots (
  id INTEGER PRIMARY KEY, event_id INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
  source TEXT NOT NULL, path TEXT NOT NULL, bytes INTEGER NOT NULL, wall REAL NOT NULL, score REAL);
CREATE INDEX IF NOT EXISTS snapshots_by_event ON snapshots (event_id);
"""

DB = "events.db"
"""The store's file name in its recording output's folder."""
WRITING, DONE, CUT = "writing", "done", "cut"
MAX_PAGE = 500


@dataclass(frozen=True)
class Page:
    """One page of a query, newest first; `next`: pass it as `before` for the page after, None at the end."""

    items: list[dict[str, Any]]
    next: int | None


@dataclass
class Pruned:
    """What one retention pass deleted."""

    clips: list[str] = field(default_factory=list)
    snapshots: list[str] = field(default_factory=list)
    events: int = 0

    @property
    def paths(self) -> list[str]:
        return self.clips + self.snapshots


class History:
    """The store; `open` it, query or write it, `close` it."""

    def __init__(self, db: sqlite3.Connection, path: str) -> None:
        self.db = db
        self.path = path

    @classmethod
    def open(cls, path: str, *, readonly: bool = False) -> History:
        """Open (or make) the store; a writer also takes over what a killed run left (`recover`)."""
        if readonly:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5, check_same_thread=False)
        else:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            db = sqlite3.connect(path, timeout=5, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(SCHEMA)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA foreign_keys=ON")
        history = cls(db, path)
        if not readonly:
            history.recover()
        return history

    def close(self) -> None:
        self.db.close()

    def recover(self) -> list[int]:
        """Clips still `writing` (their writer was killed): `cut` with the size of their file, or
        gone when it never reached the disk. Returns the ids of those kept."""
        kept = []
        with self._tx():
            for row in self.db.execute("SELECT id, path FROM clips WHERE state = ?", (WRITING,)).fetchall():
                size = _size(row["path"])
                if size:
                    self.db.execute(
                        "UPDATE clips SET state = ?, bytes = ? WHERE id = ?", (CUT, size, row["id"])
                    )
                    kept.append(int(row["id"]))
                else:
                    self.db.execute("DELETE FROM clips WHERE id = ?", (row["id"],))
        return kept

    # --- writing ---------------------------------------------------------------------------------

    def add_event(self, event: Mapping[str, Any], clip_id: int | None = None) -> int:
        """An event as the outputs announce it (stages.outputs.events); returns its id."""
        place = event.get("line") or event.get("zone")
        track = event.get("track_id")
        cur = self.db.execute(
            "INSERT INTO events (source, event, label, place, track_id, wall, time_s, clip_id, data) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (str(event.get("source")), str(event.get("event")), _text(event.get("label")), _text(place),
             track if isinstance(track, int) else None, float(event.get("wall") or time.time()),
             _number(event.get("time")), clip_id, json.dumps(dict(event), default=str)),
        )  # fmt: skip
        return int(cur.lastrowid or 0)

    def start_clip(self, source: str, path: str, start_wall: float, start_s: float) -> int:
        cur = self.db.execute(
            "INSERT INTO clips (source, path, state, start_wall, start_s) VALUES (?, ?, ?, ?, ?)",
            (source, path, WRITING, start_wall, start_s),
        )
        return int(cur.lastrowid or 0)

    def link(self, event_id: int, clip_id: int) -> None:
        """The event is in the clip (it opened or extended it)."""
        self.db.execute("UPDATE events SET clip_id = ? WHERE id = ?", (clip_id, event_id))

    def finish_clip(self, clip_id: int, end_wall: float, end_s: float, frames: int, size: int) -> None:
        self.db.execute(
            "UPDATE clips SET state = ?, end_wall = ?, end_s = ?, frames = ?, bytes = ? WHERE id = ?",
            (DONE, end_wall, end_s, frames, size, clip_id),
        )

    def put_snapshot(self, event_id: int, source: str, path: str, score: float | None = None) -> None:
        """The event's snapshot (a second one for the same event replaces the first: `pick: best`)."""
        with self._tx():
            self.db.execute("DELETE FROM snapshots WHERE event_id = ?", (event_id,))
            self.db.execute(
                "INSERT INTO snapshots (event_id, source, path, bytes, wall, score) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (event_id, source, path, _size(path), time.time(), score),
            )

    # --- reading ---------------------------------------------------------------------------------

    def events(
        self, *, source: str | None = None, label: str | None = None, place: str | None = None,
        event: str | None = None, since: float | None = None, until: float | None = None,
        before: int | None = None, limit: int = 50,
    ) -> Page:  # fmt: skip
        """Events, newest first, with their clip's path and their snapshot's (or None)."""
        where, args = _filters(source=source, label=label, place=place, event=event)
        where, args = _range(where, args, "e.wall", since, until, before, "e.id")
        sql = (
            "SELECT e.id, e.source, e.event, e.label, e.place, e.track_id, e.wall, e.time_s, e.clip_id, "
            "c.path AS clip, s.path AS snapshot, e.data FROM events e LEFT JOIN clips c ON c.id = e.clip_id "
            f"LEFT JOIN snapshots s ON s.event_id = e.id {_where(where)} ORDER BY e.id DESC LIMIT ?"
        )
        rows = [dict(r) for r in self.db.execute(sql, (*args, _limit(limit) + 1))]
        for row in rows:
            row["data"] = json.loads(row["data"])
        return _page(rows, limit)

    def clips(
        self, *, source: str | None = None, since: float | None = None, until: float | None = None,
        state: str | None = None, before: int | None = None, limit: int = 50,
    ) -> Page:  # fmt: skip
        """Clips whose start is in the range, newest first, with the ids of their events."""
        where, args = _filters(source=source, state=state, table="c")
        where, args = _range(where, args, "c.start_wall", since, until, before, "c.id")
        sql = f"SELECT c.* FROM clips c {_where(where)} ORDER BY c.id DESC LIMIT ?"
        rows = [dict(r) for r in self.db.execute(sql, (*args, _limit(limit) + 1))]
        for row in rows:
            row["events"] = [
                r[0]
                for r in self.db.execute("SELECT id FROM events WHERE clip_id = ? ORDER BY id", (row["id"],))
            ]
        return _page(rows, limit)

    # --- retention -------------------------------------------------------------------------------

    def prune(
        self, source: str, *, days: float | None, max_bytes: int | None, now: float | None = None
    ) -> Pruned:
        """Delete the source's oldest clips (never one being written), snapshots and events past
        `days`, then the oldest clips and snapshots while their bytes exceed `max_bytes`; the files too."""
        now = time.time() if now is None else now
        pruned = Pruned()
        items = self._media(source)  # oldest first: (wall, kind, id, path, bytes)
        total = sum(item[4] for item in items)
        for wall, kind, row_id, path, size in items:
            old = days is not None and wall < now - days * 86400
            if not old and (max_bytes is None or total <= max_bytes):
                break
            self._delete(kind, row_id, path, pruned)
            total -= size
        if days is not None:
            with self._tx():
                cur = self.db.execute(
                    "DELETE FROM events WHERE source = ? AND wall < ? AND (clip_id IS NULL OR clip_id NOT IN "
                    "(SELECT id FROM clips WHERE state = ?))", (source, now - days * 86400, WRITING),
                )  # fmt: skip
                pruned.events += cur.rowcount
        return pruned

    def _media(self, source: str) -> list[tuple[float, str, int, str, int]]:
        clips = self.db.execute(
            "SELECT start_wall, id, path, bytes FROM clips WHERE source = ? AND state != ?", (source, WRITING)
        ).fetchall()
        shots = self.db.execute(
            "SELECT wall, id, path, bytes FROM snapshots WHERE source = ?", (source,)
        ).fetchall()
        items = [(r[0], "clip", r[1], r[2], r[3]) for r in clips] + [
            (r[0], "snapshot", r[1], r[2], r[3]) for r in shots
        ]
        return sorted(items)

    def _delete(self, kind: str, row_id: int, path: str, pruned: Pruned) -> None:
        table = "clips" if kind == "clip" else "snapshots"
        with self._tx():
            self.db.execute(f"DELETE FROM {table} WHERE id = ?", (row_id,))
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        (pruned.clips if kind == "clip" else pruned.snapshots).append(path)

    def _tx(self) -> sqlite3.Connection:
        """`with self._tx():` one transaction (the connection autocommits otherwise)."""
        return _Transaction(self.db)  # type: ignore[return-value]


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind: object, *rest: object) -> None:
        self.db.execute("ROLLBACK" if kind is not None else "COMMIT")


def _filters(*, table: str = "e", **values: str | None) -> tuple[list[str], list[Any]]:
    where = [f"{table}.{name} = ?" for name, value in values.items() if value is not None]
    return where, [value for value in values.values() if value is not None]


def _range(
    where: list[str], args: list[Any], column: str, since: float | None, until: float | None,
    before: int | None, id_column: str,
) -> tuple[list[str], list[Any]]:  # fmt: skip
    for clause, value in ((f"{column} >= ?", since), (f"{column} < ?", until), (f"{id_column} < ?", before)):
        if value is not None:
            where, args = [*where, clause], [*args, value]
    return where, args


def _where(clauses: Iterable[str]) -> str:
    clauses = list(clauses)
    return f"WHERE {' AND '.join(clauses)}" if clauses else ""


def _limit(limit: int) -> int:
    return max(1, min(int(limit), MAX_PAGE))


def _page(rows: list[dict[str, Any]], limit: int) -> Page:
    limit = _limit(limit)
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, int(rows[-1]["id"]) if more and rows else None)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
