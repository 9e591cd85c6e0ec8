"""One run of a job, by either side of a comparison: through the daemon (`framewire.start`, this
process being the hub) or through the hand-written loop (bench/loop.py, in a child process); and
what it measured, from its records and its processes (bench/pipeline.py says which figures)."""

from __future__ import annotations

import json
import resource
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import harness
from bench.jobs import jsonl_paths

STAGES = ("decode", "preprocess", "infer", "postprocess", "composite")


class _Rusage:
    """CPU seconds of this process and of all its descendants, between two readings.

    Children that ended and were waited for count through getrusage. Workers forked by a fork
    server are waited for by the server, which lives on: their time is in the server's own
    "children" times, read (with its own) from /proc for every child still alive at the end.
    """

    def __init__(self) -> None:
        self.self0 = resource.getrusage(resource.RUSAGE_SELF)
        self.kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.live0 = _live_children()

    def elapsed(self) -> tuple[float, float]:
        s = resource.getrusage(resource.RUSAGE_SELF)
        k = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = (s.ru_utime - self.self0.ru_utime) + (s.ru_stime - self.self0.ru_stime)
        kids = (k.ru_utime - self.kids0.ru_utime) + (k.ru_stime - self.kids0.ru_stime)
        for key, total in _live_children().items():
            kids += total - self.live0.get(key, 0.0)
        return own, kids


def _live_children() -> dict[tuple[int, float], float]:
    """(pid, start time) -> CPU seconds of each live child, its waited-for children included."""
    import psutil

    out = {}
    for child in psutil.Process().children():
        try:
            t = child.cpu_times()
            out[(child.pid, child.create_time())] = t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return out


