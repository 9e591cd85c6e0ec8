"""The web console: a page at `/` that shows the sources, their rates and previews, and adds and
removes sources through the control API.

    GET /                          the page (static: index.html, console.js, console.css, favicon)
    GET /history                   the events page (history.html, history.js): the recording outputs'
                                   events with their snapshots, filtered, a clip played (GET /events,
                                   /clips/<id>, /snapshots/<id>: pipeline.ops.recordings)
    GET /console/stats?since=T     each source's state, counts, fps and latency p50/p99 over the last
                                   seconds, and their history for the charts (ops.live): the last
                                   three minutes, or only the points after time T
    GET /console/events?since=T    the same figures as server-sent events (`event: stats`), one each
                                   time the hub publishes a new snapshot (twice a second), each with
                                   only the chart points not sent yet: what the page reads
    GET /console/preview/<id>?after=N
                                   the source's next preview frame as JPEG once there is one newer
                                   than number N (its number in `X-Frame`); 204 after a while
                                   without one. Asking keeps the encoder running (ops.preview).

The page and its files hold no data and are served to anyone; the data endpoints follow the control
API's token rule (`Authorization: Bearer <token>` when `http.token` is set): the page asks for the
token, keeps it in the tab's sessionStorage and sends it with each request. The files ship in the
wheel (package data) and need no build step; the charts are plain canvas, no library.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from framewire.pipeline.ops.live import LiveStats
from framewire.pipeline.ops.preview import Previews

STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/console/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console/console.css": ("console.css", "text/css; charset=utf-8"),
    "/console/draw.js": ("draw.js", "text/javascript; charset=utf-8"),
    "/history": ("history.html", "text/html; charset=utf-8"),
    "/console/history.js": ("history.js", "text/javascript; charset=utf-8"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
    "/favicon.ico": ("favicon.svg", "image/svg+xml"),
}
"""Path -> (file in the package's `static` folder, content type)."""
STATS = "/console/stats"
EVENTS = "/console/events"
PREVIEW = "/console/preview/"
PREVIEW_WAIT_S = 2.0


@dataclass
class Answer:
    """What the HTTP handler sends back."""

    status: int
    body: bytes
    content_type: str | None = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def error(cls, status: int, text: str) -> Answer:
        return cls(status, json.dumps({"error": text}).encode())


class Console:
    """Answers the console's paths; `live` gives the numbers, `previews` the frames (None: off)."""

    def __init__(self, live: LiveStats, previews: Previews | None) -> None:
        self.live = live
        self.previews = previews
        self._files: dict[str, bytes] = {}

    def answer(self, route: str, target: str, authorised: bool) -> Answer:
        """The answer to GET `route` (`target`: the request's path with its query string)."""
        if route in STATIC:
            name, content_type = STATIC[route]
            return Answer(HTTPStatus.OK, self._file(name), content_type, {"Cache-Control": "no-cache"})
        if not authorised:
            return Answer.error(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
        if route == STATS:
            since = query_number(urlsplit(target).query, "since")
            if since is None:
                return Answer.error(HTTPStatus.BAD_REQUEST, "since: not a time (seconds since the epoch)")
            return Answer(HTTPStatus.OK, json.dumps(self.stats(since)).encode(), headers={"Cache-Control": "no-store"})
        return self._preview(route[len(PREVIEW):], target)

    def stats(self, since: float) -> dict[str, Any]:
        """The latest figures, with the chart points after `since` only."""
        snapshot = self.live.snapshot.to_json(since)
        snapshot["previews"] = self.previews is not None
        return snapshot

    def _preview(self, source: str, target: str) -> Answer:
        asked = self.preview_asked(source, target)
        if isinstance(asked, Answer):
            return asked
        assert self.previews is not None
        return preview_answer(self.previews.wait_frame(source, asked, PREVIEW_WAIT_S))

    def preview_asked(self, source: str, target: str) -> Answer | int:
        """The frame number a preview request asks for (after it), or the answer refusing it."""
        if self.previews is None:
            return Answer.error(HTTPStatus.NOT_FOUND, "previews are off (http.console.enabled: false)")
        if source not in {s["id"] for s in self.live.snapshot.sources}:
            return Answer.error(HTTPStatus.NOT_FOUND, f"no source {source!r}")
        after = query_number(urlsplit(target).query, "after")
        if after is None or after != int(after):
            return Answer.error(HTTPStatus.BAD_REQUEST, "after: not a frame number")
        return int(after)

    def _file(self, name: str) -> bytes:
        data = self._files.get(name)
        if data is None:
            data = self._files[name] = resources.files("framewire.pipeline.ops").joinpath("static", name).read_bytes()
        return data


def preview_answer(frame: tuple[int, bytes] | None) -> Answer:
    """A preview frame as JPEG with its number in `X-Frame`; 204 when none came in time."""
    if frame is None:
        return Answer(HTTPStatus.NO_CONTENT, b"", None, {"Cache-Control": "no-store"})
    number, jpeg = frame
    return Answer(HTTPStatus.OK, jpeg, "image/jpeg", {"X-Frame": str(number), "Cache-Control": "no-store"})


def query_number(query: str, name: str) -> float | None:
    """Query parameter `name` as a finite number (0 when absent), None when it is not one."""
    values = parse_qs(query).get(name)
    if not values:
        return 0.0
    try:
        value = float(values[0])
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None
