"""`run_pipeline.py doctor`: the checks a user with a GPU runs first (engines.doctor), then a short
benchmark of the configured model on the backend the config picks here, and one line per check.
Exit code 1 when any check failed.

    python run_pipeline.py doctor [-c FILE] [--set ...] [--seconds 3] [--device 0]

Importing this module is cheap; the checks load what they test inside the handler.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def register(sub: Any, add_config_args: Callable[[argparse.ArgumentParser], None]) -> None:
    parser = sub.add_parser(
        "doctor",
        help="check the GPU stack (driver, CUDA, TensorRT, ONNX Runtime providers) and time the config's model",
        description="Report the driver, CUDA runtime, GPUs, TensorRT / ONNX Runtime / cuda-python versions and "
        "the providers that really start; build and run a tiny engine (fp32 and fp16) against ONNX Runtime on "
        "the CPU; run a short benchmark of the config's model. One line per check; exit 1 if any failed.",
    )
    add_config_args(parser)
    parser.add_argument("--device", type=int, default=None, help="GPU to check (default: engine.devices[0])")
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="timed seconds of the model benchmark (default: %(default)s)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from framewire.app.commands import load_job
    from framewire.engines.doctor import FAILED, OK, render, run_checks
    from framewire.pipeline.errors import FramewireError, one_line

    config = None
    try:
        config = load_job(args)
    except FramewireError as exc:
        config_error = one_line(exc)
    device = args.device if args.device is not None else (config.engine.devices[0] if config else 0)
    report = run_checks(device)
    if config is None:
        report.add("model benchmark", FAILED, f"config: {config_error}")
    else:
        try:
            report.add("model benchmark", OK, benchmark(config, args.seconds))
        except Exception as exc:  # noqa: BLE001 - one line, like every other check
            report.add("model benchmark", FAILED, one_line(exc))
    print(render(report))
    return 1 if report.failed else 0


def benchmark(config: Any, seconds: float) -> str:
    """Open the config's engine as infer worker 0 would and time single-frame inferences on input of
    the first source's size; returns one line."""
    import numpy as np

    from framewire.app.compose.model import build_task, engine_axes, engine_options
    from framewire.config import Backend
    from framewire.engines.registry import choose_backend, open_engine

    task = build_task(config)
    options = engine_options(config, task, 0)
    shapes = options.input_shapes() if options.input_shapes else {}
    shape = tuple(shapes[task.input_name][0]) if shapes.get(task.input_name) else None
    started = time.monotonic()
    engine = open_engine(config.engine, config.model.path, engine_axes(config, task), options)
    startup = time.monotonic() - started
    try:
        spec = next(s for s in engine.inputs if s.name == task.input_name)
        if shape is None:
            shape = tuple(d if isinstance(d, int) else 1 for d in spec.shape)
        feed = {task.input_name: np.random.default_rng(0).random(shape).astype(spec.dtype)}
        for _ in range(3):  # warm-up: first calls allocate and tune
            engine.infer(feed, task.output_names)
        times: list[float] = []
        deadline = time.monotonic() + max(seconds, 0.1)
        while (time.monotonic() < deadline or len(times) < 10) and len(times) < 2000:
            tick = time.perf_counter()
            engine.infer(feed, task.output_names)
            times.append(time.perf_counter() - tick)
        provider = engine.provider
    finally:
        engine.close()
    p50, p90 = (float(np.percentile(times, q)) * 1000 for q in (50, 90))
    chosen = choose_backend(config.engine, quiet=True).backend
    backend = chosen.value if isinstance(chosen, Backend) else chosen
    return (
        f"{Path(config.model.path).name} on {backend} ({provider}), input {list(shape)}: start-up {startup:.1f} s, "
        f"p50 {p50:.2f} ms, p90 {p90:.2f} ms over {len(times)} runs"
    )

