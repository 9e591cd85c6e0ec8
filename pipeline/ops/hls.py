"""`GET /hls/<source_id>/<file>`: the playlists and segments the hls outputs write, served by the
daemon's HTTP server (pipeline.ops.api routes /hls/{source_id}/{name} here) under the API's token rules.

A browser's `<video src=...>` cannot send an `Authorization` header, so with `http.token` set the
token may also come as `?token=<token>` (then the playlist is served with that query added to each
segment's line, so the player's next requests carry it too) or as the cookie `framewire_token`.
Only the names an hls output writes are served (`index.m3u8`, `segNNNNN.ts`), from the folder its
`path` template names for that source: nothing else on disk can be reached.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from urllib.parse import parse_qs, quote

from framewire.pipeline import paths

PREFIX = "/hls/"
COOKIE = "framewire_token"
_FILE = re.compile(r"^(?:[A-Za-z0-9_-]+\.m3u8|seg\d{5,}\.ts)$")
_TYPES = {".m3u8": "application/vnd.apple.mpegurl", ".ts": "video/mp2t"}


@dataclass(frozen=True)
class Answer:
    """A file to send, or an error (empty content type, the message as the body)."""

    status: int
    body: bytes
    content_type: str
    headers: dict[str, str]


def _error(status: int, message: str) -> Answer:
    return Answer(status, message.encode(), "", {})


class HlsFiles:
    """Finds a source's playlist or segment in the folders of the job's hls outputs."""

    def __init__(self, templates: Sequence[str], token: str | None) -> None:
        self.templates = tuple(templates)
        self.token = token

    def token_of(self, query: str, authorization: str | None, cookie: str | None) -> str | None:
        """The token the request carries: the bearer header, else `?token=`, else the cookie."""
        if authorization and authorization.startswith("Bearer "):
            return authorization[len("Bearer "):]
        found = parse_qs(query).get("token")
        if found:
            return found[-1]
        if cookie:
            try:
                morsel = SimpleCookie(cookie).get(COOKIE)
            except CookieError:
                return None
            return morsel.value if morsel is not None else None
        return None

    def authorised(self, given: str | None) -> bool:
        if not self.token:
            return True
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def find(self, source_id: str, name: str) -> Path | None:
        """The file, when an hls output wrote it for that source; None otherwise."""
        if not _FILE.match(name) or source_id in (".", "..") or "\\" in source_id or "\0" in source_id:
            return None
        for template in self.templates:
            folder = Path(paths.render(template, source_id)).resolve()
            candidate = folder / name
            if candidate.parent == folder and candidate.is_file():
                return candidate
        return None

    def answer(self, route: str, query: str, token: str | None) -> Answer:
        """The answer to GET `route`; an error has an empty content type and its message as the body
        (the server sends it as its JSON error)."""
        if not self.authorised(token):
            return _error(HTTPStatus.UNAUTHORIZED, "missing or wrong token (a bearer header, ?token= or the cookie)")
        source_id, name = route[len(PREFIX):].split("/")
        if not self.templates:
            return _error(HTTPStatus.NOT_FOUND, "no hls output in this job")
        path = self.find(source_id, name)
        if path is None:
            return _error(HTTPStatus.NOT_FOUND, f"no hls file {name} for source {source_id} (yet)")
        try:
            body = path.read_bytes()
        except FileNotFoundError:  # a segment the rolling window deleted just now
            return _error(HTTPStatus.NOT_FOUND, f"no hls file {name} for source {source_id} (any more)")
        suffix = path.suffix
        headers = {"Cache-Control": "no-cache" if suffix == ".m3u8" else "max-age=60"}
        if suffix == ".m3u8" and "token=" in query and token:
            body = with_token(body, token)
        return Answer(HTTPStatus.OK, body, _TYPES[suffix], headers)


def with_token(playlist: bytes, token: str) -> bytes:
    """The playlist with `?token=...` on every URI line (the segments), for a player that got the
    playlist with the token in its query and has no other way to send it."""
    query = f"?token={quote(token, safe='')}"
    lines = []
    for line in playlist.decode().splitlines():
        lines.append(line + query if line and not line.startswith("#") else line)
    return ("\n".join(lines) + "\n").encode()
