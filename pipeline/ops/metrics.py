"""Counters, gauges and histograms of the daemon, exposed through `prometheus_client`.

The supervisor's hub loop is the only writer and keeps the values here, under a lock; a scrape (the
HTTP thread) reads them through a collector registered with prometheus_client, beside the library's
own process and platform collectors and a `framewire_build_info` series. Values are kept rather
than held in prometheus_client's metric objects because several families mirror the hub's state
(`replace`: a gauge or a counter set to exactly the series the hub has now).
"""

from __future__ import annotations

import bisect
import itertools
import platform
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.metrics_core import InfoMetricFamily, Metric
from prometheus_client.registry import Collector

Labels = tuple[tuple[str, str], ...]

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


_LABELS: dict[tuple[tuple[str, object], ...], Labels] = {}
"""`labels` of the label values as they were passed: the hub passes the same few a frame, several
times a frame. Cleared when it holds LABELS_KEPT (sources come and go in a daemon that runs for weeks)."""
LABELS_KEPT = 4096


def labels(**values: object) -> Labels:
    raw = tuple(values.items())
    try:
        return _LABELS[raw]
    except KeyError:
        made = _LABELS[raw] = tuple(sorted((k, str(v)) for k, v in raw))
        if len(_LABELS) > LABELS_KEPT:
            _LABELS.clear()
        return made
    except TypeError:  # a value that is not hashable: made each time
        return tuple(sorted((k, str(v)) for k, v in raw))


@dataclass
class _Histogram:
    buckets: Sequence[float]
    counts: list[int] = field(default_factory=list)
    """Values in each bucket alone (between the bound before and this one); `cumulative()` gives
    Prometheus's counts. One bucket a value, found by bisection, not 14 compared a value."""
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.counts):
            self.counts[i] += 1

    def cumulative(self) -> list[int]:
        """Values at or under each bound, as Prometheus's `_bucket` series count them."""
        return list(itertools.accumulate(self.counts))


@dataclass
class _Family:
    name: str
    kind: str  # counter | gauge | histogram
    help: str
    values: dict[Labels, float] = field(default_factory=dict)
    histograms: dict[Labels, _Histogram] = field(default_factory=dict)


class Metrics:
    """A small registry: declare families once, then inc/set/observe by label values.

    `process=True` also exposes the daemon's own process metrics (`process_cpu_seconds_total`,
    `process_resident_memory_bytes`, open fds...), Python's, and `framewire_build_info`.
    """

    def __init__(self, *, process: bool = False) -> None:
        self.lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._extra: list[Callable[[], Iterator[Metric]]] = []
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Families(self))
        if process:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
            self.registry.register(_BuildInfo())

    def declare(self, name: str, kind: str, help_text: str) -> None:
        self._families.setdefault(name, _Family(name, kind, help_text))

    def collect_also(self, collect: Callable[[], Iterator[Metric]]) -> None:
        """More families, made at scrape time (in the HTTP thread): `collect` must be thread-safe."""
        self._extra.append(collect)

    def inc(self, name: str, amount: float = 1.0, **label_values: object) -> None:
        with self.lock:
            family = self._families[name]
            key = labels(**label_values)
            family.values[key] = family.values.get(key, 0.0) + amount

    def set(self, name: str, value: float, **label_values: object) -> None:
        with self.lock:
            self._families[name].values[labels(**label_values)] = float(value)

    def replace(self, name: str, values: Mapping[Labels, float]) -> None:
        """Set a family to exactly these series (gone series disappear)."""
        with self.lock:
            self._families[name].values = dict(values)

    def forget(self, label: str, value: str) -> None:
        """Drop every series with `label=value` from every family (a source removed for good)."""
        pair = (label, value)
        with self.lock:
            for family in self._families.values():
                family.values = {k: v for k, v in family.values.items() if pair not in k}
                family.histograms = {k: h for k, h in family.histograms.items() if pair not in k}

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
        """The Prometheus text format of every family (prometheus_client's exposition)."""
        return generate_latest(self.registry).decode("utf-8")

    def snapshot(self) -> list[Metric]:
        """The families as prometheus_client metrics, copied under the lock."""
        out: list[Metric] = []
        with self.lock:
            for family in self._families.values():
                out.append(_metric(family))
        for collect in self._extra:
            out.extend(collect())
        return out


class _Families(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self.metrics.snapshot()


def _metric(family: _Family) -> Metric:
    if family.kind == "counter":
        metric = Metric(family.name.removesuffix("_total"), family.help, "counter")
        for key, value in sorted(family.values.items()):
            metric.add_sample(family.name, dict(key), value)
    elif family.kind == "histogram":
        metric = Metric(family.name, family.help, "histogram")
        for key, hist in sorted(family.histograms.items()):
            for bound, count in zip(hist.buckets, hist.cumulative(), strict=True):
                metric.add_sample(f"{family.name}_bucket", {**dict(key), "le": _bound(bound)}, count)
            metric.add_sample(f"{family.name}_bucket", {**dict(key), "le": "+Inf"}, hist.count)
            metric.add_sample(f"{family.name}_sum", dict(key), hist.total)
            metric.add_sample(f"{family.name}_count", dict(key), hist.count)
    else:
        metric = Metric(family.name, family.help, family.kind)
        for key, value in sorted(family.values.items()):
            metric.add_sample(family.name, dict(key), value)
    return metric


def _bound(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(float(value))


class _BuildInfo(Collector):
    """`framewire_build_info{version, python, pyzmq, libzmq, machine} 1`: what is running, for dashboards."""

    def collect(self) -> Iterator[Metric]:
        import zmq

        try:
            version = metadata.version("framewire")
        except metadata.PackageNotFoundError:
            version = "unknown"
        info = InfoMetricFamily("framewire_build", "The framewire build and the runtime it runs on.")
        info.add_metric([], {
            "version": version, "python": platform.python_version(), "pyzmq": zmq.pyzmq_version(),
            "libzmq": zmq.zmq_version(), "machine": platform.machine(),
        })  # fmt: skip
        yield info
