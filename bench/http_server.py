"""The daemon's HTTP server alone, for `bench http`: run as a script (`python bench/http_server.py
SOURCES`) by the checkout whose server is measured, it prints `PORT <n>` and serves until its stdin
closes.

It uses only what both servers take, the ThreadingHTTPServer of before and the uvicorn one:
`ControlServer(host, port, token, metrics, health, console=Console(live, previews))`. A thread plays
the hub: it answers the queued commands (`list`), records a frame of every source at 25 fps,
publishes the live figures as the hub does, and hands each finished frame to the previews (a real
640x360 slot of a shared-memory pool, the real JPEG encoder), so viewers get real previews.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time

import numpy as np

from framewire.media.jpeg import encode_jpeg
from framewire.pipeline.ops.console import Console
from framewire.pipeline.ops.control import ControlServer
from framewire.pipeline.ops.live import LiveStats
from framewire.pipeline.ops.metrics import Metrics
from framewire.pipeline.ops.preview import Previews
from framewire.pipeline.wire.framepool import FramePool, PoolLayout

FPS = 25.0


class _Record:
    def __init__(self, source_id: str) -> None:
        self.source_id = source_id


class _Inputs:
    """What LiveStats reads of the hub's sources."""

    def __init__(self, ids: list[str]) -> None:
        self.records = [_Record(i) for i in ids]
        self.frames = dict.fromkeys(ids, 0)

    def every(self) -> list[_Record]:
        return self.records

    def describe(self, record: _Record) -> dict[str, object]:
        return {"id": record.source_id, "state": "running", "frames": self.frames[record.source_id],
                "read": 0, "dropped": 0, "stale": 0, "reconnects": 0, "error": None, "width": 640,
                "height": 360}  # fmt: skip


def _hub(server: ControlServer, live: LiveStats, previews: Previews, pool: FramePool, inputs: _Inputs,
         stop: threading.Event) -> None:  # fmt: skip
    tick = 1.0 / FPS
    due = time.monotonic()
    while not stop.is_set():
        try:  # a command is answered as soon as it comes, as the hub loop does between messages
            command = server.commands.get(timeout=max(0.0, due - time.monotonic()))
        except queue.Empty:
            command = None
        if command is not None:
            command.answer(200, {"sources": [inputs.describe(r) for r in inputs.every()]})
            continue
        for record in inputs.every():
            inputs.frames[record.source_id] += 1
            live.done(record.source_id, 0.04)
            previews.frame_done(record.source_id, pool, 0, {"image"})
        live.tick(inputs)  # type: ignore[arg-type]
        due += tick


def main(sources: int) -> int:
    layout = PoolLayout.plan(f"framewire-bench-http-{os.getpid()}", 1, {"image": ((360, 640, 3), "uint8")})
    pool = FramePool.create(layout)
    pool.view(0, "image")[:] = np.random.default_rng(0).integers(0, 255, (360, 640, 3), dtype=np.uint8)
    live, previews, metrics = LiveStats(), Previews(encode_jpeg, fps=10.0), Metrics()
    inputs = _Inputs([f"cam{i}" for i in range(sources)])
    server = ControlServer("127.0.0.1", 0, None, metrics, lambda: {"live": True, "ready": True},
                           console=Console(live, previews))  # fmt: skip
    server.start()
    stop = threading.Event()
    hub = threading.Thread(target=_hub, args=(server, live, previews, pool, inputs, stop), daemon=True)
    hub.start()
    print(f"PORT {server.address[1]}", flush=True)
    try:
        sys.stdin.read()  # until the benchmark closes it
    finally:
        stop.set()
        hub.join(5)
        server.stop()
        previews.close()
        pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
