"""The daemon's metrics: declared once here, counted as the hub tells its observer how frames move
(`Telemetry` is a pipeline.hub.observer.HubObserver), and the gauges read off the hub's state once a
tick (queue depths, frames held, pools, sources, workers, frame rates). The worker processes' CPU
time and memory are read from /proc when a scrape asks for them.

The hub loop is the only writer; the HTTP thread renders (ops.metrics, ops.control).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.metrics_core import Metric

from framewire.pipeline.hub.inputs import Inputs
from framewire.pipeline.hub.peers import Roster
from framewire.pipeline.hub.routing import Router
from framewire.pipeline.ops import track_counts
from framewire.pipeline.ops.live import LiveStats
from framewire.pipeline.ops.metrics import Labels, Metrics

FAMILIES = (
    ("framewire_frames_total", "counter", "Frames that finished a stage, per source and stage."),
    ("framewire_fps", "gauge", "Frames per second over the last second, per source and stage."),
    ("framewire_stage_latency_seconds", "histogram", "Time a frame spends in a stage's process."),
    ("framewire_end_to_end_latency_seconds", "histogram", "From the start of decode to the outputs."),
    ("framewire_latency_over_budget_total", "counter", "Frames output later than their latency_budget_ms."),
    ("framewire_queue_depth", "gauge", "Frames waiting in the hub for a worker of the stage."),
    ("framewire_frames_in_flight", "gauge", "Frames held by the workers of a stage."),
    ("framewire_pool_slots", "gauge", "Frame-pool slots of a source."),
    ("framewire_pool_slots_used", "gauge", "Frame-pool slots of a source holding a frame."),
    ("framewire_dropped_frames_total", "counter", "Frames dropped, per source and reason."),
    ("framewire_failed_frames_total", "counter", "Frames a stage failed on, passed on unprocessed."),
    ("framewire_reconnects_total", "counter", "Times a live source reconnected."),
    ("framewire_source_offline_seconds_total", "counter", "Seconds a live source spent reconnecting."),
    ("framewire_source_online", "gauge", "1 while a live source is connected and read."),
    ("framewire_corrupt_frames_total", "counter", "Frames the decoder reported as corrupt, per source."),
    ("framewire_rejected_messages_total", "counter", "Messages a ZeroMQ source dropped, per reason."),
    ("framewire_audio_windows_missing_total", "counter",
     "Frames whose audio window was incomplete, per source and what the missing-audio policy did "
     "(silence, drop, waited: completed within the wait)."),
    ("framewire_audio_gap_seconds_total", "counter", "Seconds of a source's audio that never arrived (filled with silence)."),
    ("framewire_worker_restarts_total", "counter", "Workers restarted after they died, per stage."),
    ("framewire_worker_stalls_total", "counter", "Workers killed as hung (a frame held past stages.stall_timeout_s)."),
    ("framewire_source_moves_total", "counter",
     "Sources moved to another worker of a stage that keeps per-source state, because theirs died."),
    ("framewire_workers", "gauge", "Workers up, per stage."),
    ("framewire_source_up", "gauge", "1 while a source is being read."),
    ("framewire_bad_messages_total", "counter", "Messages dropped because they broke the wire format."),
    ("framewire_provider_info", "gauge", "The execution provider an infer worker uses."),
    ("framewire_backend_up", "gauge", "1 while an infer worker's backend (a Triton server) answers, 0 while it waits for it."),
    ("framewire_backend_outages_total", "counter", "Times an infer worker found its backend not answering."),
    ("framewire_backend_requests_total", "counter", "Requests the backend server finished for the model (all its clients)."),
    ("framewire_backend_queue_seconds_total", "counter", "Seconds those requests waited in the server's queue."),
    ("framewire_backend_compute_seconds_total", "counter", "Seconds the server computed those requests (input, infer, output)."),
    ("framewire_segments_total", "counter", "Video segments closed, per source and output."),
    ("framewire_segment_bytes_total", "counter", "Bytes of the video segments closed, per source and output."),
    ("framewire_segments_deleted_total", "counter", "Old video segments deleted by retention, per source and output."),
    ("framewire_output_messages_total", "counter",
     "An output's running totals, per output and counter (a sink's queued, sent, delivered, dropped, "
     "failed, events, suppressed, reconnects, retries)."),
)


def declare(metrics: Metrics) -> Metrics:
    for name, kind, text in (*FAMILIES, *track_counts.FAMILIES):
        metrics.declare(name, kind, text)
    return metrics


class Telemetry:
    """The hub's observer that keeps the daemon's metrics: counters and histograms as frames move,
    gauges once a tick. `process=True` adds the daemon's own process metrics (ops.metrics)."""

    def __init__(self, *, process: bool = False) -> None:
        self.metrics = declare(Metrics(process=process))
        self.gauges = Gauges(self.metrics)
        self.processes = WorkerProcesses()
        self.metrics.collect_also(self.processes.collect)
        self.live = LiveStats()
        """Each source's rate and latency over the last seconds (the console, the terminal)."""

    def on_stage_done(self, source: str, stage: str, seconds: float | None) -> None:
        self.metrics.inc("framewire_frames_total", source=source, stage=stage)
        if seconds is not None:
            self.metrics.observe("framewire_stage_latency_seconds", seconds, stage=stage)

    def on_done(self, source: str, latency_s: float | None) -> None:
        self.metrics.inc("framewire_frames_total", source=source, stage="output")
        if latency_s is not None:
            self.metrics.observe("framewire_end_to_end_latency_seconds", latency_s, source=source)
        self.live.done(source, latency_s)

    def on_failed(self, source: str, stage: str) -> None:
        self.metrics.inc("framewire_failed_frames_total", source=source, stage=stage)

    def on_bad_message(self, reason: str) -> None:
        self.metrics.inc("framewire_bad_messages_total", reason=reason)

    def on_worker_restarted(self, stage: str) -> None:
        self.metrics.inc("framewire_worker_restarts_total", stage=stage)

    def on_worker_stalled(self, stage: str) -> None:
        self.metrics.inc("framewire_worker_stalls_total", stage=stage)

    def on_provider(self, stage: str, index: int, provider: str) -> None:
        self.metrics.set("framewire_provider_info", 1, stage=stage, index=index, provider=provider)

    def on_backend(self, stage: str, index: int, available: bool) -> None:
        self.metrics.set("framewire_backend_up", 1.0 if available else 0.0, stage=stage, index=index)
        if not available:
            self.metrics.inc("framewire_backend_outages_total", stage=stage)

    def on_backend_times(self, stage: str, model: str, times: Mapping[str, Any]) -> None:
        # The server's own totals, as last read: Prometheus takes a restarted server's reset as such.
        for key, name in (("requests", "requests"), ("queue_s", "queue_seconds"), ("compute_s", "compute_seconds")):
            value = times.get(key)
            if isinstance(value, int | float):
                self.metrics.set(f"framewire_backend_{name}_total", float(value), stage=stage, model=model)

    def on_segment(self, source: str, output: str, size: int, deleted: int) -> None:
        self.metrics.inc("framewire_segments_total", source=source, output=output)
        self.metrics.inc("framewire_segment_bytes_total", size, source=source, output=output)
        if deleted:
            self.metrics.inc("framewire_segments_deleted_total", deleted, source=source, output=output)

    def on_output_counts(self, output: str, counts: Mapping[str, int]) -> None:
        for counter, value in counts.items():
            self.metrics.set("framewire_output_messages_total", float(value), output=output, counter=counter)

    def on_track_result(self, source: str, result: Any) -> None:
        track_counts.count(self.metrics, source, result)
        self.live.counted(source, result)

    def on_tick(self, router: Router, roster: Roster, inputs: Inputs, pids: Mapping[str, int]) -> None:
        self.gauges.update(router, roster, inputs)
        self.processes.update(pids)
        self.live.tick(inputs)

    def forget(self, source_id: str) -> None:
        """A removed source's metric series go (it keeps its final counts until then)."""
        self.gauges.forget(source_id)
        self.live.forget(source_id)
        self.metrics.forget("source", source_id)


