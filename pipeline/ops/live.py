"""Each source's rate and latency over the last seconds, for the web console and the terminal.

The Prometheus families count since the start (a scrape's `rate()` makes the window); an operator
looking at a page or a terminal wants "how fast now". The hub loop records each frame as it comes
out (`done`) and, twice a second, publishes a new snapshot: every source's state and counts
(`Inputs.describe`, as `GET /sources` gives them) with its frames per second and end-to-end latency
p50/p99 over the last WINDOW_S seconds, and a point of its history for the console's charts. A
snapshot is a fresh object swapped in whole, so the HTTP threads and the command line read it
without a lock and never touch the hub's state.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from framewire.pipeline.hub.inputs import Inputs

WINDOW_S = 5.0
"""The rates and latencies are over this many seconds."""
PUBLISH_S = 0.5
HISTORY_S = 1.0
HISTORY_POINTS = 180
"""A chart point per source every HISTORY_S, the last HISTORY_POINTS of them (three minutes)."""


@dataclass(frozen=True)
class Snapshot:
    """What the console and the terminal show, as it was at `at` (time.time())."""

    at: float = 0.0
    sources: tuple[dict[str, Any], ...] = ()
    history: dict[str, tuple[tuple[float, float, float | None, float | None], ...]] = field(default_factory=dict)
    """Per source: (time, fps, p50 ms, p99 ms) points, oldest first."""

    def to_json(self, since: float = 0.0) -> dict[str, Any]:
        """The snapshot for `GET /console/stats`: with `since`, only the chart points after it."""
        return {
            "at": round(self.at, 3),
            "window_s": WINDOW_S,
            "sources": list(self.sources),
            "history": {sid: [list(p) for p in points if p[0] > since] for sid, points in self.history.items()},
        }


class _Window:
    """One source's frames of the last WINDOW_S: when each came out and its latency."""

    def __init__(self, now: float) -> None:
        self.since = now
        self.frames: deque[tuple[float, float | None]] = deque()
        self.history: deque[tuple[float, float, float | None, float | None]] = deque(maxlen=HISTORY_POINTS)

    def trim(self, now: float) -> None:
        while self.frames and self.frames[0][0] <= now - WINDOW_S:
            self.frames.popleft()

    def rates(self, now: float) -> tuple[float, float | None, float | None]:
        """Frames per second and latency p50, p99 (ms) over the window (or since the source's first
        frame, when that is shorter: a source 2 s old at 25 fps shows 25, not 10; but over 1 s at
        least, so the frames that queued while the workers warmed up do not show as a spike)."""
        self.trim(now)
        span = min(WINDOW_S, max(now - self.since, 1.0))
        fps = len(self.frames) / span
        latencies = sorted(lat for _, lat in self.frames if lat is not None)
        if not latencies:
            return fps, None, None
        return fps, _percentile(latencies, 0.50) * 1000.0, _percentile(latencies, 0.99) * 1000.0


def _percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile of sorted values."""
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


class LiveStats:
    """Written by the hub loop (`done`, `tick`, `forget`); read from any thread (`snapshot`)."""

    def __init__(self) -> None:
        self._windows: dict[str, _Window] = {}
        self._published = 0.0
        self._charted = 0.0
        self.snapshot = Snapshot()
        """The latest snapshot; replaced whole, never changed."""
        self._analytics: dict[str, dict[str, Any]] = {}
        """Each source's lines and zones with their totals, as its latest tracked frame had them."""

    def counted(self, source: str, result: Any) -> None:
        """A tracked frame's `analytics` result (the hub reads it once per frame, in order): its lines'
        and zones' points and totals (summed over the classes) for the console to draw."""
        analytics = result.get("analytics") if isinstance(result, dict) else None
        if not isinstance(analytics, dict):
            return
        self._analytics[source] = _drawn(analytics)

    def done(self, source: str, latency_s: float | None, now: float | None = None) -> None:
        """A frame of `source` came out of every output (`latency_s` from the start of its decode)."""
        now = time.monotonic() if now is None else now
        window = self._windows.get(source)
        if window is None:
            window = self._windows[source] = _Window(now)
        window.frames.append((now, latency_s))

    def tick(self, inputs: Inputs, now: float | None = None, *, force: bool = False) -> None:
        """Publish a new snapshot when PUBLISH_S has passed (the hub calls this once a tick), or
        now with `force` (the job's last, once its hub has stopped)."""
        now = time.monotonic() if now is None else now
        if now - self._published < PUBLISH_S and not force:
            return
        self._published = now
        chart = now - self._charted >= HISTORY_S
        if chart:
            self._charted = now
        wall = time.time()
        sources = []
        for record in inputs.every():
            described = inputs.describe(record)
            window = self._windows.get(record.source_id)
            if window is None:
                window = self._windows[record.source_id] = _Window(now)
            fps, p50, p99 = window.rates(now)
            live = described["state"] in ("opening", "running", "draining")
            if not live:
                fps = 0.0
            described.update(fps=round(fps, 2), latency_p50_ms=_ms(p50), latency_p99_ms=_ms(p99))
            if record.source_id in self._analytics:
                described["analytics"] = self._analytics[record.source_id]
            sources.append(described)
            if chart and live:
                window.history.append((round(wall, 3), round(fps, 2), _ms(p50), _ms(p99)))
        self.snapshot = Snapshot(
            wall, tuple(sources), {sid: tuple(w.history) for sid, w in self._windows.items() if w.history}
        )

    def forget(self, source_id: str) -> None:
        """A source removed for good: its window and history go."""
        self._windows.pop(source_id, None)
        self._analytics.pop(source_id, None)


def _drawn(analytics: dict[str, Any]) -> dict[str, Any]:
    """What the console draws of a frame's analytics: each line's points and totals in and out, each
    zone's polygon, occupancy, entries and exits (summed over the classes)."""
    lines, zones = {}, {}
    for name, line in (analytics.get("lines") or {}).items():
        if isinstance(line, dict):
            lines[name] = {"points": line.get("points"), "in": _total(line.get("in")), "out": _total(line.get("out"))}
    for name, zone in (analytics.get("zones") or {}).items():
        if isinstance(zone, dict):
            totals = {key: _total(zone.get(key)) for key in ("occupancy", "entries", "exits")}
            zones[name] = {"polygon": zone.get("polygon"), **totals}
    return {"lines": lines, "zones": zones}


def _total(counts: Any) -> int:
    """A per-class count map's sum (0 for anything else)."""
    return int(sum(v for v in counts.values() if isinstance(v, int | float))) if isinstance(counts, dict) else 0


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 1)

