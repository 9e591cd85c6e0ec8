"""The real brokers the sink tests talk to: mosquitto (MQTT), Tansu (Kafka protocol), and a stdlib
HTTP server that takes webhooks and can answer 5xx on demand. Each is a real process or server on a
port the OS picked; the tests read what reached them with clients that know nothing of framewire
(paho, confluent_kafka, the server's own list)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support import components
from tests.support.ports import free_port


def wait_port(port: int, timeout_s: float = 15.0, process: subprocess.Popen[bytes] | None = None) -> None:
    """Until something accepts connections on 127.0.0.1:`port`; RuntimeError past the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the broker exited ({process.returncode}) before it listened on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s")


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


class Mosquitto:
    """A mosquitto broker with persistence in `folder`: stopped and started again on the same port,
    it keeps its persistent sessions (COMPONENTS.md)."""

    def __init__(self, folder: Path) -> None:
        self.binary, self.env = components.mosquitto()
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)
        lines = [f"listener {self.port} 127.0.0.1", "allow_anonymous true", "persistence true",
                 f"persistence_location {folder}/", "log_dest stderr"]  # fmt: skip
        if os.geteuid() == 0:
            lines.append("user root")  # else it drops privileges and cannot write its persistence file
        self.conf = folder / "mosquitto.conf"
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self) -> Mosquitto:
        self.process = subprocess.Popen([str(self.binary), "-c", str(self.conf)], env=self.env,
                                        stdout=subprocess.DEVNULL, stderr=open(self.folder / "log", "ab"))  # fmt: skip
        wait_port(self.port, process=self.process)
        return self

    def stop(self) -> None:
        """SIGTERM: it saves its persistence file and closes every connection."""
        _stop(self.process)
        self.process = None


class Tansu:
    """A Tansu broker keeping topics in memory; topics are made on first use (4 partitions)."""

    def __init__(self) -> None:
        self.binary = components.tansu()
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Tansu:
        url = f"tcp://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(self.port, process=self.process)
        return self

    def stop(self) -> None:
        _stop(self.process)
        self.process = None


def read_kafka(bootstrap: str, topic: str, until: int, timeout_s: float = 30.0) -> list[tuple[str, dict[str, Any]]]:
    """(key, JSON value) of the messages of every partition of `topic`, read from the start without a
    consumer group (joining one takes ~20 s on Tansu), until `until` came or the deadline."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "framewire-tests", "enable.auto.commit": False})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        got: list[tuple[str, dict[str, Any]]] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < until and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            got.append(((message.key() or b"").decode(), json.loads(message.value())))
        return got
    finally:
        consumer.close()


class HookServer:
    """An HTTP server that records the JSON arrays POSTed to it, in order; `fail(n, status)` makes
    it answer the next `n` requests with `status` (recorded as refused, their bodies not kept; a 3xx
    points elsewhere, where a GET is answered 200)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.requests: list[tuple[int, int, dict[str, str]]] = []
        """(status answered, items in the body, headers) of every request."""
        self._lock = threading.Lock()
        self._failures: list[int] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                batch = json.loads(body)
                with server._lock:
                    status = server._failures.pop(0) if server._failures else 200
                    server.requests.append((status, len(batch), dict(self.headers)))
                    if status == 200:
                        server.items.extend(batch)
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "/moved")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:  # noqa: N802 (a client that followed a redirect: answered, not kept)
                with server._lock:
                    server.requests.append((200, 0, dict(self.headers)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def fail(self, count: int, status: int = 503) -> None:
        with self._lock:
            self._failures.extend([status] * count)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
