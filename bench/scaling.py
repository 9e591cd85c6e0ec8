"""`bench scaling -c FILE`: frames per second of the daemon against the number of infer processes
(`engine.processes_per_device`) and of sources (copies of the config's first source, each with its
own id and output files), on the config's model and settings. JSON, a table and a PNG chart.

Every point is a whole daemon run (bench/runs.py `run_daemon`): FPS over the job, steady-state
FPS (start-up left out), CPU time per frame, latency and memory, medians of `--repeat` runs.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import harness


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    add_config_args(parser)
    parser.add_argument("--infer", type=int, nargs="+", default=[1, 2, 3, 4], help="infer processes to try")
    parser.add_argument("--sources", type=int, nargs="+", default=[1, 2, 4], help="numbers of sources to try")
    parser.add_argument("--frames", type=int, default=None, help="stop each source after this many frames")
    parser.add_argument("--repeat", type=int, default=1, help="runs per point; medians reported")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    parser.add_argument("--png", metavar="PATH", help="draw the chart into this PNG file")
    parser.add_argument(
        "--max-load",
        type=float,
        default=None,
        help="before each run, wait (up to 45 s) for the 1-minute load average to drop below this",
    )


def run(args: argparse.Namespace) -> int:
    from framewire import load_config
    from framewire.components import resolve_inputs

    config = resolve_inputs(load_config(args.config, args.overrides), [harness.ROOT])
    result = sweep(
        config,
        infer=args.infer,
        sources=args.sources,
        frames=args.frames,
        repeat=max(1, args.repeat),
        max_load=args.max_load,
        log=harness.stderr,
    )
    result["config"] = str(args.config)
    result["overrides"] = list(args.overrides)
    harness.write_json(args.json, result)
    if args.png:
        chart(result, args.png)
    harness.say(format_table(result))
    return 1 if any(p["exit_code"] for p in result["points"]) else 0


def with_shape(config: Any, infer: int, sources: int, frames: int | None) -> Any:
    """The config with `infer` infer processes and `sources` copies of its first source."""
    from framewire import validate_config

    raw = config.model_dump(mode="json", exclude_none=True)
    first = dict(raw["sources"][0])
    if frames is not None:
        first["max_frames"] = frames
    ids = [f"{first['id']}{i}" for i in range(sources)] if sources > 1 else [first["id"]]
    raw["sources"] = [{**first, "id": source_id} for source_id in ids]
    raw["engine"]["processes_per_device"] = infer
    for out in raw["outputs"]:
        if "path" in out and sources > 1 and "{source_id}" not in out["path"]:
            out["path"] = "{source_id}-" + out["path"]
    return validate_config(raw, "bench scaling")


def sweep(
    config: Any,
    *,
    infer: Sequence[int] = (1, 2, 3, 4),
    sources: Sequence[int] = (1, 2, 4),
    frames: int | None = None,
    repeat: int = 1,
    max_load: float | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    from bench.jobs import describe_job, redirect_outputs
    from bench.runs import run_daemon

    folder = Path(tempfile.mkdtemp(prefix="fw-scaling-"))
    points = []
    try:
        for n_sources in sources:
            for n_infer in infer:
                runs = []
                for index in range(repeat):
                    if max_load is not None:
                        harness.wait_for_quiet(max_load, harness.QUIET_WAIT_S, log)
                    side_dir = folder / f"s{n_sources}-i{n_infer}-{index}"
                    job = redirect_outputs(with_shape(config, n_infer, n_sources, frames), side_dir)
                    load = harness.load_average()
                    stats = run_daemon(job)
                    stats["load_before"] = load
                    runs.append(stats)
                    shutil.rmtree(side_dir, ignore_errors=True)
                med = harness.median_of(runs)
                point = {
                    "infer_processes": n_infer,
                    "sources": n_sources,
                    "frames": med["frames"],
                    "fps": med["fps"],
                    "steady_fps": med["steady_fps"],
                    "startup_s": med["startup_s"],
                    "cpu_ms_per_frame": med["cpu_ms_per_frame"],
                    "latency_ms": med["latency_ms"],
                    "memory_pss_mib": med.get("memory", {}).get("pss_mib"),
                    "exit_code": max(r["exit_code"] for r in runs),
                    "load_before": [r["load_before"][0] for r in runs],
                }
                points.append(point)
                log(
                    f"sources {n_sources}, infer {n_infer}: {point['fps']:.1f} fps, "
                    f"steady {point['steady_fps'] or 0:.1f} fps"
                )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "benchmark": "scaling",
        "machine": harness.machine(),
        "job": describe_job(config),
        "frames_per_source": frames,
        "repeat": repeat,
        "points": points,
    }


def format_table(result: Mapping[str, Any]) -> str:
    rows = [
        [
            p["sources"],
            p["infer_processes"],
            p["frames"],
            p["fps"],
            p["steady_fps"],
            p["startup_s"],
            p["cpu_ms_per_frame"],
            p["latency_ms"]["p50"],
            p["latency_ms"]["p99"],
            p["memory_pss_mib"],
        ]
        for p in result["points"]
    ]
    head = f"bench scaling: {result['repeat']} run(s) per point, medians"
    headers = ["sources", "infer", "frames", "fps", "steady fps", "start-up s", "CPU ms/frame"]
    return head + "\n" + harness.table([*headers, "p50 ms", "p99 ms", "PSS MiB"], rows)


def chart(result: Mapping[str, Any], path: str) -> None:
    """Steady-state and whole-job FPS against infer processes, one line per number of sources."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = result["points"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    for n_sources in sorted({p["sources"] for p in points}):
        mine = sorted((p for p in points if p["sources"] == n_sources), key=lambda p: p["infer_processes"])
        xs = [p["infer_processes"] for p in mine]
        label = f"{n_sources} source{'s' if n_sources > 1 else ''}"
        axes[0].plot(xs, [p["steady_fps"] or 0 for p in mine], marker="o", label=label)
        axes[1].plot(xs, [p["fps"] for p in mine], marker="o", label=label)
    axes[0].set_title("steady state (start-up left out)")
    axes[1].set_title("whole job (start-up included)")
    for ax in axes:
        ax.set_xticks(sorted({p["infer_processes"] for p in points}))
        ax.set_xlabel("infer processes")
        ax.set_ylabel("frames per second (all sources)")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend()
    cpu = result.get("machine", {}).get("cpu", "")
    cores = result.get("machine", {}).get("logical_cores", "")
    clip = Path(str(result["job"]["sources"][0]["uri"])).name
    runs = result.get("repeat", 1)
    per_point = f"median of {runs} runs" if runs > 1 else "one run"
    fig.suptitle(f"framewire scaling: {clip} on {cpu}, {cores} cores ({per_point} per point)")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
