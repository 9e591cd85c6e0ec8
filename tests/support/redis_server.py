"""A real Redis for the fleet's tests: Debian's redis-server (tests.support.components.redis) on a free
port, in a temporary folder, without persistence; stopped (and waited for) when the test ends."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.components import ComponentMissing, redis
from tests.support.ports import free_port


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """A running Redis: its redis:// URL."""
    import redis as client

    binary, env = redis()
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = subprocess.Popen(
        [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(folder), "--logfile", str(folder / "redis.log")],  # fmt: skip
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                client.Redis.from_url(url, socket_connect_timeout=0.5).ping()
                break
            except client.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = (folder / "redis.log").read_text() if (folder / "redis.log").exists() else ""
                    raise ComponentMissing(f"redis-server did not start (exit {proc.poll()}): {log[-500:]}") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()
