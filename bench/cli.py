"""`run_pipeline.py bench <what>` (or `python -m bench <what>` from a checkout): each benchmark is a
module with `add_arguments(parser, add_config_args)` and `run(args) -> int`.

Not part of the installed package: `framewire.app.commands.bench` loads this from the checkout when asked."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

BENCHMARKS: dict[str, tuple[str, str]] = {
    "pipeline": ("bench.pipeline", "a config's job against the equivalent single-process loop"),
    "transport": ("bench.transport", "cost per hop of the frame pool and ZeroMQ links"),
    "scaling": ("bench.scaling", "frames per second against infer processes and sources"),
    "engine": ("bench.engine", "each backend, precision and batch size: latency, throughput, memory"),
    "accuracy": ("bench.accuracy", "each backend and precision against ONNX Runtime fp32 on the CPU"),
    "soak": ("bench.soak", "hours in minutes: add/remove cycles and a real-time run; memory and fds"),
    "latency": ("bench.latency", "a live RTSP source faster than the model: latency, drops, per policy"),
    "cascade": ("bench.cascade", "a cascade's crops batched against one call each; tracking.interval against none"),
    "models": ("bench.models", "each real model against its own package's pipeline; tracking ids against the reference"),
    "http": ("bench.http_api", "the HTTP API under console viewers: latency and CPU, uvicorn against the old server"),
    "console": ("bench.console", "the web console's previews: the hub's cost per frame with no viewer and one, the encoder's"),
    "triton": ("bench.triton", "ONNX Runtime in the daemon against a Triton server: over gRPC and shared memory"),
    "lipsync": ("bench.lipsync", "the lip-sync generator with 1-3 processes: fps per process, time outside the model, vs a loop"),
    "recording": ("bench.recording", "a stream recorded without re-encoding and its clips' ring, per core"),
    "tracing": ("bench.tracing", "what tracing: costs the daemon's process a frame: off, 1 frame in 1, 1 in 100"),
    "budget": ("bench.budget", "framewire's cost against the work alone (decode, model, encode); --profile: per process"),
}


def build_parser(prog: str = "run_pipeline.py bench") -> argparse.ArgumentParser:
    """Every benchmark's arguments (the CLI reference in docs/ is made from this parser too)."""
    # CLI glue (docs/benchmarks.md, tests/unit/bench/test_public_api.py): every benchmark takes the
    # same --config and --set flags as the other commands.
    from framewire.app.commands import add_config_args

    parser = argparse.ArgumentParser(prog=prog, description="benchmarks (JSON plus a table)")
    kinds = parser.add_subparsers(dest="bench", required=True)
    for name, (module_name, text) in BENCHMARKS.items():
        module = importlib.import_module(module_name)
        kind = kinds.add_parser(name, help=text)
        module.add_arguments(kind, add_config_args)
        kind.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str]) -> int:
    """Parse `argv` (what follows `bench`) and run that benchmark; its exit code."""
    args = build_parser().parse_args(list(argv))
    return int(args.handler(args))
