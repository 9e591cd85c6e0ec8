"""The recording outputs' event history over HTTP (pipeline.ops.api routes these paths here):

    GET /events?source=&label=&place=&event=&since=&until=&before=&limit=&output=
                                  events, newest first, in pages (`next`: pass it as `before`), each
                                  with `clip_url` and `snapshot_url` (None when it has none)
    GET /clips?source=&state=&since=&until=&before=&limit=&output=
                                  clips whose start is in the range, newest first, each with its `url`
    GET /clips/<id>?output=       the clip's MP4: video/mp4, Range requests answered (206), so a
                                  browser's <video> seeks
    GET /snapshots/<event id>     the event's snapshot JPEG

`since` and `until` are epoch seconds (since inclusive, until exclusive); `place` is a line's or a
zone's name (`line=` and `zone=` say the same). `output` names a recording output by its stage name
(`output2.recording`); without it, the job's first. Each page lists them all in `outputs`. The lists follow the control API's token rule;
the files take the token as the hls files do (the header, `?token=` or the cookie), since <video>
and <img> cannot send a header. Only files the store lists are served.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, quote

from framewire.pipeline.plan import EventStore

EVENTS = "/events"
CLIPS = "/clips"
CLIP = "/clips/{clip_id}"
SNAPSHOT = "/snapshots/{event_id}"
NUMBERS = ("since", "until")
COUNTS = ("before", "limit")
MP4, JPEG = "video/mp4", "image/jpeg"


class Refusal(Exception):
    """A question the history cannot answer: its status and one line."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status, self.error = status, error


@dataclass(frozen=True)
class Found:
    """A file to send: its path and content type."""

    path: str
    content_type: str


def clip_url(output: str, clip_id: int) -> str:
    """The clip's path on the HTTP server (its recording output's announcements carry it)."""
    return f"{CLIPS}/{clip_id}?output={quote(output, safe='')}"


def snapshot_url(output: str, event_id: int) -> str:
    return f"/snapshots/{event_id}?output={quote(output, safe='')}"


class Recordings:
    """Answers the history's routes from the job's stores (none: every route says there is none)."""

    def __init__(self, stores: Sequence[EventStore]) -> None:
        self.stores = tuple(stores)

    def events(self, query: str) -> dict[str, Any]:
        store, filters = self._asked(query, ("source", "label", "place", "event"))
        items, cursor = store.events(filters)
        for item in items:
            item["clip_url"] = clip_url(store.name, item["clip_id"]) if item.get("clip_id") else None
            item["snapshot_url"] = snapshot_url(store.name, item["id"]) if item.get("snapshot") else None
        return {"output": store.name, "outputs": self.names(), "events": items, "next": cursor}

    def clips(self, query: str) -> dict[str, Any]:
        store, filters = self._asked(query, ("source", "state"))
        items, cursor = store.clips(filters)
        for item in items:
            item["url"] = clip_url(store.name, item["id"])
        return {"output": store.name, "outputs": self.names(), "clips": items, "next": cursor}

    def names(self) -> list[str]:
        """The stage names of the job's recording outputs with a history, in the config's order."""
        return [store.name for store in self.stores]

    def clip(self, clip_id: str, query: str) -> Found:
        store = self._store(_values(query).get("output"))
        path = store.clip_file(_id(clip_id, "clip"))
        return _found(path, MP4, f"no clip {clip_id} in {store.name}")

    def snapshot(self, event_id: str, query: str) -> Found:
        store = self._store(_values(query).get("output"))
        path = store.snapshot_file(_id(event_id, "event"))
        return _found(path, JPEG, f"no snapshot of event {event_id} in {store.name}")

    def _asked(self, query: str, text: tuple[str, ...]) -> tuple[EventStore, dict[str, Any]]:
        values = _values(query)
        if "place" not in values:
            for alias in ("line", "zone"):
                if alias in values:
                    values["place"] = values.pop(alias)
        unknown = sorted(set(values) - {*text, *NUMBERS, *COUNTS, "output", "token"})
        if unknown:
            raise Refusal(HTTPStatus.BAD_REQUEST, f"{unknown[0]}: not a filter here (takes "
                          f"{', '.join((*text, *NUMBERS, *COUNTS, 'output'))})")  # fmt: skip
        filters: dict[str, Any] = {key: values[key] for key in text if key in values}
        for key in NUMBERS:
            if key in values:
                filters[key] = _number(key, values[key])
        for key in COUNTS:
            if key in values:
                filters[key] = _count(key, values[key])
        return self._store(values.get("output")), filters

    def _store(self, name: str | None) -> EventStore:
        if not self.stores:
            raise Refusal(HTTPStatus.NOT_FOUND, "no recording output with clips in this job")
        if name is None:
            return self.stores[0]
        for store in self.stores:
            if store.name == name:
                return store
        names = ", ".join(s.name for s in self.stores)
        raise Refusal(HTTPStatus.NOT_FOUND, f"output: no recording output {name!r} (there is {names})")


def _values(query: str) -> dict[str, str]:
    return {key: found[-1] for key, found in parse_qs(query, keep_blank_values=True).items()}


def _number(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise Refusal(HTTPStatus.BAD_REQUEST, f"{key}: {text!r} is not a time (seconds since the epoch)")
    return value


def _count(key: str, text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise Refusal(HTTPStatus.BAD_REQUEST, f"{key}: {text!r} is not a whole number above 0")
    return int(text)


def _id(text: str, what: str) -> int:
    if not text.isdigit():
        raise Refusal(HTTPStatus.NOT_FOUND, f"no {what} {text!r}: ids are whole numbers")
    return int(text)


def _found(path: str | None, content_type: str, missing: str) -> Found:
    if path is None or not os.path.isfile(path):
        raise Refusal(HTTPStatus.NOT_FOUND, missing + ("" if path is None else " (its file is gone)"))
    return Found(path, content_type)
