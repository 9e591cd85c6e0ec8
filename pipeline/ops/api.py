"""The HTTP API as an ASGI application: Starlette's router and requests, served by uvicorn
(pipeline.ops.control runs it; docs/reference/http-api.md lists the routes).

Each route takes the methods ROUTES gives it; every other method HTTP defines is answered 405 with an
`Allow` header (OPTIONS: 204 with that header), a method HTTP does not define 501, a path not listed
404. Before any route runs, a body is refused on its headers: 411 without a Content-Length (chunked),
413 over MAX_BODY. Every error is JSON, `{"error": "one line"}`, also for a handler that fails (500,
logged). A render of /metrics (under its lock) and the files run on Starlette's thread pool, so the event
loop keeps serving; the waits (a command's answer from the hub loop, a preview's next frame, up to
2 s; an event stream) are on the loop itself and hold no thread, since the pool has 40 and every
viewer of every source keeps one long poll open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Route, Router
from starlette.types import Receive, Scope, Send

from framewire.pipeline.ops import hls, recordings
from framewire.pipeline.ops.console import (EVENTS, PREVIEW, PREVIEW_WAIT_S, STATIC, STATS, Console,
                                            preview_answer, query_number)  # fmt: skip
from framewire.pipeline.ops.metrics import CONTENT_TYPE, Metrics

log = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024
"""The largest request body read (a `sources:` item is well under 1 KiB); larger ones get 413."""
KNOWN_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
EVENTS_POLL_S = 0.25
"""How often an event stream looks for a new snapshot (the hub publishes one every 0.5 s)."""

Handler = Callable[[Request], Awaitable[Response]]


class Commands(Protocol):
    """What the routes need of the server (pipeline.ops.control.ControlServer)."""

    metrics: Metrics
    console: Console | None
    hls: hls.HlsFiles
    recordings: recordings.Recordings
    health: Callable[[], dict[str, Any]]
    openapi: Callable[[], bytes] | None
    closing: threading.Event

    async def submit_async(self, action: str, body: Any = None) -> Any: ...

    def authorised(self, header: str | None) -> bool: ...


class Refused(Exception):
    """An error answer, raised where it is found and sent as JSON by the outermost layer."""

    def __init__(self, status: int, error: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.headers = status, error, headers or {}


def answer(
    status: int, body: bytes, content_type: str | None, headers: dict[str, str] | None = None
) -> Response:
    return Response(body, status, headers, content_type)


def json_answer(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    """JSON as the API has always written it (`json.dumps`' separators: `{"error": "..."}`)."""
    return answer(status, json.dumps(payload).encode(), "application/json", headers)


ROUTES: dict[str, tuple[str, ...]] = {
    "/metrics": ("GET", "HEAD"),
    "/livez": ("GET", "HEAD"),
    "/readyz": ("GET", "HEAD"),
    "/healthz": ("GET", "HEAD"),
    "/sources": ("GET", "HEAD", "POST"),
    "/sources/{source_id}": ("GET", "HEAD", "PATCH", "DELETE"),
    "/model": ("GET", "HEAD", "POST"),
    "/drain": ("POST",),
    "/stop": ("POST",),
    "/openapi.json": ("GET", "HEAD"),
    "/hls/{source_id}/{name}": ("GET", "HEAD"),
    recordings.EVENTS: ("GET", "HEAD"),
    recordings.CLIPS: ("GET", "HEAD"),
    recordings.CLIP: ("GET", "HEAD"),
    recordings.SNAPSHOT: ("GET", "HEAD"),
    STATS: ("GET", "HEAD"),
    EVENTS: ("GET",),
    PREVIEW + "{source_id}": ("GET", "HEAD"),
    **{path: ("GET", "HEAD") for path in STATIC},
}
"""Each path (Starlette's pattern) and the methods it takes, in the order `Allow` lists them."""

PROBES = {"/livez": ("live",), "/readyz": ("ready",), "/healthz": ("live", "ready")}
"""What each probe checks of the health state."""


def build(control: Commands) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The ASGI application of `control`'s routes, behind the method and body-size checks."""
    handlers = _Handlers(control).table()
    routes = [Route(path, _methods(path, methods, handlers[path]), methods=KNOWN_METHODS)
              for path, methods in ROUTES.items()]  # fmt: skip
    router = Router(routes, redirect_slashes=False, default=_not_found)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            _check_headers(scope)
            await router(scope, receive, send)
        except Refused as refused:
            await json_answer(refused.status, {"error": refused.error}, refused.headers)(scope, receive, send)
        except Exception as exc:  # a bug here must not go unanswered
            log.exception("http: %s %s failed", scope["method"], scope["path"])
            failed = {"error": f"{type(exc).__name__}: {exc}"}
            answer_500 = json_answer(HTTPStatus.INTERNAL_SERVER_ERROR, failed)
            await answer_500(scope, receive, send)

    return app


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    raise Refused(HTTPStatus.NOT_FOUND, f"no such endpoint: {scope['path']}")


def _check_headers(scope: Scope) -> None:
    """The method is one HTTP knows; a body comes with its length, within the limit."""
    method = scope["method"]
    if method not in KNOWN_METHODS:
        raise Refused(HTTPStatus.NOT_IMPLEMENTED, f"{method} is not an HTTP method this server knows",
                      {"Connection": "close"})  # fmt: skip
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise Refused(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length header, not chunked",
                      {"Connection": "close"})  # fmt: skip
    length = int(headers.get("content-length") or 0)  # h11 refused one that is not a length
    if length > MAX_BODY:
        too_large = f"the body of {length} bytes is over the limit of {MAX_BODY}"
        raise Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, too_large, {"Connection": "close"})