class Gauges:
    """Sets the gauge families from the hub's state, and the frame rates once a second."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._rates_at = time.monotonic()
        self._marks: dict[Labels, float] = {}

    def update(self, router: Router, roster: Roster, inputs: Inputs) -> None:
        m = self.metrics
        names = router.stages + router.outputs
        m.replace("framewire_queue_depth", {(("stage", n),): float(router.depth(n)) for n in names})
        m.replace(
            "framewire_frames_in_flight",
            {(("stage", n),): float(sum(len(p.inflight) for p in peers)) for n, peers in roster.by_stage.items()},
        )
        m.replace(
            "framewire_workers",
            {(("stage", n),): float(sum(1 for p in peers if p.ready)) for n, peers in roster.by_stage.items()},
        )
        m.replace("framewire_source_moves_total", {(("stage", n),): float(c) for n, c in router.moved.items() if c})
        self._sources(router, inputs)
        self._rates()

    def _sources(self, router: Router, inputs: Inputs) -> None:
        families: dict[str, dict[Labels, float]] = {
            name: {}
            for name in (
                "framewire_pool_slots", "framewire_pool_slots_used", "framewire_dropped_frames_total",
                "framewire_source_up", "framewire_reconnects_total", "framewire_source_offline_seconds_total",
                "framewire_source_online", "framewire_corrupt_frames_total", "framewire_rejected_messages_total",
                "framewire_latency_over_budget_total", "framewire_audio_windows_missing_total",
                "framewire_audio_gap_seconds_total",
            )
        }
        for record in inputs.every():  # an ended source keeps its final counts until it is removed
            sid = record.source_id
            key = (("source", sid),)
            ended = sid in inputs.ended or router.ended(sid)
            if record.pool is not None:
                families["framewire_pool_slots"][key] = float(record.pool.layout.slots)
                families["framewire_pool_slots_used"][key] = float(router.in_flight(sid))
            dropped = families["framewire_dropped_frames_total"]
            dropped[(("reason", "policy"), ("source", sid))] = float(record.dropped)
            dropped[(("reason", "stale"), ("source", sid))] = float(record.stale)
            dropped[(("reason", "overflow"), ("source", sid))] = float(record.overflow)
            dropped[(("reason", "lost"), ("source", sid))] = float(record.lost)
            families["framewire_source_up"][key] = 0.0 if ended else 1.0
            families["framewire_reconnects_total"][key] = float(record.reconnects)
            families["framewire_source_offline_seconds_total"][key] = float(record.offline_s)
            read = not (ended or router.ending(sid))  # as GET /sources says: draining is read no more
            families["framewire_source_online"][key] = 1.0 if record.online and read else 0.0
            families["framewire_corrupt_frames_total"][key] = float(record.corrupt)
            if record.plan.options.latency_budget_ms:
                families["framewire_latency_over_budget_total"][key] = float(record.over_budget)
            for reason, count in record.rejected.items():
                families["framewire_rejected_messages_total"][(("reason", reason), ("source", sid))] = float(count)
            for what, amount in record.audio.items():
                if what == "gap_s":
                    families["framewire_audio_gap_seconds_total"][key] = amount
                else:
                    families["framewire_audio_windows_missing_total"][(("action", what), ("source", sid))] = amount
        for name, values in families.items():
            self.metrics.replace(name, values)

    def _rates(self) -> None:
        now = time.monotonic()
        if now - self._rates_at < 1.0:
            return
        fps: dict[Labels, float] = {}
        for labels, total in self.metrics.values("framewire_frames_total").items():
            mark = self._marks.get(labels, total)
            fps[labels] = (total - mark) / (now - self._rates_at)
            self._marks[labels] = total
        self.metrics.replace("framewire_fps", fps)
        self._rates_at = now

    def forget(self, source_id: str) -> None:
        """A retired source's rate marks go (its counters keep their last values)."""
        for labels in list(self._marks):
            if ("source", source_id) in labels:
                del self._marks[labels]


