"""Counters, gauges and histograms of the daemon, rendered in the Prometheus text format.

The supervisor's hub loop is the only writer; the HTTP thread only renders, under the same lock.
Written by hand (the format is small and stable) so the daemon needs no client library; the tests
parse the output with the official `prometheus_client` parser.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def labels(**values: object) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in values.items()))


@dataclass
class _Histogram:
    buckets: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1


@dataclass
class _Family:
    name: str
    kind: str  # counter | gauge | histogram
    help: str
    values: dict[Labels, float] = field(default_factory=dict)
    histograms: dict[Labels, _Histogram] = field(default_factory=dict)


class Metrics:
    """A small registry: declare families once, then inc/set/observe by label values."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._families: dict[str, _Family] = {}

    def declare(self, name: str, kind: str, help_text: str) -> None:
        self._families.setdefault(name, _Family(name, kind, help_text))

    def inc(self, name: str, amount: float = 1.0, **label_values: object) -> None:
        with self.lock:
            family = self._families[name]
            key = labels(**label_values)
            family.values[key] = family.values.get(key, 0.0) + amount

    def set(self, name: str, value: float, **label_values: object) -> None:
        with self.lock:
            self._families[name].values[labels(**label_values)] = float(value)

    def replace(self, name: str, values: Mapping[Labels, float]) -> None:
        """Set a gauge family to exactly these series (gone series disappear)."""
        with self.lock:
            self._families[name].values = dict(values)

    def observe(self, name: str, value: float, buckets: Sequence[float] = LATENCY_BUCKETS, **label_values: object) -> None:
        with self.lock:
            family = self._families[name]
            key = labels(**label_values)
            hist = family.histograms.get(key)
            if hist is None:
                hist = family.histograms[key] = _Histogram(buckets)
            hist.observe(value)

    def values(self, name: str) -> dict[Labels, float]:
        """Every series of a counter or gauge family, as it is now (a copy)."""
        with self.lock:
            return dict(self._families[name].values)

    def value(self, name: str, **label_values: object) -> float:
        with self.lock:
            return self._families[name].values.get(labels(**label_values), 0.0)

    def render(self) -> str:
        with self.lock:
            lines: list[str] = []
            for family in self._families.values():
                lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
                lines.append(f"# TYPE {family.name} {family.kind}")
                if family.kind == "histogram":
                    for key, hist in sorted(family.histograms.items()):
                        lines.extend(_histogram_lines(family.name, key, hist))
                else:
                    for key, value in sorted(family.values.items()):
                        lines.append(f"{family.name}{_labels(key)} {_number(value)}")
            return "\n".join(lines) + "\n"


def _histogram_lines(name: str, key: Labels, hist: _Histogram) -> Iterable[str]:
    for bound, count in zip(hist.buckets, hist.counts, strict=True):
        yield f"{name}_bucket{_labels(key + (('le', _number(bound)),))} {count}"
    yield f"{name}_bucket{_labels(key + (('le', '+Inf'),))} {hist.count}"
    yield f"{name}_sum{_labels(key)} {_number(hist.total)}"
    yield f"{name}_count{_labels(key)} {hist.count}"


def _labels(key: Labels) -> str:
    if not key:
        return ""
    inner = ",".join(f'{k}="{_escape_value(v)}"' for k, v in key)
    return "{" + inner + "}"


def _escape_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))
