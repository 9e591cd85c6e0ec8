"""What every framewire benchmark shares: the machine it ran on, percentiles, the per-process sampler
(CPU time and memory of the daemon's processes), JSON and table output.

Cheap to import (the standard library only); nothing here starts a process or loads a model.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


# --- the machine ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """CPU model, core counts, Python and library versions, and the load average right now."""
    import platform
    import subprocess
    from importlib import metadata

    model = platform.processor() or "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
                break
    except (OSError, subprocess.SubprocessError):
        pass
    import psutil

    versions = {}
    for package in ("onnxruntime", "onnxruntime-gpu", "numpy", "opencv-python-headless", "av", "pyzmq"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return {
        "cpu": model,
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "versions": versions,
        "load_average": load_average(),
    }


QUIET_WAIT_S = 45.0
"""How long `--max-load` waits for a quiet machine before measuring anyway (the load is recorded)."""


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def wait_for_quiet(max_load: float, timeout_s: float, log: Any = None) -> list[float]:
    """Wait (up to `timeout_s`) until the 1-minute load average is below `max_load`; the last reading."""
    deadline = time.monotonic() + timeout_s
    load = load_average()
    while load[0] >= max_load and time.monotonic() < deadline:
        if log is not None:
            log(f"load average {load[0]:.2f} >= {max_load}: waiting for a quieter machine")
            log = None  # once per wait
        time.sleep(5.0)
        load = load_average()
    return load


def quiet_load(max_load: float | None) -> list[float]:
    """The load average, after waiting (QUIET_WAIT_S at most) for it to fall below `max_load` if given."""
    if max_load is not None:
        wait_for_quiet(max_load, QUIET_WAIT_S, stderr)
    return load_average()


# --- statistics ----------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100, linear interpolation), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def stream_stats(records: Sequence[Mapping[str, Any]], skip_s: float = 2.0) -> dict[str, Any]:
    """One stream's frames kept a second, from its stream times (a dropped frame leaves a gap), and
    latency p50/p99 of `latency_ms.total`; the first `skip_s` of stream time (start-up) left out.
    Event lines among them (a source offline or online, a setting changed) are not frames: skipped."""
    records = [r for r in records if "time" in r]
    if not records:
        return {"records": 0, "fps": None, "latency_p50_ms": None, "latency_p99_ms": None}
    start = min(r["time"] for r in records) + skip_s
    inside = [r for r in records if r["time"] >= start]
    times = sorted(r["time"] for r in inside)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    total = [r["latency_ms"]["total"] for r in inside if "total" in r.get("latency_ms", {})]
    return {
        "records": len(records),
        "fps": (len(times) - 1) / span if span > 0 else None,
        "latency_p50_ms": percentile(total, 50),
        "latency_p99_ms": percentile(total, 99),
    }


def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return percentile(present, 50.0)


def rounded(value: Any, digits: int = 3) -> Any:
    """Floats rounded for JSON, recursively through dicts and lists."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    return value


