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

Here: the command, the comparison and its table; one run of either side in bench/runs.py, the job's
outputs moved and counted in bench/jobs.py.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import harness
from bench.jobs import count_outputs, describe_job, redirect_outputs
from bench.runs import STAGES, run_daemon, run_hand_loop


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