class WorkerProcesses:
    """`framewire_worker_cpu_seconds_total` and `framewire_worker_resident_memory_bytes` per worker
    process (`process="infer[0]"`), read from /proc at scrape time; the hub sets the pids once a tick.
    prometheus_client's own process metrics cover the supervisor's process only."""

    TICKS = os.sysconf("SC_CLK_TCK")
    PAGE = os.sysconf("SC_PAGE_SIZE")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pids: dict[str, int] = {}

    def update(self, pids: Mapping[str, int]) -> None:
        with self._lock:
            self._pids = dict(pids)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            pids = dict(self._pids)
        cpu = Metric("framewire_worker_cpu_seconds", "CPU time of each worker process (user and system).", "counter")
        rss = Metric("framewire_worker_resident_memory_bytes", "Resident memory of each worker process.", "gauge")
        for title, pid in sorted(pids.items()):
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:  # it ended since the last tick
                continue
            # After the command come state (field 3), ..., utime (14), stime (15), ..., rss in pages (24).
            cpu.add_sample("framewire_worker_cpu_seconds_total", {"process": title},
                           (int(fields[11]) + int(fields[12])) / self.TICKS)  # fmt: skip
            rss.add_sample("framewire_worker_resident_memory_bytes", {"process": title}, int(fields[21]) * self.PAGE)
        yield cpu
        yield rss
