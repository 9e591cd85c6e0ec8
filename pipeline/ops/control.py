"""HTTP on localhost: `/metrics` (Prometheus), liveness and readiness, and the control API.

    GET    /metrics            Prometheus text format (prometheus_client)
    GET    /livez              {"live": bool}: 503 when the hub loop has stopped turning (restart me)
    GET    /readyz             {"ready": bool, "reason": ...}: 503 while starting, waiting for
                               workers, or stopping (send me no work, but do not restart me)
    GET    /healthz            {"live": bool, "ready": bool}; 503 unless both
    GET    /sources            the sources (ended and failed ones too, until removed) and their state
    POST   /sources            add a source: a JSON object with the keys of a `sources:` item
    DELETE /sources/<id>       stop reading a source (its outputs flush and close); an ended one: forget it
    GET    /hls/<id>/<file>    an hls output's playlist (index.m3u8) and segments (pipeline.ops.hls)
    POST   /drain              stop reading every source, finish what is in flight, exit
    POST   /stop               stop now (frames in flight are not finished)
    GET    /, /console/...     the web console and its data (pipeline.ops.console)

HEAD works wherever GET does, and a query string is ignored (`/metrics?x=1`, a probe's cache buster).
The control endpoints need `Authorization: Bearer <token>` when `http.token` is set. The server
threads never touch the supervisor's state: a command is queued, the hub loop runs it between two
messages and hands the answer back.

Every error is JSON, `{"error": "one line"}`: 404 for a path that is not listed above, 405 with an
`Allow` header for a method the path does not take (OPTIONS answers 204 with that header), 401 for
a missing or wrong token, 400 for a body that is not JSON or a source the config would refuse, 413
for a body over MAX_BODY (1 MiB), refused on its Content-Length before any of it is read, 411 for a
body without one (chunked), 501 for a method HTTP does not know.
"""

from __future__ import annotations

import hmac
import json
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from framewire.pipeline.ops import hls
from framewire.pipeline.ops.console import Console, console_route
from framewire.pipeline.ops.metrics import CONTENT_TYPE, Metrics

log = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024
"""The largest request body read (a `sources:` item is well under 1 KiB); larger ones get 413."""
COMMAND_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0
"""A client that stalls mid-request (or idles on a kept-alive connection) is dropped after this."""
DISCARD_BYTES = 64 * 1024 * 1024
DISCARD_S = 2.0
"""After refusing a body it did not read, the server drops what the client still sends, up to this
much for this long, before it closes: closing on unread data resets the connection, and a client
still sending its body (urllib, requests) would lose the answer to the reset before reading it."""

ROUTES: dict[str, tuple[str, ...]] = {
    "/metrics": ("GET", "HEAD"),
    "/livez": ("GET", "HEAD"),
    "/readyz": ("GET", "HEAD"),
    "/healthz": ("GET", "HEAD"),
    "/sources": ("GET", "HEAD", "POST"),
    "/sources/<id>": ("DELETE",),
    "/drain": ("POST",),
    "/stop": ("POST",),
}
"""Each path and the methods it takes (the module's docstring says what they do)."""


PROBES = {"/livez": ("live",), "/readyz": ("ready",), "/healthz": ("live", "ready")}
"""What each probe checks of the health state."""


def allowed_methods(route: str) -> tuple[str, ...]:
    """The methods `route` takes; () where there is no such path."""
    if console_route(route) or hls.is_route(route):
        return ("GET", "HEAD")
    if route.startswith("/sources/"):
        source_id = route[len("/sources/"):]
        return ROUTES["/sources/<id>"] if source_id and "/" not in source_id else ()
    return ROUTES.get(route, ())


@dataclass
class Command:
    """A request for the hub loop; `reply` is filled in by it."""

    action: str
    body: Any = None
    status: int = HTTPStatus.OK
    reply: Any = None
    done: threading.Event = field(default_factory=threading.Event)

    def answer(self, status: int, reply: Any) -> None:
        self.status, self.reply = status, reply
        self.done.set()


