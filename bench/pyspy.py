"""The budget of a frame per process: py-spy samples every process of a run, and each sample is put
in one bucket, the work (decode, model, encode) or framewire's own (hub, serialisation, copies,
colour conversion and scaling, JSON, ZeroMQ, ...), or idle.

py-spy (PyPI `py-spy`, a Rust binary) is not one of framewire's packages: `make pyspy` (or the first
`bench budget --profile`) installs it in a venv of its own, `.venv/pyspy`, and nothing else uses it.
It runs as `py-spy record --pid HUB --subprocesses --native --idle --format raw`: one sampler for
the hub and every process under it, with the C frames (FFmpeg, ONNX Runtime, x264, libzmq, OpenCV)
that tell the work from the rest. Native sampling pauses a process for each sample, so a profiled
run is slower than a plain one: read the shares from it, the rates and ratios from a run without.

The summary splits each process's measured CPU seconds over the buckets in proportion to its busy
(not idle) samples; idle is the rest of the wall time.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

WORK_BUCKETS = ("decode", "model", "encode")
OWN_BUCKETS = (
    "colour/scale",  # swscale, to_ndarray, cv2 colour conversion and resize
    "image ops",  # the composites' and tasks' other OpenCV calls (blur, drawing)
    "pre/postprocess",  # the task's own Python and numpy (YuNet's decoding of its outputs)
    "serialisation",  # the wire: message and tensor encoding, headers
    "copies",  # memcpy/memmove under numpy or framewire code
    "json",  # JSONL records and JSON encoding
    "zmq",  # libzmq and pyzmq, send and receive (not their waits)
    "hub",  # the hub loop: routing, inputs, peers, events
    "framewire other",  # any other framewire Python
    "python/other",  # the interpreter, gc, logging, libraries not named above
)
STARTUP = "start-up"  # imports (the fork server's, a worker's): not a frame's cost
SAMPLER = "bench sampler"  # the benchmark's own CPU and memory sampler, in the hub's process
IDLE = "idle"
BUCKETS = (*WORK_BUCKETS, *OWN_BUCKETS, STARTUP, SAMPLER, IDLE)

VENV = Path(__file__).resolve().parents[1] / ".venv" / "pyspy"
VERSION = "0.4.2"

# Leaf functions that wait: a sample there is a thread asleep, not a CPU busy.
_IDLE_LEAVES = re.compile(
    r"^(epoll_wait|epoll_pwait|__poll|poll|ppoll|select|pselect6?|__select|clock_nanosleep|nanosleep|"
    r"__nanosleep|futex_wait|PyThread_acquire_lock_timed|lock_PyThread_acquire_lock|take_gil|"
    r"x264_\w*threadpool_wait|__futex_abstimed_wait\w*|futex_abstimed_wait\w*|do_futex_wait\w*|"
    r"__lll_lock_wait\w*|pthread_cond_\w*wait\w*|___pthread_cond_\w*wait|sem_\w*wait|__new_sem_wait\w*|"
    r"accept4?|__libc_accept|waitpid|__waitpid|wait4|__wait4|sigtimedwait|__sigtimedwait|pause|"
    r"time_sleep|recv|recvfrom|__libc_recv|read|__libc_read)\b"
)
# (pattern on one frame, bucket), tried from the leaf up: the first frame that matches decides.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), b)
    for p, b in (
        (r"libx264|x264_|avcodec_send_frame|avcodec_receive_packet|CodecContext_encode|_send_frame_and_recv|"
         r"video_writer\.py", "encode"),
        (r"onnxruntime", "model"),
        (r"libswscale|sws_|to_ndarray|from_ndarray|reformat|[Cc]vt[A-Z]|YUV|[Rr]esize", "colour/scale"),
        (r"libavcodec|libavformat|libavutil|avcodec_|av_read_frame|CodecContext_decode|VideoStream_decode|"
         r"_send_packet_and_recv|[Dd]emux", "decode"),
        (r"_json\.c|json/|orjson|jsonl\.py|record\.py", "json"),
        (r"libzmq|zmq/|zmq\.backend|_zmq", "zmq"),
        (r"pipeline/wire/(messages|tensors|framepool)|hub/header|pickle|msgpack", "serialisation"),
        (r"pipeline/hub/", "hub"),
        (r"stages/composite|composites/", "image ops"),
        (r"stages/tasks/|stages/steps/|stages/(preprocess|postprocess)", "pre/postprocess"),
        (r"framewire/|stages/|engines/|pipeline/", "framewire other"),
    )
)
_ENCODING = re.compile(
    r"libx264|avcodec_send_frame|CodecContext_encode|_send_frame_and_recv|video_writer\.py"
)
_OPENCV = re.compile(r"libopencv|cv2\.abi3|cv2/|cv::")
_PYTHON_OWNERS = ("framewire other", "pre/postprocess", "hub", "serialisation")
_COPY_LEAVES = re.compile(r"^(__memmove\w*|__memcpy\w*|memmove|memcpy|__nss_database_lookup)")
_COPY_OWNERS = re.compile(r"_multiarray_umath|numpy|framewire/|pipeline/|stages/")


_ANONYMOUS = re.compile(r"^(0x[0-9a-f]+ |\S+ \((libc\.so|libpthread|ld-linux|\[vdso\]))")


def idle(stack: list[str]) -> bool:
    """Whether a sample is a thread waiting: the first named frame above the C library is a wait."""
    for frame in reversed(stack):
        if _IDLE_LEAVES.match(frame):
            return True
        if not _ANONYMOUS.match(frame):
            return False
    return False


def classify(stack: list[str]) -> str:
    """The bucket of one sample: its frames, root first, each `function (file:line)` or `fn (lib)`."""
    return located(stack)[0]


def located(stack: list[str]) -> tuple[str, str]:
    """The bucket of one sample and the frame that decided it (for the summary's `where`)."""
    if not stack:
        return "python/other", ""
    if idle(stack):
        return IDLE, stack[-1]
    joined = ";".join(stack)
    if "<frozen importlib" in joined:
        return STARTUP, ""
    if "bench/harness.py" in joined:
        return SAMPLER, ""
    copy = bool(_COPY_LEAVES.match(stack[-1]))
    opencv = False  # OpenCV's symbols are stripped: the Python frame that called it tells what it did
    for frame in reversed(stack):
        if _OPENCV.search(frame):
            opencv = True
            continue
        bucket = next((b for pattern, b in _RULES if pattern.search(frame)), None)
        if bucket == "decode" and _ENCODING.search(joined):
            bucket = "encode"  # FFmpeg's shared code, called by the encoder
        if bucket is not None:
            if opencv and bucket != "image ops":
                return ("colour/scale" if bucket in _PYTHON_OWNERS else bucket), frame
            if copy and bucket in _PYTHON_OWNERS:
                return "copies", frame
            return bucket, frame
        if copy and _COPY_OWNERS.search(frame):
            return "copies", frame
    return ("image ops" if opencv else "python/other"), stack[-1]


_PROCESS = re.compile(r'^process (\d+):"')


def parse_raw(text: str, where: Counter[tuple[str, str]] | None = None) -> dict[int, Counter[str]]:
    """py-spy's raw output (`frame;frame;... count` per line, `process PID:"cmd"` frames first with
    --subprocesses) as samples per bucket of each process (its innermost `process` frame). With
    `where`, the busy samples are also counted there by (bucket, the frame that decided it)."""
    out: dict[int, Counter[str]] = {}
    for line in text.splitlines():
        stack_text, _, count = line.rpartition(" ")
        if not stack_text or not count.isdigit():
            continue
        frames = _split(stack_text)
        pid = 0
        while frames and (found := _PROCESS.match(frames[0])):
            pid = int(found.group(1))
            frames = frames[1:]
        bucket, frame = located(frames)
        out.setdefault(pid, Counter())[bucket] += int(count)
        if where is not None and bucket != IDLE:
            where[(bucket, re.sub(r"0x[0-9a-f]+ ", "", frame))] += int(count)
    return out


def where_summary(where: Counter[tuple[str, str]], n: int = 3) -> dict[str, list[list[Any]]]:
    """Per bucket, the `n` frames that decided most of its samples, with their share of it."""
    totals: Counter[str] = Counter()
    for (bucket, _), count in where.items():
        totals[bucket] += count
    out: dict[str, list[list[Any]]] = {}
    for (bucket, frame), count in where.most_common():
        rows = out.setdefault(bucket, [])
        if len(rows) < n:
            rows.append([frame, round(count / totals[bucket], 3)])
    return out


def _split(stack_text: str) -> list[str]:
    """Frames of a raw line: split on `;` outside the quotes of a `process` frame's command line."""
    frames: list[str] = []
    current: list[str] = []
    quoted = False
    for char in stack_text:
        if char == '"':
            quoted = not quoted
        if char == ";" and not quoted:
            frames.append("".join(current))
            current = []
        else:
            current.append(char)
    frames.append("".join(current))
    return [f for f in frames if f]


def summarise(
    samples: Mapping[int, Counter[str]],
    processes: Mapping[int, tuple[str, float]],
    *,
    frames: int,
    wall_s: float,
) -> dict[str, Any]:
    """Per process (name, CPU seconds by pid) and in all: each bucket's CPU ms a frame and share.

    A process's CPU seconds are split over its busy samples' buckets; a pid that was sampled but not
    among `processes` (py-spy's own, or gone too early to be named) is left out, as is one with no
    busy samples."""
    per: dict[str, dict[str, Any]] = {}
    total: Counter[str] = Counter()
    for pid, (name, cpu_s) in sorted(processes.items(), key=lambda kv: kv[1][0]):
        counts = samples.get(pid)
        busy = sum(n for b, n in (counts or {}).items() if b != IDLE)
        if not counts or busy == 0:
            continue
        key, i = name, 1
        while key in per:
            i += 1
            key = f"{name} #{i}"
        cpu = {b: cpu_s * counts.get(b, 0) / busy for b in BUCKETS if b != IDLE and counts.get(b)}
        total.update(cpu)
        per[key] = {
            "pid": pid,
            "cpu_s": cpu_s,
            "cores": cpu_s / wall_s if wall_s > 0 else None,
            "samples": dict(counts),
            "ms_per_frame": {b: s / frames * 1000.0 for b, s in cpu.items()} if frames else {},
        }
    cpu_all = sum(total.values())
    work = sum(total.get(b, 0.0) for b in WORK_BUCKETS)
    return {
        "frames": frames,
        "wall_s": wall_s,
        "cpu_s": cpu_all,
        "processes": per,
        "ms_per_frame": {b: total[b] / frames * 1000.0 for b in BUCKETS if total.get(b)} if frames else {},
        "share": {b: total[b] / cpu_all for b in BUCKETS if total.get(b)} if cpu_all else {},
        "work_cpu_s": work,
        "own_cpu_s": cpu_all - work,
        "own_top": top_own(total),
    }


def top_own(cpu_by_bucket: Mapping[str, float], n: int = 3) -> list[str]:
    """The `n` biggest buckets of framewire's own time, biggest first."""
    own = [(s, b) for b, s in cpu_by_bucket.items() if b in OWN_BUCKETS and s > 0]
    return [b for _, b in sorted(own, reverse=True)[:n]]


def table(summary: Mapping[str, Any]) -> list[list[Any]]:
    """Rows of the per-process table: process, cores, then CPU ms a frame per bucket."""
    procs = summary["processes"].values()
    used = [b for b in BUCKETS if b != IDLE and any(b in p["ms_per_frame"] for p in procs)]
    rows = []
    for name, proc in summary["processes"].items():
        rows.append([name, proc["cores"], *(proc["ms_per_frame"].get(b) for b in used)])
    rows.append(["all", summary["cpu_s"] / summary["wall_s"] if summary["wall_s"] else None,
                 *(summary["ms_per_frame"].get(b) for b in used)])  # fmt: skip
    return [["process", "cores", *used], *rows]


# --- running py-spy ------------------------------------------------------------------------------


def pyspy_binary(install: bool = True) -> str:
    """The py-spy binary: on PATH, else the project's own venv for it (made here when `install`)."""
    ours = VENV / "bin" / "py-spy"
    found = shutil.which("py-spy") or (str(ours) if ours.exists() else None)
    if found:
        return found
    if not install:
        raise RuntimeError("py-spy is not installed: run `make pyspy` (a venv of its own in .venv/pyspy)")
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", f"py-spy=={VERSION}"], check=True)
    return str(VENV / "bin" / "py-spy")


class Recorder:
    """`py-spy record` over a process and its children, for up to `seconds`, into a raw file."""

    def __init__(self, pid: int, path: Path, *, seconds: float, rate: int = 25, native: bool = True) -> None:
        self.path = path
        command = [
            pyspy_binary(), "record", "--pid", str(pid), "--subprocesses", "--idle", "--format", "raw",
            "--rate", str(rate), "--duration", str(max(1, int(seconds))), "--output", str(path),
        ]  # fmt: skip
        if native:
            command.append("--native")
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def stop(self, timeout_s: float = 30.0) -> str:
        """Stop sampling now (py-spy writes what it has on SIGINT) and return the raw text."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            _, err = self.process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        if not self.path.exists():
            raise RuntimeError(f"py-spy wrote no profile (exit status {self.process.returncode}: {one_line(err)})")
        return self.path.read_text(encoding="utf-8", errors="replace")


def one_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no message"
