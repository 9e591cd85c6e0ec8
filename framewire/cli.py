#!/usr/bin/env python3
"""framewire command line: run the daemon on a config, validate a config, read a zmq output.
Installed, the same command is `framewire`.

    python run_pipeline.py                      # the default job: configs/default.yaml
    python run_pipeline.py run -c FILE [--set key.path=value ...]
    python run_pipeline.py validate -c FILE
    python run_pipeline.py subscribe --endpoint tcp://127.0.0.1:5560

`--debug`, `-v` and `--log-format` go before or after the command. Exit codes: 0 done, 1 runtime
failure, 2 bad config or usage.
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
from typing import TYPE_CHECKING, Any

from framewire.app.commands import DEFAULT_CONFIG, MODULES, add_config_args, load_job

if TYPE_CHECKING:
    from framewire.config import Config
    from framewire.pipeline.wire.linkwatch import LinkState
    from framewire.stages.tasks.base import Task
    from framewire.pipeline.plan import Report


def _global_flags(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The flags every command takes, before or after its name. A command's own copy has no
    defaults (SUPPRESS), so it never overwrites one given before the command."""
    keep: dict[str, Any] = {} if defaults else {"default": argparse.SUPPRESS}
    parser.add_argument("--debug", action="store_true", help="tracebacks and debug logs", **keep)
    parser.add_argument("-v", "--verbose", action="store_true", help="informational logs", **keep)
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="log lines as text (default) or JSON objects",
        **(keep or {"default": "text"}),
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "framewire",
        description="framewire: real-time video inference daemon. With no command, runs the default job.",
    )
    _global_flags(parser, defaults=True)
    parser.add_argument("--version", action="version", version=f"framewire {_version()}")
    sub = parser.add_subparsers(dest="command")

    _add_run(sub)
    _add_subscribe(sub)

    keys = sub.add_parser("keys", help="make a CurveZMQ certificate pair (NAME.key, NAME.key_secret)")
    keys.add_argument("--dir", default="keys", help="folder to write into (default: %(default)s)")
    keys.add_argument("--name", default="framewire", help="certificate name (default: %(default)s)")
    keys.add_argument(
        "--force", action="store_true", help="overwrite a pair of that name (its clients lose it)"
    )

    for module_name in MODULES:
        module = importlib.import_module(module_name)
        module.register(sub, add_config_args)
    for command in sub.choices.values():
        if "-" in command.prefix_chars:  # not `bench`, which hands its arguments on as they are
            _global_flags(command, defaults=False)
    return parser


def _add_run(sub: Any) -> None:
    """`run` and `validate`: a job's config, and how `run` shows and shards it."""
    run = sub.add_parser("run", help="run a job (the daemon) until its sources end or it is stopped")
    add_config_args(run)
    run.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress display (the bar, a line per source), even on a terminal",
    )
    run.add_argument(
        "--resume",
        action="store_true",
        help="every file source goes on after the frames its outputs hold (sets sources.N.resume)",
    )
    run.add_argument(
        "--shard",
        metavar="I/N",
        help="run only replica I of N's share of the sources (0-based; "
        "auto: I from the hostname's -<n>, N from FRAMEWIRE_REPLICAS): sets fleet.shard",
    )

    validate = sub.add_parser("validate", help="check a config and its model against its task")
    add_config_args(validate)


def _add_subscribe(sub: Any) -> None:
    """`subscribe`: print what a zmq output sends."""
    subscribe = sub.add_parser("subscribe", help="print what a zmq output sends")
    subscribe.add_argument("--endpoint", required=True, help="e.g. tcp://127.0.0.1:5560")
    subscribe.add_argument(
        "--mode", choices=("sub", "pull"), default="sub", help="sub for pub, pull for push"
    )
    subscribe.add_argument("--topic", default="", help="only this source id (sub mode)")
    subscribe.add_argument("--count", type=int, default=0, help="exit after this many messages")
    subscribe.add_argument("--timeout", type=float, default=0.0, help="exit after this many idle seconds")
    subscribe.add_argument("--until-eos", action="store_true", help="exit once every source seen has ended")
    subscribe.add_argument("--save-images", metavar="DIR", help="write the JPEG parts into DIR")
    subscribe.add_argument("--server-key", metavar="FILE", help="CurveZMQ: the output's public certificate")
    subscribe.add_argument(
        "--client-key",
        metavar="FILE",
        help="CurveZMQ: this client's secret certificate (default: a new pair)",
    )


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("framewire")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    level = logging.DEBUG if args.debug else logging.INFO if args.verbose else logging.WARNING
    from framewire.pipeline import logs
    from framewire.pipeline.errors import FramewireError

    logs.configure(level, args.log_format)
    command = args.command or "run"
    if args.command is None:
        args.config, args.overrides, args.no_progress, args.resume = str(DEFAULT_CONFIG), [], False, False
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
        _fatal(str(exc), exc.exit_code, args.log_format)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _validate(args: argparse.Namespace) -> int:
    from framewire.app.compose.plan import check
    from framewire.app.io_check import check_io
    from framewire.engines.describe import how_it_runs

    config = load_job(args)
    task = check(config)
    check_io(config)
    engine = how_it_runs(config.engine)  # an engine.device that is not here fails before `ok`
    print(
        f"{args.config}: ok ({len(config.sources)} source(s), task {task.name}, "
        f"{len(config.outputs)} output(s))"
    )
    _describe_models(config, task)
    print(f"  engine: {engine}")
    _describe_stages(config)
    return 0


