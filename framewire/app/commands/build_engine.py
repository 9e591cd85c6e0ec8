"""`run_pipeline.py build-engine`: build (or find in the cache) the TensorRT engine of a config.

The infer workers build a missing engine on their first start too; this command does it ahead of
time, so that a job starts in seconds and a long build is not mistaken for a hang.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def register(sub: Any, add_config_args: Callable[[argparse.ArgumentParser], None]) -> None:
    parser = sub.add_parser(
        "build-engine", help="build the TensorRT engine of a config into the engine cache"
    )
    add_config_args(parser)
    parser.add_argument("--precision", choices=("fp32", "fp16", "int8"), help="override engine.precision")
    parser.add_argument(
        "--calibration-video", metavar="PATH", help="override engine.calibration.video (int8)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when the cache has it")
    parser.set_defaults(handler=build_engine)


def build_engine(args: argparse.Namespace) -> int:
    from framewire.app.commands import load_job
    from framewire.app.compose.model import build_task, engine_axes, engine_options
    from framewire.app.compose.plan import check
    from framewire.engines import cuda
    from framewire.engines.registry import build_request
    from framewire.engines.trt_build import ensure_engine, import_tensorrt

    overrides: list[str] = []
    if args.precision:
        overrides.append(f"engine.precision={args.precision}")
    if args.calibration_video:
        overrides.append(f"engine.calibration.video={args.calibration_video}")
    config = load_job(args, overrides)
    check(config)
    import_tensorrt()
    task = build_task(config)
    engine = config.engine
    seen: set[str] = set()
    for position, device in enumerate(engine.devices):
        gpu_name = cuda.require_device(device)
        if gpu_name in seen:  # GPUs of one model share an engine
            continue
        seen.add(gpu_name)
        options = engine_options(config, task, position * engine.processes_per_device)
        request = build_request(engine, config.model.path, engine_axes(config, task), options)
        path = ensure_engine(request, force=args.force)
        print(f"GPU {device} ({gpu_name}): {path}")
    return 0