def _methods(path: str, methods: tuple[str, ...], handler: Handler) -> Handler:
    """`handler` for the methods `path` takes; OPTIONS and the other methods answered here."""
    allow = {"Allow": ", ".join((*methods, "OPTIONS"))}

    async def endpoint(request: Request) -> Response:
        method = request.method
        if method == "OPTIONS":
            return answer(HTTPStatus.NO_CONTENT, b"", None, allow)
        if method not in methods:
            route = request.url.path
            raise Refused(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not allowed on {route}: it takes "
                          f"{', '.join(methods)}", allow)  # fmt: skip
        return await handler(request)

    endpoint.__name__ = f"route {path}"
    return endpoint


class _Handlers:
    """The answer of each route (`table`), for one server."""

    def __init__(self, control: Commands) -> None:
        self.control = control

    def table(self) -> dict[str, Handler]:
        console_paths = [path for path in ROUTES if path in STATIC or path == STATS]
        return {
            "/metrics": self.metrics, "/openapi.json": self.openapi, "/hls/{source_id}/{name}": self.hls_file,
            "/sources": self.sources, "/sources/{source_id}": self.source, EVENTS: self.events,
            "/model": self.model,
            PREVIEW + "{source_id}": self.preview,
            recordings.EVENTS: self.history("events"), recordings.CLIPS: self.history("clips"),
            recordings.CLIP: self.history_file("clip", "clip_id"),
            recordings.SNAPSHOT: self.history_file("snapshot", "event_id"),
            "/drain": self.command("drain"), "/stop": self.command("stop"),
            **{path: self.probe(keys) for path, keys in PROBES.items()},
            **{path: self.console for path in console_paths},
        }  # fmt: skip

    async def metrics(self, request: Request) -> Response:
        text = await run_in_threadpool(self.control.metrics.render)  # under the metrics' lock
        return answer(HTTPStatus.OK, text.encode(), CONTENT_TYPE)

    def probe(self, keys: tuple[str, ...]) -> Handler:
        async def handle(request: Request) -> Response:
            state = self.control.health()
            ok = all(state.get(k, False) for k in keys)
            shown = {k: v for k, v in state.items()
                     if k in keys or (k == "reason" and not ok and "ready" in keys)}  # fmt: skip
            return json_answer(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, shown)

        return handle

    def authorise(self, request: Request) -> None:
        if not self.control.authorised(request.headers.get("authorization")):
            raise Refused(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")

    async def submit(self, action: str, argument: Any = None) -> Response:
        """Queue a command for the hub loop and wait for its answer."""
        done = await self.control.submit_async(action, argument)
        return json_answer(done.status, done.reply)

    async def sources(self, request: Request) -> Response:
        self.authorise(request)  # before the body is read
        if request.method == "POST":
            return await self.submit("add", await _json_body(request))
        return await self.submit("list")

    async def source(self, request: Request) -> Response:
        """DELETE: remove it; GET: its settings; PATCH: change them (pipeline.ops.settings)."""
        self.authorise(request)
        source_id = request.path_params["source_id"]
        if request.method == "DELETE":
            return await self.submit("remove", source_id)
        if request.method == "PATCH":
            return await self.submit("configure", (source_id, await _json_body(request)))
        return await self.submit("settings", (source_id,))

    async def model(self, request: Request) -> Response:
        """The model in use and the last swap; POST: a new version of it (pipeline.hub.swap)."""
        self.authorise(request)
        if request.method == "POST":
            return await self.submit("swap_model", await _json_body(request))
        return await self.submit("model")

    def command(self, action: str) -> Handler:
        async def handle(request: Request) -> Response:
            self.authorise(request)
            return await self.submit(action)

        return handle

    async def openapi(self, request: Request) -> Response:
        if self.control.openapi is None:
            raise Refused(HTTPStatus.NOT_FOUND, "this job has no OpenAPI document")
        return answer(HTTPStatus.OK, await run_in_threadpool(self.control.openapi), "application/json")

    async def hls_file(self, request: Request) -> Response:
        files, query = self.control.hls, request.url.query
        token = files.token_of(query, request.headers.get("authorization"), request.headers.get("cookie"))
        found = await run_in_threadpool(files.answer, request.url.path, query, token)
        if not found.content_type:
            raise Refused(found.status, found.body.decode())
        return answer(found.status, found.body, found.content_type, found.headers)

    def history(self, listing: str) -> Handler:
        """A page of the recording outputs' events or clips (pipeline.ops.recordings)."""

        async def handle(request: Request) -> Response:
            self.authorise(request)
            asked = getattr(self.control.recordings, listing)
            try:
                page = await run_in_threadpool(asked, request.url.query)
            except recordings.Refusal as refusal:
                raise Refused(refusal.status, refusal.error) from None
            return json_answer(HTTPStatus.OK, page, {"Cache-Control": "no-store"})

        return handle

    def history_file(self, kind: str, key: str) -> Handler:
        """A clip (Range requests answered: a <video> seeks) or a snapshot; the token as hls takes it."""

        async def handle(request: Request) -> Response:
            files, query = self.control.hls, request.url.query
            if not files.authorised(files.token_of(query, request.headers.get("authorization"),
                                                   request.headers.get("cookie"))):  # fmt: skip
                raise Refused(
                    HTTPStatus.UNAUTHORIZED, "missing or wrong token (a bearer header, ?token= or the cookie)"
                )
            asked = getattr(self.control.recordings, kind)
            try:
                found = await run_in_threadpool(asked, request.path_params[key], query)
            except recordings.Refusal as refusal:
                raise Refused(refusal.status, refusal.error) from None
            return FileResponse(
                found.path, media_type=found.content_type, headers={"Cache-Control": "no-cache"}
            )

        return handle

    def _console(self, request: Request) -> Console:
        if self.control.console is None:
            off = f"the web console is off (http.console.enabled): {request.url.path}"
            raise Refused(HTTPStatus.NOT_FOUND, off)
        return self.control.console

    async def console(self, request: Request) -> Response:
        console = self._console(request)
        target = request.url.path + ("?" + request.url.query if request.url.query else "")
        authorised = self.control.authorised(request.headers.get("authorization"))
        found = await run_in_threadpool(console.answer, request.url.path, target, authorised)
        return answer(found.status, found.body, found.content_type, found.headers)

    async def preview(self, request: Request) -> Response:
        """The next preview frame, waited for on the event loop (a long poll holds no thread)."""
        console = self._console(request)
        self.authorise(request)
        source = request.path_params["source_id"]
        asked = console.preview_asked(source, "?" + request.url.query)
        if not isinstance(asked, int):
            found = asked
        else:
            assert console.previews is not None
            found = preview_answer(await console.previews.next_frame(source, asked, PREVIEW_WAIT_S))
        return answer(found.status, found.body, found.content_type, found.headers)

    async def events(self, request: Request) -> Response:
        console = self._console(request)
        self.authorise(request)
        since = query_number(request.url.query, "since")
        if since is None:
            raise Refused(HTTPStatus.BAD_REQUEST, "since: not a time (seconds since the epoch)")
        stream = _stream(console, since, self.control.closing)
        headers = {"Cache-Control": "no-store"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refused(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {exc}") from None


async def _stream(console: Console, since: float, closing: threading.Event) -> Any:
    """Server-sent events: each new snapshot of the console's figures, with only the chart points
    not sent yet; ends when the server stops (a client that goes away cancels it)."""
    last = None
    while not closing.is_set():
        snapshot = console.live.snapshot
        if snapshot is not last:
            last = snapshot
            payload = console.stats(since)
            since = max([since, *(p[0] for points in payload["history"].values() for p in points)])
            yield f"event: stats\ndata: {json.dumps(payload)}\n\n"
        await asyncio.sleep(EVENTS_POLL_S)
