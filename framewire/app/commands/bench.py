"""`run_pipeline.py bench <what>`: the benchmarks, loaded from the checkout only when asked for.

`bench/` is not part of the installed package (benchmarks are not the product, and they reach for
the test tools, such as the loopback RTSP server). This command finds it beside `run_pipeline.py`
and hands it the rest of the command line; `python -m bench ...` from a checkout does the same.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import Any

from framewire.app.commands import ROOT


def register(sub: Any, add_config_args: Callable[[argparse.ArgumentParser], None]) -> None:
    parser = sub.add_parser(
        "bench",
        help="benchmarks (JSON plus a table): pipeline, transport, scaling, engine, accuracy, soak, latency",
        add_help=False,  # `bench --help` is the benchmarks' own
        prefix_chars="\0",  # every argument goes to the benchmarks' own parser
    )
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from framewire.pipeline.errors import UsageError

    if not (ROOT / "bench" / "cli.py").is_file():
        raise UsageError(
            f"bench: the benchmarks are not installed with framewire; run them from a checkout "
            f"(python run_pipeline.py bench ..., or python -m bench ...); not found: {ROOT / 'bench'}"
        )
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    cli = importlib.import_module("bench.cli")
    return int(cli.main(args.argv))
