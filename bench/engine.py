"""`bench engine -c FILE`: each backend, precision and batch size on real frames of a video.

For every variant (`bench/variants.py`; default: every one this machine has) a fresh process opens
the engine as an infer worker would (batch rewrite included) and measures:

- start-up: opening the engine (session creation, TensorRT build or cache load), in seconds;
- per batch size (`--batches 1,2,4,8`): latency of one inference call p50/p90/p99 in ms, per-frame
  time (p50 / batch) and throughput in frames per second (frames over the summed call times), after
  a warm-up, for at least `--seconds` and `--min-iterations`;
- memory: peak RSS of the process (ru_maxrss, which includes Python, ONNX Runtime and the decoded
  frames) and its growth from just before the engine opened; on a GPU, device memory in use after
  the runs less before opening (cudaMemGetInfo: the whole device, so nothing else should run there).

A model with a fixed batch of 1 whose graph cannot be rewritten gets rows for batch 1 only.
`--repeat N` runs every variant N times (interleaved) and reports medians, with the 1-minute load
average before each run (`--max-load` waits, up to `--max-wait` seconds, for a quieter machine). `--json` writes
everything, `--chart` a PNG (throughput and per-frame latency against batch size), and
`--compare OLD.json NEW.json` prints the ratio NEW/OLD of each row instead of measuring.

Here: the command and the measurement of each variant in its own process; the table, chart and
comparison in bench/engine_report.py.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

from bench import harness
from bench.engine_report import chart, compare, render

ROOT = harness.ROOT


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    add_config_args(parser)
    parser.add_argument("--video", help="frames to run on (default: the config's first source)")
    parser.add_argument(
        "--frames", type=int, default=16, help="distinct frames cycled through (default: %(default)s)"
    )
    parser.add_argument("--batches", default="1,2,4,8", help="batch sizes (default: %(default)s)")
    parser.add_argument(
        "--variants", help="backend:device:precision list (default: every variant this machine has)"
    )
    parser.add_argument(
        "--int8-model", metavar="PATH", help="INT8 model for onnxruntime:cpu:int8 (default: quantise now)"
    )
    parser.add_argument(
        "--calib-frames", type=int, default=128, help="frames to quantise on when no --int8-model"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="intra-op threads (default: engine.threads)"
    )
    parser.add_argument(
        "--warmup", type=int, default=5, help="untimed calls per batch size (default: %(default)s)"
    )
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="timed seconds per batch size (default: %(default)s)"
    )
    parser.add_argument("--min-iterations", type=int, default=20, help="timed calls per batch size, at least")
    parser.add_argument(
        "--max-iterations", type=int, default=2000, help="timed calls per batch size, at most"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of every variant; medians reported")
    parser.add_argument(
        "--max-load", type=float, default=None, help="before each run, wait for a load average below this"
    )
    parser.add_argument(
        "--max-wait", type=float, default=120.0, help="seconds to wait for --max-load (default: %(default)s)"
    )
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds a variant may take (TensorRT builds)"
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    parser.add_argument("--chart", metavar="PATH", help="write a PNG chart here")
    parser.add_argument(
        "--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two --json results and exit"
    )


def run(args: argparse.Namespace) -> int:
    if args.compare:
        return compare(args.compare[0], args.compare[1], args.json)
    from bench import variants as vmod
    from framewire import UsageError, load_config
    from framewire.components import resolve_inputs, task_from_config

    batches = _int_list(args.batches, "--batches")
    if args.frames < 1 or args.repeat < 1:
        raise UsageError("--frames and --repeat must be at least 1")
    config = resolve_inputs(load_config(args.config, args.overrides), [ROOT])
    if args.threads is not None:
        config = config.model_copy(
            update={"engine": config.engine.model_copy(update={"threads": args.threads})}
        )
    task = task_from_config(config)
    video = args.video or config.sources[0].uri
    chosen = vmod.parse(args.variants) if args.variants else vmod.available()
    int8_model, quantised = None, None
    if any(v.uses_int8_model for v in chosen):
        int8_model, quantised = vmod.ensure_int8_model(
            config, task, args.int8_model, video, args.calib_frames
        )
    jobs = [
        {
            "config": config,
            "variant": v,
            "model": vmod.model_path(config, v, int8_model),
            "video": video,
            "frames": args.frames,
            "batches": batches,
            "warmup": args.warmup,
            "seconds": args.seconds,
            "min_iterations": args.min_iterations,
            "max_iterations": args.max_iterations,
        }
        for v in chosen
    ]
    runs: dict[str, list[dict[str, Any]]] = {v.label: [] for v in chosen}
    for repeat in range(args.repeat):
        for job in jobs:
            if args.max_load is not None:
                harness.wait_for_quiet(args.max_load, args.max_wait, harness.stderr)
            label = job["variant"].label
            load = harness.load_average()
            harness.stderr(f"bench engine: {label} (run {repeat + 1}/{args.repeat}, load {load})")
            found = _in_child(job, args.timeout)
            found["load_before"] = load[0]
            runs[label].append(found)
    results = [_median_result(label, found) for label, found in runs.items()]
    report = {
        "benchmark": "engine",
        "machine": harness.machine(),
        "config": str(args.config),
        "model": config.model.path,
        "int8_model": int8_model,
        "quantised_now": quantised,
        "video": video,
        "threads": config.engine.threads,
        "batches": batches,
        "repeat": args.repeat,
        "results": results,
    }
    harness.say(render(report))
    harness.write_json(args.json, report)
    if args.chart:
        chart(report, args.chart)
    return 1 if any(r.get("error") for r in results) else 0


# --- one variant, in its own process ---------------------------------------------------------------


def _in_child(job: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        future = pool.submit(measure, dict(job))
        try:
            return future.result(timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - a crash or timeout becomes the variant's error
            return {"variant": job["variant"].label, "error": _first_line(exc), "rows": []}


def measure(job: Mapping[str, Any]) -> dict[str, Any]:
    """Open one variant's engine and time it at every batch size (runs in a fresh process)."""
    import resource

    import numpy as np
    import psutil

    from bench import variants as vmod
    from framewire.components import task_feeds, task_from_config, video_frames

    config, variant = job["config"], job["variant"]
    batches: list[int] = list(job["batches"])
    task = task_from_config(config)
    result: dict[str, Any] = {
        "variant": variant.label,
        "backend": variant.backend,
        "device": variant.device,
        "precision": variant.precision,
        "model": job["model"],
        "rows": [],
        "error": None,
    }
    try:
        inputs = [
            feed[task.input_name] for feed in task_feeds(task, video_frames(job["video"], job["frames"]))
        ]
        if not inputs:
            raise ValueError(f"no frames in {job['video']}")
        result["input_shape"] = list(inputs[0].shape)
        gpu_before = _gpu_used_mib() if variant.on_gpu else None
        rss_before = psutil.Process().memory_info().rss
        started = time.perf_counter()
        engine = vmod.open_variant(config, variant, job["model"], max(batches), job["video"], task)
        result["startup_s"] = time.perf_counter() - started
        result["provider"] = engine.provider
        task.check_model(engine.inputs, engine.outputs)
        spec = next(t for t in engine.inputs if t.name == task.input_name)
        batchable = not isinstance(spec.shape[0], int)
        result["batchable"] = batchable
        for batch in batches:
            if batch > 1 and not batchable:
                result["rows"].append({"batch": batch, "skipped": "the model takes a fixed batch of 1"})
                continue
            stacks = [
                np.concatenate([inputs[(start + i) % len(inputs)] for i in range(batch)], axis=0)
                for start in range(0, max(len(inputs), batch), batch)
            ]
            result["rows"].append(_time_batch(engine, task, stacks, batch, job))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        result["peak_rss_mib"] = peak / harness.MIB
        result["engine_rss_mib"] = max(0, peak - rss_before) / harness.MIB
        if gpu_before is not None:
            after = _gpu_used_mib()
            result["gpu_mem_mib"] = None if after is None else after - gpu_before
        engine.close()
    except Exception as exc:  # noqa: BLE001 - reported in the table, the other variants still run
        result["error"] = _first_line(exc)
    return result


