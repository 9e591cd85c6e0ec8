"""The control API's HTTP side on a real socket: JSON errors everywhere, 404, 405 with Allow, 411,
413 answered before the body is read, and the connection still usable after a refused request.

A thread stands in for the hub loop: it answers the queued commands the way pipeline.ops.actions
does, so the server is tested alone, with real HTTP clients (urllib, http.client, a raw socket).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message
from typing import Any

import pytest

from framewire.pipeline.ops.metrics import Metrics
from framewire.pipeline.ops.api import MAX_BODY
from framewire.pipeline.ops.control import ControlServer

pytestmark = pytest.mark.timeout(60)

TOKEN = "t0k"


class _Loop:
    """Answers the server's commands like the hub loop: `list`, and `add` echoing its body."""

    def __init__(self, server: ControlServer) -> None:
        self.server = server
        self.bodies: list[Any] = []
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            try:
                command = self.server.commands.get(timeout=0.05)
            except Exception:
                continue
            if command.action == "list":
                command.answer(200, {"sources": []})
            elif command.action == "add":
                self.bodies.append(command.body)
                command.answer(201, {"id": command.body.get("id") if isinstance(command.body, dict) else None})
            else:
                command.answer(202, {command.action: True})


@pytest.fixture
def api() -> Iterator[tuple[str, _Loop]]:
    server = ControlServer("127.0.0.1", 0, TOKEN, Metrics(), lambda: {"live": True, "ready": True})
    server.start()
    loop = _Loop(server)
    try:
        yield server.url, loop
    finally:
        loop.running = False
        server.stop()
        loop.thread.join(5)


def call(url: str, method: str = "GET", data: bytes | None = None, token: str | None = TOKEN,
         headers: dict[str, str] | None = None) -> tuple[int, Message, Any]:  # fmt: skip
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            status, head, raw = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        status, head, raw = err.code, err.headers, err.read()
    if raw:
        assert head["Content-Type"] == "application/json", raw[:200]
    return status, head, json.loads(raw) if raw else None


def raw_exchange(url: str, request: bytes) -> bytes:
    """Send `request` as it is and read the answer until the server closes or 2 s pass."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        sock.settimeout(2)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except TimeoutError:
            pass
    return answer


def test_a_method_a_path_does_not_take_is_405_with_allow_and_unknown_paths_404(api: tuple[str, _Loop]) -> None:
    url, _ = api
    status, head, body = call(url + "/sources", "PUT", b"{}")
    assert (status, head["Allow"]) == (405, "GET, HEAD, POST, OPTIONS")
    assert body == {"error": "PUT is not allowed on /sources: it takes GET, HEAD, POST"}
    assert call(url + "/sources/cam", "PUT")[0] == 405
    assert call(url + "/sources/cam", "PUT")[1]["Allow"] == "GET, HEAD, PATCH, DELETE, OPTIONS"
    assert call(url + "/metrics", "POST", b"")[1]["Allow"] == "GET, HEAD, OPTIONS"
    assert call(url + "/drain", "GET")[1]["Allow"] == "POST, OPTIONS"
    assert call(url + "/nowhere", "PUT", b"x")[::2] == (404, {"error": "no such endpoint: /nowhere"})
    assert call(url + "/sources/a/b", "DELETE")[2] == {"error": "no such endpoint: /sources/a/b"}
    status, head, body = call(url + "/sources", "OPTIONS")
    assert (status, head["Allow"], body) == (204, "GET, HEAD, POST, OPTIONS", None)


def test_a_body_over_the_limit_is_413_before_it_is_read(api: tuple[str, _Loop]) -> None:
    url, loop = api
    # urllib sends all 5 MB before it reads: it still gets the answer, not a reset connection.
    status, head, body = call(url + "/sources", "POST", b"x" * (5 * 2**20), headers={"Content-Type": "application/json"})
    assert (status, head["Connection"]) == (413, "close")
    assert body == {"error": f"the body of {5 * 2**20} bytes is over the limit of {MAX_BODY}"}
    # The answer comes on the headers alone: none of the announced body is ever sent here.
    started = time.monotonic()
    answer = raw_exchange(url, b"POST /sources HTTP/1.1\r\nHost: x\r\nContent-Length: 5242880\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413 ") and answer.endswith(b'over the limit of 1048576"}')
    assert time.monotonic() - started < 3  # 2 s of waiting for a body that never comes, at most
    # With Expect: 100-continue (curl's way for large bodies) the client is told before it sends.
    answer = raw_exchange(url, b"POST /sources HTTP/1.1\r\nHost: x\r\nContent-Length: 5242880\r\n"
                               b"Expect: 100-continue\r\n\r\n")  # fmt: skip
    assert answer.startswith(b"HTTP/1.1 413 ") and b"100 Continue" not in answer
    assert loop.bodies == []
    # At the limit it is read (and here refused as not JSON, by the same JSON rule).
    status, _, body = call(url + "/sources", "POST", b" " * (MAX_BODY - 1) + b"x")
    assert status == 400 and body["error"].startswith("the body is not JSON: ")


def test_bad_bodies_and_requests_get_one_json_line(api: tuple[str, _Loop]) -> None:
    url, loop = api
    status, _, body = call(url + "/sources", "POST", b"{not json")
    assert status == 400 and body["error"].startswith("the body is not JSON: Expecting property name")
    assert call(url + "/sources", "POST", b'{"id": "a"}', token="wrong")[::2] == (401, {"error": "missing or wrong bearer token"})
    assert call(url + "/sources", "POST", b'{"id": "a"}')[::2] == (201, {"id": "a"})
    assert loop.bodies == [{"id": "a"}]
    answer = raw_exchange(url, b"POST /sources HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 411 ") and answer.endswith(b'{"error": "send the body with a Content-Length header, not chunked"}')
    # What h11 cannot parse (a bad length, a bad request line) is answered 400 in JSON, naming it.
    answer = raw_exchange(url, b"POST /sources HTTP/1.1\r\nHost: x\r\nContent-Length: -4\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.endswith(
        b'{"error": "not an HTTP request this server can read: bad Content-Length"}')  # fmt: skip
    answer = raw_exchange(url, b"BREW /sources HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 501 ") and b"application/json" in answer
    assert answer.endswith(b'{"error": "BREW is not an HTTP method this server knows"}')
    answer = raw_exchange(url, b"GET /livez HTTP/1.1 extra\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.endswith(
        b'{"error": "not an HTTP request this server can read: illegal request line"}')  # fmt: skip


def test_a_refused_request_leaves_the_connection_usable(api: tuple[str, _Loop]) -> None:
    url, _ = api
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("PUT", "/sources", body=b'{"id": "x"}')
        resp = conn.getresponse()
        assert (resp.status, json.loads(resp.read())["error"][:3]) == (405, "PUT")
        conn.request("DELETE", "/livez", body=b"ignored")
        resp = conn.getresponse()
        assert resp.status == 405 and resp.read()
        conn.request("GET", "/livez")  # the same connection: the small bodies were read and dropped
        resp = conn.getresponse()
        assert (resp.status, json.loads(resp.read())) == (200, {"live": True})
    finally:
        conn.close()


def test_a_failing_handler_answers_500_in_json() -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("health is broken")

    server = ControlServer("127.0.0.1", 0, None, Metrics(), broken)
    server.start()
    try:
        assert call(server.url + "/healthz")[::2] == (500, {"error": "RuntimeError: health is broken"})
        assert call(server.url + "/metrics")[0] == 200
    finally:
        server.stop()