def median_of(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Key by key median of numeric values across runs (recursing into dicts); others from the first."""
    if not runs:
        return {}
    out: dict[str, Any] = {}
    keys = list(dict.fromkeys(k for r in runs for k in r))
    for key in keys:
        values = [r.get(key) for r in runs]
        first = next((v for v in values if v is not None and v != {}), values[0])
        if isinstance(first, bool):
            out[key] = all(v for v in values if isinstance(v, bool))
        elif first is None:
            out[key] = None
        elif isinstance(first, int | float):
            numbers = [v for v in values if isinstance(v, int | float)]
            mid = median(numbers)
            whole = all(isinstance(v, int) for v in numbers) and mid is not None and float(mid).is_integer()
            out[key] = int(mid) if whole and mid is not None else mid
        elif isinstance(first, dict):
            out[key] = median_of([v for v in values if isinstance(v, dict)])
        else:
            out[key] = first
    return out


def steady_fps(done_times: Sequence[float], skip_fraction: float = 0.1) -> float | None:
    """Frames per second once running: from the k-th finished frame to the last, k = 10% of them.

    Start-up (process spawn, imports, model load) and the first frames' pipeline fill are left out."""
    n = len(done_times)
    if n < 3:
        return None
    times = sorted(done_times)
    k = max(1, int(n * skip_fraction))
    span = times[-1] - times[k - 1]
    return (n - k) / span if span > 0 else None


# --- per-process CPU and memory ------------------------------------------------------------------


@dataclass
class ProcessSample:
    name: str
    cpu_s: float = 0.0
    rss: int = 0
    pss: int | None = None
    uss: int | None = None


@dataclass
class ProcessSampler:
    """Samples, in a thread, the CPU time and memory of this process and its descendants.

    Cheap readings (cpu times, RSS) every `interval_s`; PSS and USS (which read smaps and cost a few
    milliseconds per process) only when `snapshot()` is asked for, e.g. half-way through a job, so
    the sampler itself does not slow down what it measures. CPU time of a process is its last
    reading before it exited (the exact total over all children comes from getrusage).
    """

    interval_s: float = 0.2
    include_self: bool = True
    processes: dict[int, ProcessSample] = field(default_factory=dict)
    peak_rss: int = 0
    snapshot_memory: dict[str, Any] | None = None
    sampler_cpu_s: float = 0.0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._snap = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self._thread.start()

    def snapshot(self) -> None:
        """Ask for one PSS/USS reading of every process, now."""
        self._snap.set()
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def _procs(self) -> list[Any]:
        import psutil

        me = psutil.Process()
        procs = me.children(recursive=True)
        return [me, *procs] if self.include_self else procs

    def _run(self) -> None:
        import psutil

        started = time.thread_time()
        snapped = False
        while not self._stop.is_set():
            rss_total = 0
            procs = self._procs()
            for proc in procs:
                try:
                    with proc.oneshot():
                        cpu = proc.cpu_times()
                        rss = proc.memory_info().rss
                        sample = self.processes.get(proc.pid)
                        if sample is None:
                            sample = ProcessSample(_name(proc))
                            self.processes[proc.pid] = sample
                        elif sample.name.startswith("python") or "spawn_main" in sample.name:
                            sample.name = _name(proc)  # setproctitle runs after the spawn
                        sample.cpu_s = cpu.user + cpu.system
                        sample.rss = max(sample.rss, rss)
                        rss_total += rss
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
            self.peak_rss = max(self.peak_rss, rss_total)
            if self._snap.is_set() and not snapped:
                snapped = True
                self.snapshot_memory = _memory_snapshot(procs)
            self._wake.wait(self.interval_s)
            self._wake.clear()
        self.sampler_cpu_s = time.thread_time() - started

    def by_name(self) -> dict[str, float]:
        """CPU seconds per process name (workers of one stage summed)."""
        out: dict[str, float] = {}
        for sample in self.processes.values():
            out[sample.name] = out.get(sample.name, 0.0) + sample.cpu_s
        return out


HUB_PROCESS = "hub (bench process)"
"""How the sampler names this process: it runs the hub (framewire.start)."""


def _name(proc: Any) -> str:
    try:
        cmd = proc.cmdline()
    except Exception:  # noqa: BLE001 - gone or not ours
        return "?"
    if not cmd:
        return "?"
    text = " ".join(cmd).strip()
    if text.startswith("framewire: "):
        return text.removeprefix("framewire: ")
    if proc.pid == os.getpid():
        return HUB_PROCESS
    return Path(cmd[0]).name + (" " + " ".join(cmd[1:3]) if len(cmd) > 1 else "")


def _memory_snapshot(procs: Sequence[Any]) -> dict[str, Any]:
    """Sum of RSS, PSS and USS over the processes, and each one's (MiB)."""
    import psutil

    per: dict[str, dict[str, float]] = {}
    totals = {"rss": 0, "pss": 0, "uss": 0}
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        name = _name(proc)
        key = name
        i = 1
        while key in per:
            i += 1
            key = f"{name} #{i}"
        per[key] = {k: round(getattr(info, k, 0) / MIB, 1) for k in totals}
        for k in totals:
            totals[k] += getattr(info, k, 0)
    return {
        "processes": len(per),
        "rss_mib": round(totals["rss"] / MIB, 1),
        "pss_mib": round(totals["pss"] / MIB, 1),
        "uss_mib": round(totals["uss"] / MIB, 1),
        "per_process_mib": per,
    }


# --- output --------------------------------------------------------------------------------------


def write_json(path: str | None, data: Mapping[str, Any]) -> None:
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(rounded(dict(data)), indent=2) + "\n", encoding="utf-8")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, numbers right-aligned."""

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row, raw in zip(cells, rows, strict=True):
        parts = []
        for i, (text, w) in enumerate(zip(row, widths, strict=True)):
            numeric = isinstance(raw[i], int | float) and not isinstance(raw[i], bool)
            parts.append(text.rjust(w) if numeric else text.ljust(w))
        lines.append("  ".join(parts))
    return "\n".join(lines)


def say(text: str) -> None:
    """Progress and results of a benchmark go to stdout (the CLI's output)."""
    print(text, flush=True)


def stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def free_port() -> int:
    """A TCP port free on loopback now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def checkout_env() -> dict[str, str]:
    """This environment with the checkout on PYTHONPATH: for `python -m bench...` and `tests.support`
    programs started from anywhere."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON lines file, none when it is not there (blank lines left out)."""
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user + system) of a process so far; None for none or one that is gone."""
    if pid is None:
        return None
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(t.user + t.system)


def rtsp_server(port: int, clip: str) -> Any:
    """The checkout's loopback RTSP server (tests/support/rtsp_server.py, the one the tests use),
    serving `clip` looped at its own rate on rtsp://127.0.0.1:PORT/live; returns once it listens.

    Started as a program, not imported: benchmarks run test tools, they do not import test code.
    """
    import subprocess

    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.rtsp_server", "--port", str(port), "--clip", clip],
        cwd=ROOT, env=checkout_env(), stdout=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("serving"):
        process.kill()
        raise RuntimeError(f"the RTSP server of tests/support did not start: {line!r}")
    return process

