#!/usr/bin/env python3
"""framewire command line: run the daemon on a config, validate a config, read a zmq output.

    python run_pipeline.py                      # the default job: configs/default.yaml
    python run_pipeline.py run -c FILE [--set key.path=value ...]
    python run_pipeline.py validate -c FILE
    python run_pipeline.py subscribe --endpoint tcp://127.0.0.1:5560
    python run_pipeline.py worker -c FILE --stage infer --connect tcp://HOST:5570  # on another host

Exit codes: 0 done, 1 runtime failure, 2 bad config or usage.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.commands import DEFAULT_CONFIG, MODULES, add_config_args, load_job

if TYPE_CHECKING:
    from pipeline.config import Config
    from app.plan import Task


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run_pipeline.py",
        description="framewire: real-time video inference daemon. With no command, runs the default job.",
    )
    parser.add_argument("--debug", action="store_true", help="tracebacks and debug logs")
    parser.add_argument("-v", "--verbose", action="store_true", help="informational logs")
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="run a job (the daemon) until its sources end or it is stopped")
    add_config_args(run)
    run.add_argument("--no-progress", action="store_true", help="no progress bar, even on a terminal")

    validate = sub.add_parser("validate", help="check a config and its model against its task")
    add_config_args(validate)

    subscribe = sub.add_parser("subscribe", help="print what a zmq output sends")
    subscribe.add_argument("--endpoint", required=True, help="e.g. tcp://127.0.0.1:5560")
    subscribe.add_argument("--mode", choices=("sub", "pull"), default="sub", help="sub for pub, pull for push")
    subscribe.add_argument("--topic", default="", help="only this source id (sub mode)")
    subscribe.add_argument("--count", type=int, default=0, help="exit after this many messages")
    subscribe.add_argument("--timeout", type=float, default=0.0, help="exit after this many idle seconds")
    subscribe.add_argument("--until-eos", action="store_true", help="exit once every source seen has ended")
    subscribe.add_argument("--save-images", metavar="DIR", help="write the JPEG parts into DIR")
    subscribe.add_argument("--server-key", metavar="FILE", help="CurveZMQ: the output's public certificate")
    subscribe.add_argument(
        "--client-key", metavar="FILE", help="CurveZMQ: this client's secret certificate (default: a new pair)"
    )

    keys = sub.add_parser("keys", help="make a CurveZMQ certificate pair (NAME.key, NAME.key_secret)")
    keys.add_argument("--dir", default="keys", help="folder to write into (default: %(default)s)")
    keys.add_argument("--name", default="framewire", help="certificate name (default: %(default)s)")

    for module_name in MODULES:
        module = importlib.import_module(module_name)
        module.register(sub, add_config_args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    level = logging.DEBUG if args.debug else logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    from pipeline.errors import FramewireError

    command = args.command or "run"
    if args.command is None:
        args.config, args.overrides, args.no_progress = str(DEFAULT_CONFIG), [], False
    try:
        if command == "run":
            return _run(args, level)
        if command == "validate":
            return _validate(args)
        if command == "subscribe":
            return _subscribe(args)
        if command == "keys":
            return _keys(args)
        handler = getattr(args, "handler", None)
        if handler is None:
            raise AssertionError(command)
        return int(handler(args))
    except FramewireError as exc:
        if args.debug:
            raise
        print(f"framewire: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _validate(args: argparse.Namespace) -> int:
    from app.plan import check

    config = load_job(args)
    task = check(config)
    print(
        f"{args.config}: ok ({len(config.sources)} source(s), task {task.name}, "
        f"{len(config.outputs)} output(s))"
    )
    _describe_models(config, task)
    return 0


def _describe_models(config: Config, task: Task) -> None:
    """How each model is read (format, input, labels): what a user bringing a model checks first."""
    from app.plan import build_secondaries

    if task.summary():
        print(f"  model: {task.summary()}")
    for i, secondary in enumerate(build_secondaries(config)):
        if secondary.task.summary():
            print(f"  secondary.{i} ({secondary.name}): {secondary.task.summary()}")
    if config.tracking:
        interval = config.tracking.interval
        every = f", the model on one frame in {interval + 1}" if interval else ""
        print(f"  tracking: {config.tracking.kind}{every}")


class _Progress:
    """A one-line progress bar on stderr, redrawn at most ten times a second."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.monotonic()
        self._last = 0.0

    def __call__(self, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and (total is None or done < total):
            return
        self._last = now
        fps = done / max(now - self.started, 1e-6)
        if total:
            width = 30
            filled = int(width * min(done, total) / total)
            bar = "#" * filled + "-" * (width - filled)
            line = f"\r[{bar}] {done}/{total} frames {fps:5.1f} fps"
        else:
            line = f"\r{done} frames {fps:5.1f} fps"
        sys.stderr.write(line)
        sys.stderr.flush()

    def end(self) -> None:
        if self.enabled and self._last:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _run(args: argparse.Namespace, level: int) -> int:
    from app.preload import PRELOAD
    from pipeline.forkserver import start_early

    start_early(PRELOAD)  # the workers' imports run beside ours, not after them
    from app.plan import build_plan
    from pipeline.supervisor import Supervisor

    config = load_job(args)
    plan = build_plan(config, log_level=level)
    progress = _Progress(enabled=not args.no_progress and sys.stderr.isatty())
    report = Supervisor(plan, progress=progress).run()
    progress.end()
    total = sum(report.frames.values())
    fps = total / report.elapsed_s if report.elapsed_s > 0 else 0.0
    for source_id, frames in report.frames.items():
        extra = []
        if report.dropped.get(source_id):
            extra.append(f"{report.dropped[source_id]} dropped")
        if report.failed.get(source_id):
            extra.append(f"{report.failed[source_id]} failed")
        if source_id in report.source_errors:
            extra.append("error")
        note = f" ({', '.join(extra)})" if extra else ""
        print(f"{source_id}: {frames} frames{note}", file=sys.stderr)
    restarts = sum(report.restarts.values())
    print(
        f"framewire: {total} frames in {report.elapsed_s:.1f} s ({fps:.1f} fps)"
        + (f", {restarts} worker restart(s)" if restarts else "")
        + (", stopped early" if report.stopped else ""),
        file=sys.stderr,
    )
    if report.exit_code:
        print(f"framewire: error: {report.error}", file=sys.stderr)
    return report.exit_code


def _subscribe(args: argparse.Namespace) -> int:
    import zmq

    from pipeline.errors import UsageError

    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB if args.mode == "sub" else zmq.PULL)
    sock.setsockopt(zmq.RECONNECT_IVL, 20)  # started before the daemon: catch its first frames
    if args.server_key:  # before connect: a connection takes the mechanism it starts with
        _curve_client(sock, args.server_key, args.client_key)
    try:
        sock.connect(args.endpoint)
    except zmq.ZMQError as exc:
        raise UsageError(f"--endpoint {args.endpoint}: {exc}") from None
    if args.mode == "sub":
        sock.setsockopt_string(zmq.SUBSCRIBE, args.topic)
    if args.save_images:
        os.makedirs(args.save_images, exist_ok=True)
    received = 0
    seen: set[str] = set()
    ended: set[str] = set()
    idle_since = time.monotonic()
    try:
        while True:
            if not sock.poll(100):
                if args.timeout and time.monotonic() - idle_since > args.timeout:
                    return 0 if received else 1
                continue
            idle_since = time.monotonic()
            parts = sock.recv_multipart()
            if len(parts) < 2:
                print(f"framewire: skipped a message of {len(parts)} part(s)", file=sys.stderr)
                continue
            topic = parts[0].decode("utf-8", "replace")
            header = json.loads(parts[1])
            if len(parts) > 2 and args.save_images:
                name = f"{topic}-{header.get('seq', received):06d}.jpg"
                Path(args.save_images, name).write_bytes(parts[2])
            print(json.dumps(header, separators=(",", ":")), flush=True)
            received += 1
            seen.add(topic)
            if header.get("eos"):
                ended.add(topic)
            if args.count and received >= args.count:
                return 0
            if args.until_eos and seen and ended >= seen:
                return 0
    finally:
        sock.close(linger=0)
        ctx.term()


def _curve_client(sock, server_key: str, client_key: str | None) -> None:  # type: ignore[no-untyped-def]
    from pipeline.curve import connect_as_client
    from pipeline.errors import FramewireError, UsageError

    try:
        connect_as_client(sock, server_key, client_key, "curve key")
    except FramewireError as exc:
        raise UsageError(str(exc)) from None


def _keys(args: argparse.Namespace) -> int:
    import zmq.auth

    os.makedirs(args.dir, exist_ok=True)
    public, secret = zmq.auth.create_certificates(args.dir, args.name)
    print(f"public: {public}\nsecret: {secret}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
