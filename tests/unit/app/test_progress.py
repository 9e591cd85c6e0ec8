"""The terminal's display of a running job (framewire.app.progress): what it says, and how it
redraws in place."""

from __future__ import annotations

import io
from typing import Any

from framewire.app.progress import MAX_SOURCES, ProgressDisplay, progress_lines, source_line
from framewire.pipeline.errors import JobTimeout
from framewire.pipeline.plan import Report


def _source(sid: str, fps: float, state: str = "running", **extra: Any) -> dict[str, Any]:
    return {"id": sid, "state": state, "fps": fps, "latency_p50_ms": 41.2, "latency_p99_ms": 80.0,
            "frames": 1234, "dropped": 0, "stale": 0, "reconnects": 0, "error": None, **extra}  # fmt: skip


def test_one_file_source_is_one_bar_with_its_recent_rate() -> None:
    lines = progress_lines({"frames": 50, "total": 100, "elapsed_s": 100.0}, [_source("clip", 24.0)])
    assert lines == ["[###############---------------] 50/100 frames  24.0 fps"]  # not 0.5, the average


def test_live_and_several_sources_get_a_line_each() -> None:
    sources = [_source("front-door", 25.0), _source("yard", 0.0, "running", dropped=3, stale=2, reconnects=4),
               _source("old", 0.0, "failed", error="source old: connection refused")]  # fmt: skip
    lines = progress_lines({"frames": 4000, "total": None, "elapsed_s": 60.0}, sources, width=200)
    assert lines[0] == "4000 frames  25.0 fps"
    assert lines[1] == "  front-door  running    25.0 fps  p50    41 ms  p99    80 ms  1234 frames"
    assert lines[2] == "  yard        running     0.0 fps  p50    41 ms  p99    80 ms  1234 frames  5 dropped  4 reconnects"
    assert lines[3].startswith("  old         failed") and lines[3].endswith("error: source old: connection refused")
    assert progress_lines({"frames": 1, "total": None}, [_source("cam", 5.0)])[1].startswith("  cam  running")
    assert all(len(line) <= 40 for line in progress_lines({"frames": 1, "total": None}, sources, width=40))


def test_many_sources_are_summed_up_past_the_limit() -> None:
    sources = [_source(f"cam{i}", 10.0) for i in range(MAX_SOURCES + 3)]
    lines = progress_lines({"frames": 10, "total": None}, sources)
    assert len(lines) == 1 + MAX_SOURCES + 1 and lines[0] == f"10 frames {10.0 * len(sources):5.1f} fps"
    assert lines[-1] == "  ... 3 more source(s), 30.0 fps together"


def test_before_any_rate_and_at_the_end_the_average_stands_in() -> None:
    assert progress_lines({"frames": 30, "total": 120, "elapsed_s": 2.0}, [])[0].endswith("30/120 frames  15.0 fps")
    done = [_source("a", 0.0, "ended"), _source("b", 0.0, "failed")]
    assert progress_lines({"frames": 120, "total": 120, "elapsed_s": 4.0}, done)[0].endswith(" 120/120 frames  30.0 fps")
    assert source_line({"id": "cam", "state": "opening", "fps": 0.0, "latency_p50_ms": None,
                        "latency_p99_ms": None, "frames": 0}, 3).rstrip() == "  cam  opening     0.0 fps" + " " * 27 + "0 frames"  # fmt: skip


class _Job:
    """A job that ends on its third wait."""

    def __init__(self) -> None:
        self.waits = 0
        self.sources_now = [_source("a", 5.0), _source("b", 6.0)]

    def wait(self, timeout: float | None = None) -> Report:
        self.waits += 1
        if self.waits < 3:
            if self.waits == 2:
                self.sources_now = [_source("a", 5.0)]  # b was removed: the block shrinks
            raise JobTimeout("still running")
        return Report()

    def stats(self) -> dict[str, Any]:
        return {"frames": self.waits, "total": None}

    def sources(self) -> list[dict[str, Any]]:
        return self.sources_now


def test_the_display_redraws_its_block_in_place() -> None:
    out = io.StringIO()
    report = ProgressDisplay(out, enabled=True).follow(_Job())
    assert isinstance(report, Report)
    text = out.getvalue()
    first, second, last = text.split("\x1b[J")[:3]
    assert first.startswith("\r1 frames") and first.count("\n") == 2  # three lines, no move up yet
    assert second.startswith("\x1b[2A\r2 frames") and second.count("\n") == 1  # up two, then two lines
    assert last.startswith("\x1b[1A\r3 frames") and text.endswith("\x1b[J\n")
    assert all(line.endswith("\x1b[K") for line in second.split("\n"))  # the rest of each old line erased
    quiet = io.StringIO()
    ProgressDisplay(quiet, enabled=False).follow(_EndsAtOnce())
    assert quiet.getvalue() == ""


class _EndsAtOnce(_Job):
    def wait(self, timeout: float | None = None) -> Report:
        return Report()
