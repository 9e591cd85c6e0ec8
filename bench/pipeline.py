"""`bench pipeline -c FILE`: a config's job through the daemon and through the equivalent hand-written
loop (bench/loop.py), in the same run, on the same input, into the same kinds of output files.

Both sides get the same threads: the loop's engine gets as many intra-op threads as the daemon's
infer processes have together (`engine.threads` x `engine.processes_per_device`, unless
`--loop-threads` says otherwise); decode, OpenCV and x264 keep their defaults on both sides. Outputs
go to a temporary folder (ZeroMQ outputs to ipc:// sockets in it); a JSONL output is added when the
config has none, since the latencies come from its records. Each repeat runs both sides, in
alternating order; the reported figures are medians over the repeats, and the ratio is the median
of the per-repeat ratios.

Measured per side: frames per second over the whole job (wall clock from start to the last file
closed) and steady-state (from the 10th percentile of finished frames to the last, leaving out
start-up), start-up time (to the first finished frame), CPU time per frame of every process
(getrusage of the children plus this process, less the sampler thread), end-to-end latency p50/p99
(`latency_ms.total` of the JSONL records: from the end of decode to the record being written),
per-stage latency p50/p99 and busy time (sum of a stage's spans over the wall time, across its
workers), the CPU seconds of each process, and the memory of all processes (sum of RSS, PSS, USS,
sampled half-way through the job).
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import harness

STAGES = ("decode", "preprocess", "infer", "postprocess", "composite")


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    add_config_args(parser)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side (default: %(default)s)")
    parser.add_argument(
        "--loop-threads",
        type=int,
        default=None,
        help="intra-op threads of the loop's engine (default: engine.threads x processes_per_device)",
    )
    parser.add_argument("--only", choices=("framewire", "loop"), help="run one side only")
    parser.add_argument(
        "--max-load",
        type=float,
        default=None,
        help="before each run, wait (up to 45 s) for the 1-minute load average to drop below this",
    )
    parser.add_argument("--keep", metavar="DIR", help="keep the output files in DIR (else a temp folder)")


def run(args: argparse.Namespace) -> int:
    from framewire import load_config
    from framewire.components import resolve_inputs

    config = resolve_inputs(load_config(args.config, args.overrides), [harness.ROOT])
    result = compare(
        config,
        repeat=max(1, args.repeat),
        loop_threads=args.loop_threads,
        only=args.only,
        max_load=args.max_load,
        keep=args.keep,
        log=harness.stderr,
    )
    result["config"] = str(args.config)
    result["overrides"] = list(args.overrides)
    harness.write_json(args.json, result)
    harness.say(format_table(result))
    failed = [s for s in ("framewire", "loop") if s in result and result[s].get("exit_code")]
    return 1 if failed else 0


# --- the comparison ------------------------------------------------------------------------------


def compare(
    config: Any,
    *,
    repeat: int = 3,
    loop_threads: int | None = None,
    only: str | None = None,
    max_load: float | None = None,
    keep: str | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run both sides `repeat` times; the medians, the per-run figures and the ratios."""
    threads = loop_threads if loop_threads is not None else default_loop_threads(config)
    folder = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="fw-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    sides = [s for s in ("framewire", "loop") if only in (None, s)]
    try:
        for index in range(repeat):
            order = sides if index % 2 == 0 else list(reversed(sides))
            one: dict[str, Any] = {}
            for side in order:
                if max_load is not None:
                    harness.wait_for_quiet(max_load, harness.QUIET_WAIT_S, log)
                side_dir = folder / f"{side}-{index}"
                job = redirect_outputs(config, side_dir)
                load = harness.load_average()
                if side == "framewire":
                    stats = run_daemon(job)
                else:
                    stats = run_hand_loop(job, threads)
                stats["load_before"] = load
                stats["output_frames"] = count_outputs(job)
                one[side] = stats
                log(
                    f"run {index + 1}/{repeat} {side}: {stats['frames']} frames, {stats['fps']:.1f} fps, "
                    f"steady {stats['steady_fps'] or 0:.1f} fps, load {load[0]:.2f}"
                )
                if not keep:
                    shutil.rmtree(side_dir, ignore_errors=True)
            if len(sides) == 2:
                one["ratio"] = ratios(one["framewire"], one["loop"])
            runs.append(one)
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    result: dict[str, Any] = {
        "benchmark": "pipeline",
        "machine": harness.machine(),
        "job": describe_job(config),
        "loop_engine_threads": threads,
        "repeat": repeat,
        "runs": runs,
    }
    for side in sides:
        result[side] = harness.median_of([r[side] for r in runs])
        result[side]["output_frames"] = runs[-1][side]["output_frames"]
    if len(sides) == 2:
        result["ratio"] = harness.median_of([r["ratio"] for r in runs])
        result["same_output_frames"] = all(
            r["framewire"]["output_frames"] == r["loop"]["output_frames"] for r in runs
        )
    return result


def default_loop_threads(config: Any) -> int:
    """The loop's intra-op threads: all the daemon's infer processes have together (0: ORT decides)."""
    threads = int(config.engine.threads)
    return threads * int(config.engine.processes_per_device) if threads > 0 else 0


def ratios(fw: Mapping[str, Any], loop: Mapping[str, Any]) -> dict[str, float | None]:
    def ratio(a: Any, b: Any) -> float | None:
        return a / b if isinstance(a, int | float) and isinstance(b, int | float) and b > 0 else None

    return {
        "fps": ratio(fw["fps"], loop["fps"]),
        "steady_fps": ratio(fw["steady_fps"], loop["steady_fps"]),
        "cpu_per_frame": ratio(fw["cpu_ms_per_frame"], loop["cpu_ms_per_frame"]),
        "latency_p50": ratio(fw["latency_ms"]["p50"], loop["latency_ms"]["p50"]),
    }