def run_daemon(job: Any, *, fresh: bool = True) -> dict[str, Any]:
    """The job through `framewire.start(job)`, this process being the hub, as `run` starts it.

    `fresh`: stop the fork server a previous run left, so this run pays for starting one (its
    imports) as a `run_pipeline.py run` does, and compares fairly with the loop, which is a new
    process every time.
    """
    import framewire

    if fresh:
        stop_fork_server()

    expected = expected_frames(job)
    done_times: list[float] = []
    sampler = harness.ProcessSampler()

    def progress(done: int, total: int | None) -> None:
        done_times.append(time.time())
        if expected and len(done_times) == max(1, expected // 2):
            sampler.snapshot()

    usage = _Rusage()
    sampler.start()
    started = time.time()
    report = framewire.start(job, progress=progress).wait()
    ended = time.time()
    sampler.stop()
    own, kids = usage.elapsed()
    own = max(0.0, own - sampler.sampler_cpu_s)
    frames = sum(report.frames.values())
    stats = side_stats(
        job,
        frames=frames,
        started=started,
        ended=ended,
        done_times=done_times,
        cpu_s=own + kids,
    )
    stats.update(
        exit_code=report.exit_code,
        error=report.error,
        cpu_s_hub=own,
        cpu_s_by_process=_this_run(sampler.by_name(), own),
        memory=sampler.snapshot_memory or {},
        peak_rss_mib=sampler.peak_rss / harness.MIB,
        stage_workers=stage_workers(job),
    )
    return stats


def _this_run(by_name: dict[str, float], own: float) -> dict[str, float]:
    """Each process's CPU seconds, the hub's (this process) for this run only: the sampler reads a
    process's total, and this one also ran the benchmark's earlier runs."""
    return {name: (round(own, 3) if name == harness.HUB_PROCESS else cpu) for name, cpu in by_name.items()}


def stage_workers(job: Any) -> dict[str, int]:
    """Processes running each stage (fused stages run in every infer process)."""
    from framewire.components import infer_workers

    infer = infer_workers(job.engine)
    stages = job.stages
    return {
        "infer": infer,
        "preprocess": infer if stages.fuse else stages.preprocess.workers,
        "postprocess": infer if stages.fuse else stages.postprocess.workers,
        "composite": infer if stages.fuse else stages.composite.workers,
        "decode": len(job.sources),
    }


def stop_fork_server() -> None:
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:  # a private API: without it, later runs reuse the first one's server
        stop()


def run_hand_loop(job: Any, engine_threads: int) -> dict[str, Any]:
    """The job as bench/loop.py runs it, in a spawned child process."""
    import multiprocessing

    from bench.loop import loop_main

    result_path = Path(tempfile.mkstemp(prefix="fw-loop-", suffix=".json")[1])
    sampler = harness.ProcessSampler(include_self=False)
    usage = _Rusage()
    ctx = multiprocessing.get_context("spawn")
    started = time.time()
    process = ctx.Process(
        target=loop_main,
        args=(job.model_dump(mode="json", exclude_none=True), engine_threads, str(result_path)),
        name="framewire-bench-loop",
    )
    sampler.start()
    process.start()
    process.join()
    ended = time.time()
    sampler.stop()
    _, kids = usage.elapsed()
    try:
        child = json.loads(result_path.read_text(encoding="utf-8") or "{}")
    except (OSError, json.JSONDecodeError):
        child = {}
    finally:
        result_path.unlink(missing_ok=True)
    frames = sum(child.get("frames", {}).values())
    stats = side_stats(
        job,
        frames=frames,
        started=started,
        ended=ended,
        done_times=child.get("done_times", []),
        cpu_s=kids,
    )
    stats.update(
        exit_code=process.exitcode,
        error=None if process.exitcode == 0 else f"the loop exited with {process.exitcode}",
        engine_threads=engine_threads,
        cpu_s_by_process=sampler.by_name(),
        memory=child.get("memory") or {},  # the loop reads its own, half-way through
        peak_rss_mib=sampler.peak_rss / harness.MIB,
        stage_workers={s: 1 for s in STAGES},
    )
    return stats


def expected_frames(job: Any) -> int | None:
    """Frames the job will process, from the containers' frame counts and `max_frames`."""
    total = 0
    for source in job.sources:
        n, _ = _stream_facts(source.uri)
        if source.max_frames:
            n = min(n, source.max_frames) if n else source.max_frames
        if not n:
            return None
        total += n
    return total


def frame_interval_ms(job: Any) -> float | None:
    """The longest frame interval of the job's sources (1000 / fps), None when a rate is unknown."""
    rates = [_stream_facts(s.uri)[1] for s in job.sources]
    known = [r for r in rates if r]
    if not rates or len(known) < len(rates):
        return None
    return 1000.0 / min(known)


def _stream_facts(uri: str) -> tuple[int | None, float | None]:
    """(frame count, frames per second) of a video as its container declares them."""
    import av

    try:
        with av.open(uri) as container:
            stream = container.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate
            return (stream.frames or None), (float(rate) if rate else None)
    except Exception:  # noqa: BLE001 - unknown: the figures that need it are left out
        return None, None


def side_stats(
    job: Any, *, frames: int, started: float, ended: float, done_times: Sequence[float], cpu_s: float
) -> dict[str, Any]:
    """FPS, start-up, CPU per frame, latencies and stage busy time of one side, from its records."""
    wall = ended - started
    records = []
    for path in jsonl_paths(job).values():
        if path.exists():
            records += [json.loads(line) for line in path.open(encoding="utf-8")]
    total = [r["latency_ms"]["total"] for r in records if "total" in r.get("latency_ms", {})]
    stage_latency: dict[str, dict[str, float | None]] = {}
    busy: dict[str, float] = {}
    for stage in STAGES:
        spans = [r["latency_ms"][stage] for r in records if stage in r.get("latency_ms", {})]
        if not spans:
            continue
        stage_latency[stage] = {
            "p50": harness.percentile(spans, 50),
            "p99": harness.percentile(spans, 99),
        }
        busy[stage] = sum(spans) / 1000.0 / wall if wall > 0 else 0.0
    first_done = min(done_times) if done_times else None
    # The latency target for real-time sources: end to end no more than the stages' p99 summed plus
    # one frame interval (how long a frame may wait for the one before it).
    interval = frame_interval_ms(job)
    p99_sum = sum(v["p99"] for v in stage_latency.values() if v["p99"] is not None)
    p99 = harness.percentile(total, 99)
    budget = {
        "realtime": all(s.realtime for s in job.sources),
        "stage_p99_sum_ms": p99_sum,
        "frame_interval_ms": interval,
        "budget_ms": p99_sum + interval if interval is not None else None,
        "p99_ms": p99,
        "within": (p99 <= p99_sum + interval) if (p99 is not None and interval is not None) else None,
    }
    return {
        "frames": frames,
        "wall_s": wall,
        "fps": frames / wall if wall > 0 else 0.0,
        "steady_fps": harness.steady_fps(done_times),
        "startup_s": (first_done - started) if first_done is not None else None,
        "cpu_s": cpu_s,
        "cpu_ms_per_frame": cpu_s / frames * 1000.0 if frames else None,
        "cores_used": cpu_s / wall if wall > 0 else None,
        "latency_ms": {
            "p50": harness.percentile(total, 50),
            "p99": harness.percentile(total, 99),
        },
        "stage_latency_ms": stage_latency,
        "stage_busy": busy,
        "latency_budget": budget,
    }
