"""The daemon's processes in a `bench budget` run, without the RTSP server and the samplers (py-spy,
perf) that run beside it: their CPU seconds, read when asked."""

from __future__ import annotations

import subprocess
from typing import Any, Protocol

from bench import harness


class Recorder(Protocol):
    """A sampler of the measured window (py-spy's or perf's): its process, and `stop()` for its text."""

    process: subprocess.Popen[Any]

    def stop(self) -> str: ...


def cpu_by_pid(sampler: harness.ProcessSampler) -> dict[int, float]:
    """CPU seconds of each of the sampler's processes, read now."""
    import psutil

    out = {}
    for proc in sampler._procs():
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        out[proc.pid] = times.user + times.system
    return out


class DaemonSampler(harness.ProcessSampler):
    """The sampler, leaving out processes that are not the daemon's (the RTSP server, py-spy)."""

    def __init__(self, exclude: frozenset[int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.exclude = set(exclude)

    def _procs(self) -> list[Any]:
        return [p for p in super()._procs() if p.pid not in self.exclude and "py-spy" not in _cmd(p)]


def _cmd(proc: Any) -> str:
    try:
        return " ".join(proc.cmdline()[:1])
    except Exception:  # noqa: BLE001 - gone
        return ""