def describe_job(config: Any) -> dict[str, Any]:
    return {
        "sources": [
            {"id": s.id, "uri": s.uri, "realtime": s.realtime, "max_frames": s.max_frames}
            for s in config.sources
        ],
        "model": config.model.path,
        "task": config.model.task,
        "engine": config.engine.model_dump(mode="json"),
        "composite": [c.kind for c in config.composite],
        "outputs": [o.kind for o in config.outputs],
        "stages": config.stages.model_dump(mode="json"),
        "transport": config.transport.model_dump(mode="json"),
    }


def redirect_outputs(config: Any, folder: Path) -> Any:
    """The job with its output files in `folder`, its ZeroMQ outputs on ipc:// sockets there, and a
    JSONL output (for the latencies) when it has none."""
    from framewire import validate_config

    folder.mkdir(parents=True, exist_ok=True)
    raw = config.model_dump(mode="json", exclude_none=True)
    outputs = []
    for index, out in enumerate(raw["outputs"]):
        out = dict(out)
        if out["kind"] in ("video_file", "jsonl"):
            name = Path(out["path"]).name
            if "{source_id}" not in name:
                name = "{source_id}-" + name
            out["path"] = str(folder / f"{index}-{name}")
        elif out["kind"] == "zmq":
            out["endpoint"] = f"ipc://{folder}/zmq-{index}.sock"
        outputs.append(out)
    if not any(o["kind"] == "jsonl" for o in outputs):
        outputs.append({"kind": "jsonl", "path": str(folder / "records-{source_id}.jsonl")})
    raw["outputs"] = outputs
    return validate_config(raw, "bench")


def jsonl_paths(job: Any) -> dict[str, Path]:
    from framewire.components import JsonlOutput, resolve_path

    out = next(o for o in job.outputs if isinstance(o, JsonlOutput))
    return {s.id: Path(resolve_path(out.path, s.id)) for s in job.sources}


def count_outputs(job: Any) -> dict[str, int]:
    """Frames in every output file of the job: `<output index>:<source id>` -> frames."""
    import av

    from framewire.components import JsonlOutput, VideoFileOutput, resolve_path

    counts: dict[str, int] = {}
    for index, out in enumerate(job.outputs):
        for source in job.sources:
            if isinstance(out, VideoFileOutput):
                path = Path(resolve_path(out.path, source.id))
                n = -1
                if path.exists():  # counted by packet: a fragmented MP4's index says 0 frames
                    with av.open(str(path)) as container:
                        n = sum(1 for packet in container.demux(video=0) if packet.size)
                counts[f"{index}.video_file:{source.id}"] = n
            elif isinstance(out, JsonlOutput):
                path = Path(resolve_path(out.path, source.id))
                counts[f"{index}.jsonl:{source.id}"] = (
                    sum(1 for _ in path.open(encoding="utf-8")) if path.exists() else -1
                )
    return counts


# --- one side ------------------------------------------------------------------------------------


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
        _stop_fork_server()

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


def _stop_fork_server() -> None:
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


# --- the table -----------------------------------------------------------------------------------


def format_table(result: Mapping[str, Any]) -> str:
    sides = [s for s in ("framewire", "loop") if s in result]
    rows: list[list[Any]] = []

    def row(label: str, get: Callable[[Mapping[str, Any]], Any], ratio_key: str | None = None) -> None:
        values = [get(result[s]) for s in sides]
        extra = [result.get("ratio", {}).get(ratio_key)] if "ratio" in result else []
        rows.append([label, *values, *extra])

    row("fps (whole job)", lambda s: s["fps"], "fps")
    row("fps (steady state)", lambda s: s["steady_fps"], "steady_fps")
    row("start-up s", lambda s: s["startup_s"])
    row("CPU ms / frame", lambda s: s["cpu_ms_per_frame"], "cpu_per_frame")
    row("cores used", lambda s: s["cores_used"])
    row("latency p50 ms", lambda s: s["latency_ms"]["p50"], "latency_p50")
    row("latency p99 ms", lambda s: s["latency_ms"]["p99"])
    row("stages' p99 + 1 frame ms", lambda s: s.get("latency_budget", {}).get("budget_ms"))
    row("memory PSS MiB", lambda s: s.get("memory", {}).get("pss_mib"))
    row("memory USS MiB", lambda s: s.get("memory", {}).get("uss_mib"))
    row("memory RSS MiB (sum)", lambda s: s.get("memory", {}).get("rss_mib"))
    for stage in STAGES:
        row(f"{stage} busy / p99 ms", functools.partial(_busy, stage=stage))
    headers = ["", *sides] + (["framewire/loop"] if "ratio" in result else [])
    job = result.get("job", {})
    src = job.get("sources", [{}])
    head = (
        f"bench pipeline: {len(src)} source(s) {src[0].get('uri', '?') if src else ''}, "
        f"{result.get('repeat')} repeat(s), medians; loop engine threads {result.get('loop_engine_threads')}"
    )
    return head + "\n" + harness.table(headers, rows)


def _busy(side: Mapping[str, Any], stage: str) -> str | None:
    busy = side.get("stage_busy", {}).get(stage)
    p99 = side.get("stage_latency_ms", {}).get(stage, {}).get("p99")
    if busy is None:
        return None
    return f"{busy:.2f} / {p99:.2f}" if p99 is not None else f"{busy:.2f}"