class ControlServer:
    """The HTTP server thread. `health()` must be cheap and thread-safe; commands go to `commands`."""

    def __init__(
        self,
        host: str,
        port: int,
        token: str | None,
        metrics: Metrics,
        health: Callable[[], dict[str, Any]],
        *,
        console: Console | None = None,
        hls_folders: tuple[str, ...] = (),
    ) -> None:
        self.metrics = metrics
        self.console = console
        self.hls = hls.HlsFiles(hls_folders, token)
        self.health = health
        self.token = token
        self.commands: queue.Queue[Command] = queue.Queue()
        self.httpd = _Server((host, port), _Handler)
        self.httpd.control = self
        self.address = self.httpd.server_address
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="framewire-http", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.address[0], self.address[1]
        if isinstance(host, bytes):
            host = host.decode()
        return f"http://{host}:{port}"

    def start(self) -> None:
        self._thread.start()
        log.info("http: metrics, health and control on %s", self.url)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
        while True:  # nobody will run what is still queued: say so
            try:
                self.commands.get_nowait().answer(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "stopping"})
            except queue.Empty:
                break

    def submit(self, action: str, body: Any = None) -> Command:
        command = Command(action, body)
        self.commands.put(command)
        if not command.done.wait(COMMAND_TIMEOUT_S):
            command.status, command.reply = HTTPStatus.SERVICE_UNAVAILABLE, {"error": "the daemon did not answer"}
        return command

    def authorised(self, header: str | None) -> bool:
        if not self.token:
            return True
        expected = f"Bearer {self.token}"
        return header is not None and hmac.compare_digest(header.encode(), expected.encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    control: ControlServer


class _Refused(Exception):
    """An error answer, raised where it is found and sent by `_Handler.dispatch`."""

    def __init__(self, status: int, error: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.headers = status, error, headers or {}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "framewire"
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT_S
    unread = 0
    """Body bytes the client announced and the handler has not read; -1: unknown (chunked)."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)

    @property
    def route(self) -> str:
        """The path without its query string, percent-decoded."""
        return unquote(urlsplit(self.path).path)

    # Every method HTTP defines comes to `dispatch`, which answers 405 where a path does not take it;
    # a method it does not define reaches the base class, whose 501 `send_error` writes as JSON.
    def do_GET(self) -> None:
        self.dispatch("GET")

    def do_HEAD(self) -> None:
        self.dispatch("HEAD")

    def do_POST(self) -> None:
        self.dispatch("POST")

    def do_DELETE(self) -> None:
        self.dispatch("DELETE")

    def do_PUT(self) -> None:
        self.dispatch("PUT")

    def do_PATCH(self) -> None:
        self.dispatch("PATCH")

    def do_OPTIONS(self) -> None:
        self.dispatch("OPTIONS")

    def do_TRACE(self) -> None:
        self.dispatch("TRACE")

    def do_CONNECT(self) -> None:
        self.dispatch("CONNECT")

    def dispatch(self, method: str) -> None:
        """Route one request; every answer, error or not, is sent from here."""
        try:
            self.unread = self._announced_length()
            route = self.route
            allowed = allowed_methods(route)
            if not allowed:
                raise _Refused(HTTPStatus.NOT_FOUND, f"no such endpoint: {route}")
            allow = {"Allow": ", ".join((*allowed, "OPTIONS"))}
            if method == "OPTIONS":
                self._send(HTTPStatus.NO_CONTENT, b"", None, allow)
            elif method not in allowed:
                refusal = f"{method} is not allowed on {route}: it takes {', '.join(allowed)}"
                raise _Refused(HTTPStatus.METHOD_NOT_ALLOWED, refusal, allow)
            else:
                self._serve(method, route)
        except _Refused as refused:
            self._json(refused.status, {"error": refused.error}, refused.headers)
        except Exception as exc:  # a bug here must not take the server thread down unanswered
            log.exception("http: %s %s failed", method, self.path)
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"})
        self._drop_unread()

    def _serve(self, method: str, route: str) -> None:
        if method in ("GET", "HEAD"):
            if console_route(route):
                self._console(route)
            elif route == "/metrics":
                self._send(HTTPStatus.OK, self.server.control.metrics.render().encode(), CONTENT_TYPE)
            elif hls.is_route(route):
                self._hls(route)
            elif route == "/sources":
                self._control("list")
            else:
                self._probe(PROBES[route])
        elif method == "DELETE":
            self._control("remove", route[len("/sources/"):])
        elif route == "/sources":
            self._control("add", body=True)
        else:
            self._control(route.lstrip("/"))

    def _control(self, action: str, source: str | None = None, *, body: bool = False) -> None:
        control = self.server.control
        if not control.authorised(self.headers.get("Authorization")):
            raise _Refused(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
        command = control.submit(action, self._body() if body else source)
        self._json(command.status, command.reply)

    def _console(self, route: str) -> None:
        control = self.server.control
        if control.console is None:
            raise _Refused(HTTPStatus.NOT_FOUND, f"the web console is off (http.console.enabled): {route}")
        answer = control.console.answer(route, self.path, control.authorised(self.headers.get("Authorization")))
        self._send(answer.status, answer.body, answer.content_type, answer.headers)

    def _hls(self, route: str) -> None:
        files, query = self.server.control.hls, urlsplit(self.path).query
        token = files.token_of(query, self.headers.get("Authorization"), self.headers.get("Cookie"))
        found = files.answer(route, query, token)
        if not found.content_type:
            raise _Refused(found.status, found.body.decode())
        self._send(found.status, found.body, found.content_type, found.headers)

    def _probe(self, keys: tuple[str, ...]) -> None:
        state = self.server.control.health()
        ok = all(state.get(k, False) for k in keys)
        shown = {k: v for k, v in state.items() if k in keys or (k == "reason" and not ok and "ready" in keys)}
        self._json(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, shown)

    # --- bodies -------------------------------------------------------------------------------------

    def _announced_length(self) -> int:
        """The body's length from its headers, refused when it is too long or cannot be known."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.unread = -1
            raise _Refused(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length header, not chunked")
        text = self.headers.get("Content-Length")
        try:
            length = int(text) if text else 0
            if length < 0:
                raise ValueError
        except ValueError:
            self.unread = -1
            raise _Refused(HTTPStatus.BAD_REQUEST, f"Content-Length is not a length: {text!r}") from None
        if length > MAX_BODY:
            self.unread = length
            too_large = f"the body of {length} bytes is over the limit of {MAX_BODY}"
            raise _Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, too_large)
        return length

    def _body(self) -> Any:
        """The request's JSON body (None when empty)."""
        length, self.unread = self.unread, 0
        try:
            raw = self.rfile.read(length) if length else b""
        except OSError as exc:
            self.close_connection = True
            raise _Refused(HTTPStatus.BAD_REQUEST, f"the body could not be read: {exc}") from None
        if len(raw) < length:
            self.close_connection = True
            raise _Refused(HTTPStatus.BAD_REQUEST, f"the body ended after {len(raw)} of {length} bytes")
        try:
            return json.loads(raw) if raw else None
        except (ValueError, UnicodeDecodeError) as exc:
            raise _Refused(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {exc}") from None

    def _drop_unread(self) -> None:
        """A body left unread: a small one is read and dropped (the connection can go on); past that
        the answer said `Connection: close`, and the rest is drained for a moment (DISCARD_S)."""
        unread, self.unread = self.unread, 0
        if unread == 0:
            return
        try:
            if 0 < unread <= MAX_BODY:
                self.rfile.read(unread)
                return
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)  # the answer is complete: the client reads it now
            self.connection.settimeout(DISCARD_S / 4)
            deadline, left = time.monotonic() + DISCARD_S, DISCARD_BYTES
            while left > 0 and time.monotonic() < deadline:
                chunk = self.rfile.read1(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass
        self.close_connection = True

    def handle_expect_100(self) -> bool:
        """`Expect: 100-continue` (curl, for bodies over 1 MiB): a body over the limit is refused
        before the client sends any of it."""
        try:
            self._announced_length()
        except _Refused as refused:
            if refused.status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE:
                self.unread = 0  # none of it was sent
                self._json(refused.status, {"error": refused.error}, {"Connection": "close"})
                return False
        self.unread = 0
        return super().handle_expect_100()

    # --- answers ------------------------------------------------------------------------------------

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The base class's own errors (a malformed request, an unknown method) in JSON too."""
        if code == HTTPStatus.NOT_IMPLEMENTED:
            message = f"{self.command} is not an HTTP method this server knows"
        self.log_error("code %d, message %s", code, message)
        self._json(code, {"error": message or HTTPStatus(code).phrase}, {"Connection": "close"})

    def _send(
        self, status: int, body: bytes, content_type: str | None, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        if status != HTTPStatus.NO_CONTENT:
            self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.unread < 0 or self.unread > MAX_BODY:
            self.send_header("Connection", "close")  # what is left of the body is not read
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", headers)
