"""Line and zone counts in `/metrics`, derived on the hub from the frames' `analytics` results.

The tracking stage (framewire.stages.analytics) writes, in each frame's result, the events of that
frame (crossed, entered, left) and each zone's occupancy now. The hub reads them once per frame, when
the stage that tracks returns it (the only place a frame passes once, in order per source): each
event adds one to its counter, and the occupancy gauges are set. Counters so keep rising when a
tracking worker restarts, though the totals in the records start again. The runtime knows no model:
this reads plain JSON, and a malformed entry is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Metrics(Protocol):
    """What this needs of the daemon's metrics registry (its Metrics class)."""

    def inc(self, name: str, amount: float = 1.0, **label_values: object) -> None: ...

    def set(self, name: str, value: float, **label_values: object) -> None: ...

    def values(self, name: str) -> Mapping[tuple[tuple[str, str], ...], float]: ...

FAMILIES = (  # declared with the others (pipeline.ops.telemetry)
    ("framewire_line_crossings_total", "counter",
     "Tracks that crossed a counting line, per source, line, direction and class."),
    ("framewire_zone_entries_total", "counter", "Tracks that entered a zone, per source, zone and class."),
    ("framewire_zone_exits_total", "counter",
     "Tracks that left a zone (or were lost in it), per source, zone and class."),
    ("framewire_zone_occupancy", "gauge",
     "Tracks in a zone on the source's latest frame, per source, zone and class."),
)  # fmt: skip


def count(metrics: Metrics, source: str, result: Any) -> None:
    """Count one frame's analytics events and set its zones' occupancy (nothing without analytics)."""
    analytics = result.get("analytics") if isinstance(result, Mapping) else None
    if not isinstance(analytics, Mapping):
        return
    for event in analytics.get("events") or ():
        if not isinstance(event, Mapping):
            continue
        kind, cls = event.get("event"), str(event.get("label", ""))
        if kind == "crossed":
            line, direction = str(event.get("line")), str(event.get("direction"))
            series = {"source": source, "line": line, "direction": direction, "class": cls}
            metrics.inc("framewire_line_crossings_total", 1.0, **series)
        elif kind in ("entered", "left"):
            name = "framewire_zone_entries_total" if kind == "entered" else "framewire_zone_exits_total"
            metrics.inc(name, 1.0, source=source, zone=str(event.get("zone")), **{"class": cls})
    zones = analytics.get("zones")
    if isinstance(zones, Mapping):
        _occupancy(metrics, source, zones)


def _occupancy(metrics: Metrics, source: str, zones: Mapping[str, Any]) -> None:
    """Each zone's gauges: this frame's count per class, 0 for a class seen before and gone now."""
    for zone, state in zones.items():
        now = state.get("occupancy") if isinstance(state, Mapping) else None
        if not isinstance(now, Mapping):
            continue
        for labels in metrics.values("framewire_zone_occupancy"):
            found = dict(labels)
            if found.get("source") == source and found.get("zone") == zone and found.get("class") not in now:
                metrics.set("framewire_zone_occupancy", 0.0, **found)
        for cls, n in now.items():
            if isinstance(n, int | float):
                series = {"source": source, "zone": str(zone), "class": str(cls)}
                metrics.set("framewire_zone_occupancy", float(n), **series)
