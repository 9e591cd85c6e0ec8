"""`run_pipeline.py bench <what>`: each benchmark is a module with `add_arguments(parser)` and
`run(args) -> int`, imported only when it runs."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

BENCHMARKS: dict[str, tuple[str, str]] = {
    "pipeline": ("bench.pipeline", "a config's job against the equivalent single-process loop"),
    "transport": ("bench.transport", "cost per hop of the frame pool and ZeroMQ links"),
    "scaling": ("bench.scaling", "frames per second against infer processes and sources"),
    "engine": ("bench.engine", "each backend, precision and batch size: latency, throughput, memory"),
    "accuracy": ("bench.accuracy", "each backend and precision against ONNX Runtime fp32 on the CPU"),
}


def register(sub: Any, add_config_args: Callable[[argparse.ArgumentParser], None]) -> None:
    bench = sub.add_parser("bench", help="benchmarks (JSON plus a table)")
    kinds = bench.add_subparsers(dest="bench", required=True)
    for name, (module_name, text) in BENCHMARKS.items():
        parser = kinds.add_parser(name, help=text)
        module = importlib.import_module(module_name)
        module.add_arguments(parser, add_config_args)
        parser.set_defaults(handler=module.run)
