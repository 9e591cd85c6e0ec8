"""HTTP on localhost: `/metrics` (Prometheus), liveness and readiness, and the control API.

    GET    /metrics            Prometheus text format (prometheus_client)
    GET    /livez              {"live": bool}: 503 when the hub loop has stopped turning (restart me)
    GET    /readyz             {"ready": bool, "reason": ...}: 503 while starting, waiting for
                               workers, or stopping (send me no work, but do not restart me)
    GET    /healthz            {"live": bool, "ready": bool}; 503 unless both
    GET    /sources            the sources (ended and failed ones too, until removed) and their state
    POST   /sources            add a source: a JSON object with the keys of a `sources:` item
    DELETE /sources/<id>       stop reading a source (its outputs flush and close); an ended one: forget it
    GET    /model              the model in use ({"version", "path"}) and the last swap's state
    POST   /model              a new version of the model: {"path", "version"}; its workers start beside
                               the old ones and take over (202), or 400 naming the key (pipeline.hub.swap)
    GET    /hls/<id>/<file>    an hls output's playlist (index.m3u8) and segments (pipeline.ops.hls)
    GET    /events, /clips     the recording outputs' event history, in pages (pipeline.ops.recordings)
    GET    /clips/<id>         a clip (Range requests answered), /snapshots/<event id> a snapshot
    GET    /openapi.json       the API's OpenAPI 3.1 document (built from the config's models)
    POST   /drain              stop reading every source, finish what is in flight, exit
    POST   /stop               stop now (frames in flight are not finished)
    GET    /, /console/...     the web console and its data (pipeline.ops.console)

HEAD works wherever GET does. A query string is read only where a route names its parameters
(`?since=`, `?after=`, `?token=`, the history's filters) and ignored everywhere else (`/metrics?x=1`,
a probe's cache buster). The control endpoints need `Authorization: Bearer <token>` when `http.token` is set.

The server is uvicorn (its h11 protocol, pipeline.ops.http_protocol) running the Starlette
application of pipeline.ops.api on an event loop in the `framewire-http` thread. It never touches
the supervisor's state: a command is queued, the hub loop runs it between two messages and hands
the answer back (single writer); the request waits for it on the event loop, holding no thread.

Every error is JSON, `{"error": "one line"}`: 404 for a path that is not listed above, 405 with an
`Allow` header for a method the path does not take (OPTIONS answers 204 with that header), 401 for
a missing or wrong token, 400 for a body that is not JSON, a source the config would refuse or a
request that is not HTTP, 413 for a body over MAX_BODY (1 MiB), refused on its Content-Length before
any of it is read, 411 for a body without one (chunked), 501 for a method HTTP does not know.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from framewire.pipeline.ops import hls, recordings
from framewire.pipeline.ops.console import Console
from framewire.pipeline.ops.metrics import Metrics
from framewire.pipeline.plan import EventStore

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0
"""A kept-alive connection idle for this long is closed."""
START_TIMEOUT_S = 10.0
NO_ANSWER = {"error": "the daemon did not answer"}
GRACE_S = 3.0
"""On stop, requests still being answered get this long before they are cancelled."""


@dataclass
class Command:
    """A request for the hub loop; `reply` is filled in by it."""

    action: str
    body: Any = None
    status: int = HTTPStatus.OK
    reply: Any = None
    done: threading.Event = field(default_factory=threading.Event)
    answered: Callable[[], None] | None = None
    """Called (on the hub's thread) once the answer is in: wakes a request waiting on the event loop."""

    def answer(self, status: int, reply: Any) -> None:
        self.status, self.reply = status, reply
        self.done.set()
        if self.answered is not None:
            self.answered()


class ControlServer:
    """The HTTP server thread. `health()` must be cheap and thread-safe; commands go to `commands`.
    The socket is bound here, so an address in use fails before the job starts (OSError)."""

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
        stores: tuple[EventStore, ...] = (),
        openapi: Callable[[], bytes] | None = None,
    ) -> None:
        # uvicorn and Starlette are imported by a job that serves HTTP only (every job imports this)
        import uvicorn

        from framewire.pipeline.ops import api
        from framewire.pipeline.ops.http_protocol import JsonH11Protocol

        self.metrics = metrics
        self.console = console
        self.hls = hls.HlsFiles(hls_folders, token)
        self.recordings = recordings.Recordings(stores)
        self.health = health
        self.token = token
        self.openapi = openapi
        """Makes the OpenAPI document served at /openapi.json (the layer that knows the config's)."""
        self.commands: queue.Queue[Command] = queue.Queue()
        self.closing = threading.Event()
        self._socket = _listen(host, port)
        self.address = self._socket.getsockname()[:2]
        config = uvicorn.Config(
            api.build(self), http=JsonH11Protocol, ws="none", lifespan="off", log_config=None,
            access_log=False, server_header=False, headers=[("server", "framewire")],
            timeout_keep_alive=int(REQUEST_TIMEOUT_S), timeout_graceful_shutdown=int(GRACE_S),
        )  # fmt: skip
        self._uvicorn = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="framewire-http", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._uvicorn.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        log.info("http: metrics, health and control on %s", self.url)

    def stop(self) -> None:
        self.closing.set()  # event streams end
        self._answer_queued()
        self._uvicorn.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=GRACE_S + 2)
        self._socket.close()
        self._answer_queued()

    def submit(self, action: str, body: Any = None) -> Command:
        command = Command(action, body)
        if self.closing.is_set():
            command.answer(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "stopping"})
            return command
        self.commands.put(command)
        if not command.done.wait(COMMAND_TIMEOUT_S):
            command.status, command.reply = HTTPStatus.SERVICE_UNAVAILABLE, NO_ANSWER
        return command

    async def submit_async(self, action: str, body: Any = None) -> Command:
        """`submit` for the event loop: the request waits for the hub's answer without a thread."""
        loop = asyncio.get_running_loop()
        settled: asyncio.Future[None] = loop.create_future()
        command = Command(action, body, answered=functools.partial(_wake, loop, settled))
        if self.closing.is_set():
            command.answer(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "stopping"})
            return command
        self.commands.put(command)
        try:
            await asyncio.wait_for(settled, COMMAND_TIMEOUT_S)
        except asyncio.TimeoutError:
            command.status, command.reply = HTTPStatus.SERVICE_UNAVAILABLE, NO_ANSWER
        return command

    def authorised(self, header: str | None) -> bool:
        if not self.token:
            return True
        expected = f"Bearer {self.token}"
        return header is not None and hmac.compare_digest(header.encode(), expected.encode())

    def _serve(self) -> None:
        try:
            self._uvicorn.run(sockets=[self._socket])
        except Exception:  # the daemon goes on without its API; say why
            log.exception("http: the server stopped")

    def _answer_queued(self) -> None:
        """Nobody will run what is still queued: say so."""
        while True:
            try:
                self.commands.get_nowait().answer(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "stopping"})
            except queue.Empty:
                return


def _wake(loop: asyncio.AbstractEventLoop, settled: asyncio.Future[None]) -> None:
    def settle() -> None:
        if not settled.done():
            settled.set_result(None)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the server's loop has closed: nobody waits any more
        pass


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock
