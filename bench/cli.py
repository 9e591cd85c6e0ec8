"""`run_pipeline.py bench <what>`: each benchmark is a module with `add_arguments(parser)` and
`run(args) -> int`, imported only when it runs."""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
from collections.abc import Callable
from typing import Any

BENCHMARKS: dict[str, tuple[str, str]] = {
    "pipeline": ("bench.pipeline", "a config's job against the equivalent single-process loop"),
    "transport": ("bench.transport", "cost per hop of the frame pool and ZeroMQ links"),
    "scaling": ("bench.scaling", "frames per second against infer processes and sources"),
    "engine": ("bench.engine", "each backend, precision and batch size: latency, throughput, memory"),
    "accuracy": ("bench.accuracy", "each backend and precision against ONNX Runtime fp32 on the CPU"),
    "soak": ("bench.soak", "hours in minutes: add/remove cycles and a real-time run; memory and fds"),
    "latency": ("bench.latency", "a live RTSP source faster than the model: latency, drops, per policy"),
}


def register(sub: Any, add_config_args: Callable[[argparse.ArgumentParser], None]) -> None:
    bench = sub.add_parser("bench", help="benchmarks (JSON plus a table)")
    kinds = bench.add_subparsers(dest="bench", required=True)
    for name, (module_name, text) in BENCHMARKS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            # A benchmark whose module is not there (yet) is listed, and says so when asked for.
            parser = kinds.add_parser(name, help=f"{text} (not available: no module {module_name})")
            parser.set_defaults(handler=functools.partial(_missing, name, module_name))
            continue
        parser = kinds.add_parser(name, help=text)
        module.add_arguments(parser, add_config_args)
        parser.set_defaults(handler=module.run)


def _missing(name: str, module_name: str, args: argparse.Namespace) -> int:
    print(f"framewire: bench {name} is not available in this build (no module {module_name})", file=sys.stderr)
    return 2
