"""HTTP on localhost: `/metrics` (Prometheus), liveness and readiness, and the control API.

    GET    /metrics            Prometheus text format (prometheus_client)
    GET    /livez              {"live": bool}: 503 when the hub loop has stopped turning (restart me)
    GET    /readyz             {"ready": bool, "reason": ...}: 503 while starting, waiting for
                               workers, or stopping (send me no work, but do not restart me)
    GET    /healthz            {"live": bool, "ready": bool}; 503 unless both
    GET    /sources            the sources (ended and failed ones too, until removed) and their state
    POST   /sources            add a source: a JSON object with the keys of a `sources:` item
    DELETE /sources/<id>       stop reading a source (its outputs flush and close); an ended one: forget it
    POST   /drain              stop reading every source, finish what is in flight, exit
    POST   /stop               stop now (frames in flight are not finished)

HEAD works wherever GET does, and a query string is ignored (`/metrics?x=1`, a probe's cache buster).
The control endpoints need `Authorization: Bearer <token>` when `http.token` is set. The server
threads never touch the supervisor's state: a command is queued, the hub loop runs it between two
messages and hands the answer back.
"""

from __future__ import annotations

import hmac
import json
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from framewire.pipeline.ops.metrics import CONTENT_TYPE, Metrics

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
COMMAND_TIMEOUT_S = 10.0


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
    ) -> None:
        self.metrics = metrics
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


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "framewire"
    protocol_version = "HTTP/1.1"
    head = False

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)

    @property
    def route(self) -> str:
        """The path without its query string, percent-decoded."""
        return unquote(urlsplit(self.path).path)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not self.head:
            self.wfile.write(body)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ValueError(f"body of {length} bytes is over {MAX_BODY}")
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else None

    def _control(self, action: str, body: Any = None) -> None:
        control = self.server.control
        if not control.authorised(self.headers.get("Authorization")):
            self._json(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong bearer token"})
            return
        command = control.submit(action, body)
        self._json(command.status, command.reply)

    def _probe(self, keys: tuple[str, ...]) -> None:
        state = self.server.control.health()
        ok = all(state.get(k, False) for k in keys)
        shown = {k: v for k, v in state.items() if k in keys or (k == "reason" and not ok and "ready" in keys)}
        self._json(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, shown)

    def do_GET(self) -> None:
        route = self.route
        if route == "/metrics":
            self._send(HTTPStatus.OK, self.server.control.metrics.render().encode(), CONTENT_TYPE)
        elif route == "/livez":
            self._probe(("live",))
        elif route == "/readyz":
            self._probe(("ready",))
        elif route == "/healthz":
            self._probe(("live", "ready"))
        elif route == "/sources":
            self._control("list")
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {route}"})

    def do_HEAD(self) -> None:
        self.head = True
        self.do_GET()

    def do_POST(self) -> None:
        try:
            body = self._body()
        except (ValueError, UnicodeDecodeError) as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"body is not JSON: {exc}"})
            return
        route = self.route
        if route == "/sources":
            self._control("add", body)
        elif route in ("/drain", "/stop"):
            self._control(route.lstrip("/"))
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {route}"})

    def do_DELETE(self) -> None:
        route = self.route
        if route.startswith("/sources/") and len(route) > len("/sources/"):
            self._control("remove", route[len("/sources/") :])
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {route}"})
