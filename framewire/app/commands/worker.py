"""`run_pipeline.py worker`: run workers of one stage on this host for a daemon on another.

The daemon's hub listens on `transport.listen` (tcp://); this command, given the same config (and
the model file at the same path, or `--set model.path=...`), starts `--workers` processes of one
stage that connect there and take frames alongside the daemon's own workers, or instead of them
for a stage in `transport.remote_stages`. Frames travel inline (pipeline.remote). It exits 0 when
the hub says STOP at the end of its job, or on SIGINT/SIGTERM (each worker leaves cleanly: the
frames it held go to other workers).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import Any


def register(sub: Any, add_config_args: Callable[[argparse.ArgumentParser], None]) -> None:
    parser = sub.add_parser("worker", help="run workers of one stage for a daemon on another host")
    add_config_args(parser)
    parser.add_argument(
        "--stage",
        required=True,
        help="a stage of the config: preprocess, infer, postprocess, composite, or an output by name "
        "(output0.video_file, ...); with stages.fuse only infer, with stages.fuse_outputs outputs",
    )
    parser.add_argument("--connect", required=True, metavar="tcp://HOST:PORT", help="the daemon's transport.listen")
    parser.add_argument("--workers", type=int, default=1, help="processes to start (default: %(default)s)")
    parser.add_argument(
        "--credits", type=int, help="frames each may hold at once (default: the daemon's for that stage)"
    )
    parser.add_argument("--server-key", metavar="FILE", help="CurveZMQ: the hub's public certificate (NAME.key)")
    parser.add_argument(
        "--client-key", metavar="FILE", help="CurveZMQ: this worker's secret certificate (NAME.key_secret)"
    )
    parser.set_defaults(handler=run_worker)


def run_worker(args: argparse.Namespace) -> int:
    import re

    from framewire.app.commands import load_job
    from framewire.app.compose import PRELOAD, build_plan
    from framewire.app.io_check import check_output
    from framewire.pipeline.names import OUTPUTS, output_name
    from framewire.pipeline.errors import UsageError
    from framewire.pipeline.wire.remote import MAX_CREDITS
    from framewire.pipeline.worker.remote_workers import run_workers

    if not re.match(r"^tcp://[^/]+:\d{1,5}$", args.connect):
        raise UsageError(f"--connect {args.connect!r}: expected tcp://HOST:PORT (the daemon's transport.listen)")
    if args.client_key and not args.server_key:
        raise UsageError("--client-key needs --server-key (the hub's public certificate)")
    if not 1 <= args.workers <= 64:
        raise UsageError(f"--workers {args.workers}: expected 1..64")
    if args.credits is not None and not 1 <= args.credits <= MAX_CREDITS:
        raise UsageError(f"--credits {args.credits}: expected 1..{MAX_CREDITS}")
    config = load_job(args)
    names = config.stage_names()
    if args.stage not in names:
        raise UsageError(f"--stage {args.stage!r}: this config's stages are {', '.join(names)}")
    level = logging.getLogger().getEffectiveLevel()
    plan = build_plan(
        config, log_level=level, log_format=args.log_format, check_engine=args.stage == "infer",
        check_inputs_outputs=False,  # the sources are read on the daemon's host
    )  # fmt: skip
    for i, output in enumerate(config.outputs):
        if args.stage in (output_name(i, output.kind), OUTPUTS):
            check_output(output, f"outputs.{i}", [source.id for source in config.sources])
    factories = {name: factory for name, _, factory in plan.middle}
    factories.update(dict(plan.outputs))
    if args.stage.startswith("output"):
        if args.workers != 1:
            raise UsageError(f"--workers {args.workers}: an output runs in one process")
        credits = max(4, plan.credits_per_worker)
    else:
        credits = plan.stage_credits.get(args.stage, plan.credits_per_worker)
    return run_workers(
        args.stage,
        factories[args.stage],
        endpoint=args.connect,
        workers=args.workers,
        credits=args.credits or credits,
        server_key=args.server_key,
        client_key=args.client_key,
        preload=PRELOAD,
        log_level=level,
        log_format=args.log_format,
    )