def _time_batch(
    engine: Any, task: Any, stacks: Sequence[Any], batch: int, job: Mapping[str, Any]
) -> dict[str, Any]:
    name, outputs = task.input_name, task.output_names
    for i in range(job["warmup"]):
        engine.infer({name: stacks[i % len(stacks)]}, outputs)
    times: list[float] = []
    began = time.perf_counter()
    i = 0
    while i < job["max_iterations"] and (
        i < job["min_iterations"] or time.perf_counter() - began < job["seconds"]
    ):
        t0 = time.perf_counter()
        engine.infer({name: stacks[i % len(stacks)]}, outputs)
        times.append(time.perf_counter() - t0)
        i += 1
    ms = [t * 1000.0 for t in times]
    p50 = harness.percentile(ms, 50)
    return {
        "batch": batch,
        "iterations": len(times),
        "latency_ms": {"p50": p50, "p90": harness.percentile(ms, 90), "p99": harness.percentile(ms, 99)},
        "per_frame_ms": (p50 or 0.0) / batch,
        "throughput_fps": batch * len(times) / sum(times) if times else None,
    }


def _gpu_used_mib(device: int = 0) -> float | None:
    """Device memory in use (total - free), MiB; None without cuda-python or a GPU."""
    try:
        # An internal on purpose (docs/benchmarks.md, tests/unit/bench/test_public_api.py): device
        # memory read through the cuda-python binding the TensorRT backend itself uses.
        from framewire.engines import cuda

        rt = cuda.runtime()
        cuda.set_device(device)
        err, free, total = rt.cudaMemGetInfo()
        if cuda.failed(err):
            return None
        return (int(total) - int(free)) / harness.MIB
    except Exception:  # noqa: BLE001 - memory is reported where it can be
        return None


def _median_result(label: str, found: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Medians over repeats of a variant: scalars and each batch row."""
    good = [r for r in found if not r.get("error")]
    if not good:
        return dict(found[0]) if found else {"variant": label, "error": "not run", "rows": []}
    merged = harness.median_of(
        [{k: v for k, v in r.items() if k not in ("rows", "load_before")} for r in good]
    )
    merged["load_before"] = [r.get("load_before") for r in found]  # 1-minute load average before each run
    rows = []
    for position, row in enumerate(good[0]["rows"]):
        same = [r["rows"][position] for r in good if len(r["rows"]) > position]
        if "skipped" in row:
            rows.append(dict(row))
            continue
        merged_row = harness.median_of(same)
        merged_row["p50_ms_runs"] = [r["latency_ms"]["p50"] for r in same]  # the spread between runs
        rows.append(merged_row)
    merged["rows"] = rows
    merged["runs"] = len(good)
    if len(good) < len(found):
        merged["failed_runs"] = [r.get("error") for r in found if r.get("error")]
    return merged


def _int_list(text: str, option: str) -> list[int]:
    from framewire import UsageError

    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"{option}: expected comma-separated integers, got {text!r}") from None
    if not values or values[0] < 1:
        raise UsageError(f"{option}: expected positive integers, got {text!r}")
    return values


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else "") or type(exc).__name__