def _describe_stages(config: Config) -> None:
    """The job's stages after decode as the runtime gets them (`StageSpec`s): name, workers, what each
    does, and the members of a fused one."""
    from framewire.app.compose.plan import stage_specs

    print("  stages:")
    for spec in stage_specs(config):
        print(f"    {spec.describe()}")


def _describe_models(config: Config, task: Task) -> None:
    """How each model is read (format, input, labels): what a user bringing a model checks first."""
    from framewire.app.compose.cascade import build_secondaries

    if task.summary():
        print(f"  model: {task.summary()}")
    if task.labels():
        print(f"  model {classes_line(task.labels() or ())}")
    for i, secondary in enumerate(build_secondaries(config)):
        where = f"secondary.{i} ({secondary.name})"
        if secondary.task.summary():
            print(f"  {where}: {secondary.task.summary()}")
        if secondary.task.labels():
            print(f"  {where} {classes_line(secondary.task.labels() or ())}")
    if config.tracking:
        interval = config.tracking.interval
        every = f", the model on one frame in {interval + 1}" if interval else ""
        print(f"  tracking: {config.tracking.kind}{every}")
    for source_id, spec in config.analytics.items():
        lines, zones = [x.name for x in spec.lines], [x.name for x in spec.zones]
        print(f"  analytics: {source_id}: lines {lines}, zones {zones}")


def classes_line(labels: Sequence[str], limit: int = 20) -> str:
    """`classes (N): 0=person, 1=bicycle, ...`: the ids and labels that `classes:` filters take,
    the first `limit` of them when there are more."""
    shown = ", ".join(f"{i}={label}" for i, label in enumerate(labels[:limit]))
    more = f", ... ({len(labels) - limit} more)" if len(labels) > limit else ""
    return f"classes ({len(labels)}): {shown}{more}"


def _run(args: argparse.Namespace, level: int) -> int:
    """argv -> config -> `framewire.start` -> exit code; SIGINT/SIGTERM drain the job, twice stop it."""
    from framewire.app.preload import PRELOAD
    from framewire.pipeline.worker.forkserver import start_early

    start_early(PRELOAD)  # the workers' imports run beside the config's loading and checking (below)
    from framewire.app.progress import ProgressDisplay
    from framewire.runner import start, stop_on_signals

    shard = [f"fleet.shard={args.shard}"] if getattr(args, "shard", None) else []
    config = load_job(args, shard)
    if getattr(args, "resume", False):
        files = [
            f"sources.{i}.resume=true"
            for i, s in enumerate(config.sources)
            if getattr(s, "kind", None) == "file" and not s.is_live
        ]
        config = load_job(args, [*shard, *files]) if files else config
    display = ProgressDisplay(sys.stderr, enabled=not args.no_progress and sys.stderr.isatty())
    job = start(config, log_level=level, log_format=args.log_format)
    try:
        with stop_on_signals(job):
            report = display.follow(job)  # a bar, and a line per source with its recent rate and state
    finally:
        display.end()
    _summary(report, args.log_format, config)
    return report.exit_code


def _summary(report: Report, log_format: str, config: Config | None = None) -> None:
    """A line per source and one for the job (with `--log-format json`, one JSON object holding
    them), then the error that ended it (framewire.app.summary)."""
    from framewire.app.summary import summarize

    done = summarize(report, config)
    if log_format == "json":
        _json_line("INFO", done.job, event="summary", **done.fields)
    else:
        for line in [*done.lines, done.job]:
            print(line, file=sys.stderr)
    if report.exit_code:
        _fatal(str(report.error), report.exit_code, log_format)


def _fatal(error: str, exit_code: int, log_format: str) -> None:
    """The error that ends the command: `framewire: error: ...`, or that as a JSON object."""
    if log_format == "json":
        _json_line("ERROR", f"framewire: error: {error}", event="error", error=error, exit_code=exit_code)
    else:
        print(f"framewire: error: {error}", file=sys.stderr)


def _json_line(level: str, message: str, **fields: Any) -> None:
    """One JSON object on stderr, with the keys of the JSON log lines (pipeline.logs) and `fields`."""
    from datetime import datetime, timezone

    entry = {
        "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "level": level,
        "process": "supervisor",
        "logger": "framewire.cli",
        "message": message,
        **fields,
    }
    print(json.dumps(entry, ensure_ascii=False), file=sys.stderr, flush=True)


