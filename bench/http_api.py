"""`bench http`: the HTTP API's latency and CPU under a load of console viewers, this checkout's
server (Starlette on uvicorn) against the one it replaced (the standard library's
ThreadingHTTPServer, taken from git at `--baseline`, `e5ec95c` by default), in the same run.

Each server runs alone in a process of its own (bench/http_server.py, the checkout's code on
PYTHONPATH) with SOURCES sources at 25 fps and real previews. Each viewer does what the console
page of that server does: for every source, a preview long-poll loop (`/console/preview/<id>`);
for the figures, a poll of `/console/stats` a second (the old page) or one event stream
(`/console/events`, the new page). Meanwhile a prober asks `GET /sources` (a command through the
hub's queue) and `GET /metrics` ten times a second each and times the answers. Measured per case:
their p50 and p99 latency, the server process's CPU (% of one core), previews and figure updates
delivered a second; and before the viewers come, `GET /livez` back to back on one kept-alive
connection (where Nagle's algorithm and a delayed ACK can hold a small answer for 40 ms). Cases
alternate between the servers so that a change of the machine's load hits both; the ratios new/old
are within one run.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import harness

BASELINE = "e5ec95c"
"""The last commit with the ThreadingHTTPServer (the branch point of the uvicorn server)."""


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    parser.add_argument("--viewers", default="1,4,16", help="comma-separated viewer counts")
    parser.add_argument("--sources", type=int, default=2, help="sources each server serves (25 fps each)")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per case")
    parser.add_argument("--repeat", type=int, default=2, help="runs per case and server, alternated; medians")
    parser.add_argument("--baseline", default=BASELINE, help="the git revision whose server is the baseline")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")


class _Server:
    """One server process: `tree` is the folder put first on PYTHONPATH (None: this checkout)."""

    def __init__(self, tree: Path | None, sources: int) -> None:
        env = harness.checkout_env()
        if tree is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")])
        script = harness.ROOT / "bench" / "http_server.py"
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(sources)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env, cwd=tempfile.gettempdir(),
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"bench http: the server did not start: {line!r}")
        self.port = int(line.split()[1])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def baseline_tree(revision: str, folder: Path) -> Path:
    """The revision's `framewire` package laid out as installed (pipeline/ inside framewire/)."""
    archive = subprocess.run(["git", "-C", str(harness.ROOT), "archive", revision, "framewire", "pipeline"],
                             capture_output=True, check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    shutil.move(str(folder / "pipeline"), str(folder / "framewire" / "pipeline"))
    return folder


class _Load:
    """The viewers and the prober against one server, for one case."""

    def __init__(self, port: int, viewers: int, sources: int, events: bool) -> None:
        self.port, self.stop = port, threading.Event()
        self.previews = self.updates = 0
        self.latency: dict[str, list[float]] = {"/sources": [], "/metrics": []}
        self.lock = threading.Lock()
        figures = self._events if events else self._poll
        loops = [functools.partial(self._preview, f"cam{s}") for _ in range(viewers) for s in range(sources)]
        loops += [figures] * viewers + [functools.partial(self._probe, path) for path in self.latency]
        self.threads = [threading.Thread(target=self._guarded(loop), daemon=True) for loop in loops]

    def _conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def _guarded(self, loop: Callable[[], None]) -> Callable[[], None]:
        """`loop`, ended quietly by the end of the case (the server going away)."""

        def run() -> None:
            try:
                loop()
            except (OSError, http.client.HTTPException, ValueError):
                if not self.stop.is_set():
                    raise

        return run

    def _preview(self, source: str) -> None:
        conn, after = self._conn(), 0
        while not self.stop.is_set():
            conn.request("GET", f"/console/preview/{source}?after={after}")
            resp = conn.getresponse()
            body = resp.read()
            if resp.status == 200 and body:
                after = int(resp.getheader("X-Frame") or after + 1)
                with self.lock:
                    self.previews += 1
        conn.close()

    def _poll(self) -> None:
        conn, since = self._conn(), 0.0
        while not self.stop.is_set():
            conn.request("GET", f"/console/stats?since={since}")
            data = json.loads(conn.getresponse().read())
            since = max([since, *(p[0] for points in data["history"].values() for p in points)])
            with self.lock:
                self.updates += 1
            self.stop.wait(1.0)  # the old page's POLL_MS
        conn.close()

    def _events(self) -> None:
        conn = self._conn()
        conn.request("GET", "/console/events?since=0")
        resp = conn.getresponse()
        while not self.stop.is_set():
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                json.loads(line[6:])
                with self.lock:
                    self.updates += 1
        conn.close()

    def _probe(self, path: str) -> None:
        conn = self._conn()
        while not self.stop.is_set():
            started = time.perf_counter()
            conn.request("GET", path)
            conn.getresponse().read()
            self.latency[path].append((time.perf_counter() - started) * 1000.0)
            self.stop.wait(0.1)
        conn.close()

    def measure(self, pid: int, seconds: float) -> dict[str, Any]:
        for thread in self.threads:
            thread.start()
        time.sleep(1.0)  # the viewers' first requests, the encoder started
        with self.lock:
            self.previews = self.updates = 0
        for values in self.latency.values():
            values.clear()
        cpu0, t0 = harness.cpu_s(pid), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = harness.cpu_s(pid), time.monotonic()
        with self.lock:
            previews, updates = self.previews, self.updates
        self.stop.set()
        for thread in self.threads:  # a preview's long poll ends within 2 s, an event within 0.5 s
            thread.join(5)
        span = t1 - t0
        result: dict[str, Any] = {
            "cpu_pct": None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / span * 100.0,
            "previews_per_s": previews / span, "updates_per_s": updates / span,
        }  # fmt: skip
        for path, values in self.latency.items():
            name = path.strip("/")
            result[f"{name}_p50_ms"] = harness.percentile(values, 0.5)
            result[f"{name}_p99_ms"] = harness.percentile(values, 0.99)
        return result


def back_to_back_ms(port: int, count: int = 50) -> float | None:
    """GET /livez `count` times back to back on one kept-alive connection: the median (ms)."""
    conn, times = http.client.HTTPConnection("127.0.0.1", port, timeout=30), []
    for _ in range(count):
        started = time.perf_counter()
        conn.request("GET", "/livez")
        conn.getresponse().read()
        times.append((time.perf_counter() - started) * 1000.0)
    conn.close()
    return harness.percentile(times, 0.5)


def _case(tree: Path | None, viewers: int, args: argparse.Namespace) -> dict[str, Any]:
    server = _Server(tree, args.sources)
    try:
        quiet = back_to_back_ms(server.port)  # before the viewers come
        load = _Load(server.port, viewers, args.sources, events=tree is None)
        return {"livez_back_to_back_ms": quiet, **load.measure(server.proc.pid, args.seconds)}
    finally:
        server.close()


def run(args: argparse.Namespace) -> int:
    counts = [int(v) for v in str(args.viewers).split(",") if v.strip()]
    result: dict[str, Any] = {"machine": harness.machine(), "baseline": args.baseline,
                              "sources": args.sources, "seconds": args.seconds, "cases": []}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="framewire-bench-http-") as folder:
        try:
            tree = baseline_tree(args.baseline, Path(folder))
        except (subprocess.CalledProcessError, OSError) as exc:
            harness.stderr(f"bench http: --baseline {args.baseline}: not a revision of this checkout ({exc})")
            return 2
        for viewers in counts:
            runs: dict[str, list[dict[str, Any]]] = {"threading": [], "uvicorn": []}
            for _ in range(max(1, args.repeat)):
                for name, where in (("threading", tree), ("uvicorn", None)):
                    runs[name].append(_case(where, viewers, args))
            for name, measured in runs.items():
                result["cases"].append({"server": name, "viewers": viewers, **harness.median_of(measured)})
    harness.write_json(args.json, result)
    harness.say(_table(result["cases"]))
    return 0


def _table(cases: list[dict[str, Any]]) -> str:
    keys = ("sources_p50_ms", "sources_p99_ms", "metrics_p50_ms", "metrics_p99_ms", "cpu_pct",
            "previews_per_s", "updates_per_s", "livez_back_to_back_ms")  # fmt: skip
    rows = [[c["server"], c["viewers"], *(c.get(k) for k in keys)] for c in cases]
    old = {c["viewers"]: c for c in cases if c["server"] == "threading"}
    for c in cases:
        if c["server"] == "uvicorn" and c["viewers"] in old:
            base = old[c["viewers"]]
            rows.append(["new/old", c["viewers"], *(_ratio(c.get(k), base.get(k)) for k in keys)])
    headers = ["server", "viewers", "GET /sources p50 ms", "p99", "GET /metrics p50 ms", "p99", "CPU %",
               "previews/s", "figures/s", "livez back to back ms"]  # fmt: skip
    return harness.table(headers, rows)


def _ratio(new: Any, old: Any) -> float | None:
    return None if not new or not old else new / old
