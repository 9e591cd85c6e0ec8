"""On-CPU time of every process of a run, by library, from Linux perf (`bench budget --perf`).

py-spy (bench/pyspy.py) names the Python function, but it counts a thread as busy whenever the
kernel calls it running *or runnable*. A thread that its own wake-up of another thread preempted
(ZeroMQ's send writes an eventfd that wakes the socket's I/O thread) is counted busy in `write`
while it waits for a core: py-spy put 5% of an infer worker's samples and 15% of a decode
worker's in ZeroMQ's send, where perf finds well under 1% (docs/benchmarks.md). perf's `cpu-clock`
event samples only what is on a CPU, so each sample is CPU time, but it cannot read the frames of
Python 3.11 (its trampoline came in 3.12): it says which library the time went to, not which Python
function. The two together give the budget of a frame.

It runs as `perf record -a -e cpu-clock -F RATE` (every CPU, no call graphs) for the measured
window, then `perf script -F pid,tid,ip,dso`: one line a sample. Each sample goes to its process
(the benchmark's names: decode[0], infer[1], ...; others are left out) and to a bucket by its
library: the work (the model in ONNX Runtime, in the stage workers; FFmpeg's demuxing and
decoding in the decode processes; x264 or x265), or framewire's own (the Python interpreter, NumPy, OpenCV, other FFmpeg,
ZeroMQ, msgpack, the C library, the kernel, other). It needs perf (Debian: linux-perf) and the
right to sample every CPU (root, or kernel.perf_event_paranoid at 0 or below).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from framewire import FramewireError

WORK_BUCKETS = ("model", "decode", "encode")
OWN_BUCKETS = ("python", "numpy", "opencv", "ffmpeg other", "zeromq", "msgpack", "libc", "kernel", "other")
BUCKETS = (*WORK_BUCKETS, *OWN_BUCKETS)

_LINE = re.compile(r"^\s*(\d+)/(\d+)\s+[0-9a-f]+\s+\((.*)\)\s*$")
_LIBRARIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("model", re.compile(r"onnxruntime|libtensorrt|libnvinfer")),
    ("encode", re.compile(r"libx264|libx265")),
    ("ffmpeg", re.compile(r"libav(codec|format|util|device|filter)|libsw(scale|resample)|/site-packages/av/.*\.so")),
    ("python", re.compile(r"libpython|/python3(\.\d+)?$|/bin/python")),
    ("numpy", re.compile(r"numpy|_multiarray|libopenblas|libscipy_openblas")),
    ("opencv", re.compile(r"cv2|libopencv")),
    ("zeromq", re.compile(r"libzmq|/zmq/")),
    ("msgpack", re.compile(r"msgpack")),
    ("libc", re.compile(r"libc\.so|libm\.so|libstdc\+\+|libgcc|ld-linux|libpthread")),
    ("kernel", re.compile(r"\[kernel|\[vdso\]|\[vsyscall\]")),
)


class PerfUnavailable(FramewireError):
    """perf is missing or may not sample every CPU here (the message says which, and what to do)."""


def check() -> str:
    """The perf binary, once a trial record of every CPU worked; PerfUnavailable if not."""
    perf = shutil.which("perf")
    if perf is None:
        raise PerfUnavailable("perf is not installed (Debian: apt-get install linux-perf)")
    with tempfile.TemporaryDirectory(prefix="fw-perf-") as folder:
        trial = subprocess.run(
            [perf, "record", "-a", "-e", "cpu-clock", "-o", str(Path(folder) / "trial.data"), "--", "true"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    if trial.returncode != 0:
        last = (trial.stderr.strip().splitlines() or ["no output"])[-1]
        raise PerfUnavailable(f"perf cannot sample every CPU here ({last}); run as root or set "
                              "kernel.perf_event_paranoid to 0")  # fmt: skip
    return perf


class Recorder:
    """`perf record` of every CPU from now until `stop()`, which returns `perf script`'s lines."""

    def __init__(self, path: Path, rate: int = 999, perf: str | None = None) -> None:
        self.perf = perf or check()
        self.path = path
        self.rate = rate
        self.process = subprocess.Popen(
            [self.perf, "record", "-a", "-e", "cpu-clock", "-F", str(rate), "-o", str(path), "--quiet"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip

    def stop(self) -> str:
        """Stop recording (SIGINT: perf writes its file and exits) and read the samples back."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        script = subprocess.run(
            [self.perf, "script", "-i", str(self.path), "-F", "pid,tid,ip,dso"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if script.returncode != 0:
            last = (script.stderr.strip().splitlines() or ["no output"])[-1]
            raise PerfUnavailable(f"perf script failed on {self.path}: {last}")
        return script.stdout


def library_bucket(dso: str) -> str:
    """The bucket of a sample's library (FFmpeg's is decided by the process: `bucket`)."""
    for name, pattern in _LIBRARIES:
        if pattern.search(dso):
            return name
    return "other"


def bucket(process: str, dso: str) -> str:
    """A sample's bucket: FFmpeg is the work in a decode process and framewire's own elsewhere (the
    output's muxing, a worker's PyAV calls); ONNX Runtime is the model's work in a stage worker
    (named `stage[i]`) and framewire's own in the hub or the fork server, which load it but run no
    frames through it (a few samples of its threads, now and then)."""
    kind = library_bucket(dso)
    if kind == "ffmpeg":
        return "decode" if process.startswith("decode") else "ffmpeg other"
    if kind == "model" and not process.endswith("]"):
        return "other"
    return kind


def count(text: str, names: Mapping[int, str]) -> Counter[tuple[str, str]]:
    """Samples by (process name, bucket) from `perf script -F pid,tid,ip,dso` lines; `names` maps
    the pids to count (the job's processes) to their names, and other processes are left out."""
    counts: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        name = names.get(int(match.group(1)))
        if name is not None:
            counts[(name, bucket(name, match.group(3)))] += 1
    return counts


def stage_of(name: str) -> str:
    """decode[3] -> decode: the processes of one stage together."""
    return name.split("[", 1)[0]


def summarise(counts: Mapping[tuple[str, str], int], *, rate: int, frames: int) -> dict[str, Any]:
    """CPU ms a frame per stage (its processes together) and bucket, the totals, and framewire's
    own part biggest first. Each sample is 1/`rate` s of CPU."""
    per: dict[str, dict[str, float]] = {}
    for (name, kind), n in counts.items():
        row = per.setdefault(stage_of(name), {})
        row[kind] = row.get(kind, 0.0) + n
    scale = 1000.0 / rate / frames if frames else 0.0
    stages = {
        stage: {kind: round(row[kind] * scale, 4) for kind in BUCKETS if kind in row}
        for stage, row in sorted(per.items())
    }
    total = {kind: round(sum(row.get(kind, 0.0) for row in stages.values()), 4) for kind in BUCKETS}
    work = sum(total[k] for k in WORK_BUCKETS)
    own = sum(total[k] for k in OWN_BUCKETS)
    return {
        "rate_hz": rate,
        "frames": frames,
        "samples": sum(counts.values()),
        "stages": stages,
        "ms_per_frame": total,
        "work_ms_per_frame": round(work, 4),
        "own_ms_per_frame": round(own, 4),
        "own_top": [k for k in sorted(OWN_BUCKETS, key=lambda k: -total[k]) if total[k] > 0][:4],
    }


def table(summary: Mapping[str, Any]) -> list[list[Any]]:
    """Header and rows: CPU ms a frame per stage and bucket, then all of them."""
    used = [k for k in BUCKETS if summary["ms_per_frame"].get(k)]
    rows: list[list[Any]] = [["process", *used]]
    for stage, row in summary["stages"].items():
        rows.append([stage, *[row.get(k) for k in used]])
    rows.append(["all", *[summary["ms_per_frame"].get(k) for k in used]])
    return rows
