"""The command line's live display of a running job, on stderr when it is a terminal.

A file job with one source gets one bar. A live job, or one with several sources, gets the bar
(or a frame count when the total is unknown) and a line per source below it: its state, frames per
second and end-to-end latency p50/p99 over the last seconds (pipeline.ops.live, through
`Job.sources()`), frames, drops and reconnects. The rates are the recent ones, not averages since
the start: a camera that stalls shows 0 fps within seconds. The lines are redrawn in place with
ANSI cursor moves, at most REDRAW_S apart, from the thread that waits for the job.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TextIO

from framewire.pipeline.errors import JobTimeout
from framewire.pipeline.plan import Report

REDRAW_S = 0.25
MAX_SOURCES = 12
"""Sources shown one per line; the others are summed up in one more line."""
BAR_WIDTH = 30
RUNNING = ("opening", "running", "draining")


class _Job(Protocol):
    def wait(self, timeout: float | None = None) -> Report: ...
    def stats(self) -> dict[str, Any]: ...
    def sources(self) -> list[dict[str, Any]]: ...


def progress_lines(stats: Mapping[str, Any], sources: Sequence[Mapping[str, Any]], width: int = 100) -> list[str]:
    """The display's lines for a job's `stats()` and `sources()`, each cut to `width` characters."""
    done, total = int(stats.get("frames", 0)), stats.get("total")
    running = [s for s in sources if s.get("state") in RUNNING]
    if running:
        fps = sum(float(s.get("fps") or 0.0) for s in running)
    else:  # before the first rates, and once every source has ended: the job's average
        fps = done / max(float(stats.get("elapsed_s", 0.0)), 1e-6)
    if total:
        filled = int(BAR_WIDTH * min(done, total) / total)
        head = f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {done}/{total} frames {fps:5.1f} fps"
    else:
        head = f"{done} frames {fps:5.1f} fps"
    lines = [head]
    if len(sources) > 1 or (sources and not total):
        shown = sources[:MAX_SOURCES]
        name_width = min(max(len(str(s["id"])) for s in shown), 24)
        lines += [source_line(s, name_width) for s in shown]
        if len(sources) > MAX_SOURCES:
            rest = sources[MAX_SOURCES:]
            more_fps = sum(float(s.get("fps") or 0.0) for s in rest)
            lines.append(f"  ... {len(rest)} more source(s), {more_fps:.1f} fps together")
    return [line[:width] for line in lines]


def source_line(source: Mapping[str, Any], name_width: int = 12) -> str:
    """`  cam1   running   25.0 fps  p50   40 ms  p99   80 ms  1234 frames  3 dropped  1 reconnects`."""
    p50, p99 = source.get("latency_p50_ms"), source.get("latency_p99_ms")
    latency = f"p50 {p50:5.0f} ms  p99 {p99:5.0f} ms" if p50 is not None and p99 is not None else f"{'':23}"
    line = (f"  {str(source['id'])[:name_width]:<{name_width}}  {source.get('state', ''):<8}"
            f" {float(source.get('fps') or 0.0):6.1f} fps  {latency}  {source.get('frames', 0)} frames")  # fmt: skip
    dropped = int(source.get("dropped", 0)) + int(source.get("stale", 0)) + int(source.get("overflow", 0))
    if dropped:
        line += f"  {dropped} dropped"
    if source.get("reconnects"):
        line += f"  {source['reconnects']} reconnects"
    if source.get("error"):
        line += f"  error: {source['error']}"
    return line


class ProgressDisplay:
    """Draws `progress_lines` in place on `stream` while a job runs; off: draws nothing."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self._drawn = 0
        """Lines on screen from the last draw."""

    def follow(self, job: _Job) -> Report:
        """Wait for the job's Report, redrawing as it runs."""
        if not self.enabled:
            return job.wait()
        while True:
            try:
                report = job.wait(timeout=REDRAW_S)
            except JobTimeout:
                self.draw(progress_lines(job.stats(), job.sources(), shutil.get_terminal_size().columns - 1))
                continue
            self.draw(progress_lines(job.stats(), job.sources(), shutil.get_terminal_size().columns - 1))
            self.end()
            return report

    def draw(self, lines: Sequence[str]) -> None:
        up = f"\x1b[{self._drawn - 1}A" if self._drawn > 1 else ""
        # Each line written over the old one, the rest of it erased (ESC[K); what is left below, too (ESC[J).
        self.stream.write(up + "\r" + "\n".join(line + "\x1b[K" for line in lines) + "\x1b[J")
        self.stream.flush()
        self._drawn = len(lines)

    def end(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = 0
