"""`bench triton -c FILE --url HOST:PORT`: the config's job with ONNX Runtime in the daemon against the
same job with `engine.backend: triton` on a Triton server that serves the same model, over the gRPC
socket and through system shared memory. Per variant: frames per second (whole job and steady
state), the infer stage's time per frame (p50/p99: the request's round trip for Triton) and end-to-end
latency, CPU time per frame of the daemon's processes (Triton's own CPU is not in it).

The server is the caller's (docs/guides/triton.md says how to start one; tests/support/triton.py is
the one the tests use). Variants alternate from one repeat to the next; medians are reported.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import harness

VARIANTS = ("onnxruntime", "triton-grpc", "triton-shm")


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    add_config_args(parser)
    parser.add_argument("--url", required=True, help="the Triton server's gRPC address, host:port")
    parser.add_argument("--model", default=None, help="the model's name there (default: the file's name)")
    parser.add_argument(
        "--header", action="append", default=[], metavar="NAME=VALUE",
        help="a gRPC header for every call (pytriton's access token for shared memory); ${VAR} works",
    )  # fmt: skip
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--frames", type=int, default=None, help="stop the source after this many frames")
    parser.add_argument("--repeat", type=int, default=3, help="runs per variant; medians reported")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    parser.add_argument(
        "--max-load", type=float, default=None,
        help="before each run, wait (up to 45 s) for the 1-minute load average to drop below this",
    )  # fmt: skip


def variant(config: Any, name: str, args: argparse.Namespace) -> Any:
    """The config for one variant: the engine swapped, everything else as it is."""
    from framewire import validate_config

    raw = config.model_dump(mode="json", exclude_none=True)
    if args.frames is not None:
        raw["sources"][0]["max_frames"] = args.frames
    if name != "onnxruntime":
        headers = dict(item.split("=", 1) for item in args.header)
        triton = {"url": args.url, "headers": headers, "shared_memory": "system" if name == "triton-shm" else "none"}
        if args.model:
            triton["model"] = args.model
        raw["engine"] = {**raw["engine"], "backend": "triton", "triton": triton}
    return validate_config(raw, f"bench triton {name}")


def run(args: argparse.Namespace) -> int:
    from framewire import load_config
    from framewire.components import resolve_inputs

    from bench.jobs import describe_job, redirect_outputs
    from bench.runs import run_daemon

    config = resolve_inputs(load_config(args.config, args.overrides), [harness.ROOT])
    jobs = {name: variant(config, name, args) for name in args.variants}
    folder = Path(tempfile.mkdtemp(prefix="fw-bench-triton-"))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in jobs}
    try:
        for index in range(max(1, args.repeat)):
            order = list(jobs) if index % 2 == 0 else list(reversed(jobs))
            for name in order:
                if args.max_load is not None:
                    harness.wait_for_quiet(args.max_load, harness.QUIET_WAIT_S, harness.stderr)
                load = harness.load_average()
                stats = run_daemon(redirect_outputs(jobs[name], folder / f"{name}-{index}"))
                stats["load_before"] = load
                runs[name].append(stats)
                harness.stderr(f"{name} #{index}: {stats['fps']:.1f} fps, exit {stats['exit_code']}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result = {
        "benchmark": "triton",
        "machine": harness.machine(),
        "job": describe_job(config),
        "config": str(args.config),
        "overrides": list(args.overrides),
        "url": args.url,
        "repeat": args.repeat,
        "variants": {name: summary(r) for name, r in runs.items()},
    }
    harness.write_json(args.json, result)
    harness.say(format_table(result))
    return 1 if any(r["exit_code"] for rs in runs.values() for r in rs) else 0


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    med = harness.median_of(runs)
    infer = [r.get("stage_latency_ms", {}).get("infer", {}) for r in runs]
    return {
        "frames": med["frames"],
        "fps": med["fps"],
        "steady_fps": med["steady_fps"],
        "startup_s": med["startup_s"],
        "cpu_ms_per_frame": med["cpu_ms_per_frame"],
        "latency_ms": med["latency_ms"],
        "infer_ms": {q: harness.median(i.get(q) for i in infer) for q in ("p50", "p99")},
        "exit_codes": [r["exit_code"] for r in runs],
        "load_before": [r["load_before"][0] for r in runs],
        "runs": [{k: r[k] for k in ("fps", "steady_fps", "cpu_ms_per_frame")} for r in runs],
    }


def format_table(result: Mapping[str, Any]) -> str:
    rows = [
        [name, v["frames"], v["fps"], v["steady_fps"], v["infer_ms"]["p50"], v["infer_ms"]["p99"],
         v["latency_ms"]["p50"], v["latency_ms"]["p99"], v["cpu_ms_per_frame"]]
        for name, v in result["variants"].items()
    ]  # fmt: skip
    head = f"bench triton ({result['url']}): {result['repeat']} run(s) per variant, medians"
    headers = ["variant", "frames", "fps", "steady fps", "infer p50 ms", "infer p99 ms", "e2e p50 ms", "e2e p99 ms"]
    return head + "\n" + harness.table([*headers, "CPU ms/frame (daemon)"], rows)
