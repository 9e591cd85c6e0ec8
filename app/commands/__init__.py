"""The commands of `run_pipeline.py` beyond run, validate, subscribe and keys: one module each, with
`register(subparsers, add_config_args)`, which adds its parser and sets `handler=fn(args) -> int`.

Importing a command module must stay cheap (the CLI imports them all at every start): heavy
imports go inside the handlers.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.config import Config

ROOT = Path(__file__).resolve().parents[2]
"""The checkout (or install) root: relative model and video paths of the shipped configs resolve here."""
DEFAULT_CONFIG = ROOT / "configs" / "default.yaml"
MODULES: tuple[str, ...] = (
    "app.commands.bench",
    "app.commands.build_engine",
    "app.commands.doctor",
    "app.commands.quantize",
    "app.commands.worker",
)


def add_config_args(parser: argparse.ArgumentParser) -> None:
    """`-c FILE` and repeatable `--set key.path=value`."""
    parser.add_argument("-c", "--config", default=str(DEFAULT_CONFIG), help="YAML config (default: %(default)s)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set sources.0.uri=clip.mp4 (repeatable)",
    )


def load_job(args: argparse.Namespace, extra: Sequence[str] = ()) -> Config:
    """The config of `-c` with its `--set` overrides (then `extra`), inputs resolved against ROOT."""
    from pipeline.config import load_config, resolve_inputs

    return resolve_inputs(load_config(args.config, [*args.overrides, *extra]), [ROOT])