def _subscribe(args: argparse.Namespace) -> int:
    """framewire.client.Client, printing each header as one JSON line; when nothing came, why."""
    from framewire.client import Client, FrameRecord, KeyRefused
    from framewire.pipeline.errors import FramewireError

    if args.save_images:
        os.makedirs(args.save_images, exist_ok=True)
    received = 0
    with Client(
        args.endpoint,
        mode=args.mode,
        topics=(args.topic,),
        server_key=args.server_key,
        client_key=args.client_key,
        watch=True,
    ) as client:
        try:
            for message in client.messages(
                until_eos=args.until_eos, timeout=args.timeout or None, count=args.count or None
            ):
                if isinstance(message, FrameRecord) and message.jpeg is not None and args.save_images:
                    Path(args.save_images, f"{message.source}-{message.seq:06d}.jpg").write_bytes(
                        message.jpeg
                    )
                print(json.dumps(message.header, separators=(",", ":")), flush=True)
                received += 1
        except KeyRefused as exc:
            raise FramewireError(f"subscribe: {exc}{_key_hint(args)}") from None
        finally:
            if client.lost:
                per_source = ", ".join(f"{s}: {n}" for s, n in sorted(client.lost_by_source.items()))
                print(
                    f"framewire: {client.lost} message(s) lost: this subscriber fell behind the pub "
                    f"output ({per_source})",
                    file=sys.stderr,
                )
        if not received and client.link is not None:  # the idle timeout ran out (none: it waits)
            why = _why_nothing(client.link.update(), args)
            raise FramewireError(f"subscribe: nothing from {args.endpoint} in {args.timeout:g} s: {why}")
    return 0


TOPIC_PROBE_S = 2.0
"""How long `subscribe --topic` listens to every topic, once nothing came on its own, to name the
topics that do flow."""


def _why_nothing(state: LinkState, args: argparse.Namespace) -> str:
    """What the connection went through, in a few words: nothing there, a refused or mismatched key,
    a peer of another kind, or a publisher that sent nothing on the topic (and the topics it did send)."""
    peer = "publisher" if args.mode == "sub" else "push output"
    if state.refused:
        return f"the server refused our CurveZMQ key{_key_hint(args)}"
    if state.handshakes:
        if args.mode == "pull":
            return "a push output is there but sent nothing (it deals its messages out among its pullers)"
        if not args.topic:
            return "a publisher is there but sent nothing"
        window = min(args.timeout, TOPIC_PROBE_S)
        seen = _topics_seen(args, window)
        others = f"topics seen: {', '.join(seen)}" if seen else f"nor on any other in {window:g} s"
        return f"a publisher is there but sent nothing on topic {args.topic!r} ({others})"
    if state.mismatched:
        if args.server_key:
            return "the server does not use CurveZMQ (leave out --server-key)"
        return "the server wants CurveZMQ (--server-key: its public certificate)"
    if state.failed:
        kind = "pub" if args.mode == "sub" else "push"
        return f"the CurveZMQ handshake failed: --server-key is not the server's (or it is no {kind} output)"
    if state.connected:
        other = "pull" if args.mode == "sub" else "sub"
        return f"something answered, but not as a ZeroMQ {peer} (try --mode {other})"
    return f"no {peer} answered"


def _key_hint(args: argparse.Namespace) -> str:
    if args.client_key:
        return f" (the public half of {args.client_key} is not in the output's curve_clients folder)"
    return (
        " (a fresh pair: pass --client-key, a secret key whose public half is in the output's"
        " curve_clients folder)"
    )


def _topics_seen(args: argparse.Namespace, seconds: float) -> list[str]:
    """The topics (source ids) a pub output sends, listened to for `seconds` on every topic."""
    from framewire.client import Client

    seen: set[str] = set()
    deadline = time.monotonic() + seconds
    with Client(args.endpoint, server_key=args.server_key, client_key=args.client_key) as probe:
        while (left := deadline - time.monotonic()) > 0:
            message = probe.receive(timeout=left)
            if message is not None:
                seen.add(message.source)
    return sorted(seen)


def _keys(args: argparse.Namespace) -> int:
    """A CurveZMQ pair: the secret half readable by its owner alone (0600), made so from the start.
    An existing pair is kept unless `--force`: a new secret locks out every client of the old one."""
    import zmq.auth

    from framewire.pipeline.errors import UsageError

    for suffix in (".key_secret", ".key"):
        existing = Path(args.dir, args.name + suffix)
        if existing.exists() and not args.force:
            raise UsageError(
                f"keys: {existing} already exists; --force overwrites it (clients of the old key lose access)"
            )
    os.makedirs(args.dir, exist_ok=True)
    old = os.umask(0o077)
    try:
        public, secret = zmq.auth.create_certificates(args.dir, args.name)
    finally:
        os.umask(old)
    os.chmod(secret, 0o600)
    os.chmod(public, 0o644)  # the public half is meant to be handed out
    print(f"public: {public}\nsecret: {secret}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
