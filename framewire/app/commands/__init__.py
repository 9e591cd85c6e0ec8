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
    from framewire.config import Config

ROOT = Path(__file__).resolve().parents[3]
"""The checkout (or install) root: relative model and video paths of the shipped configs resolve here."""
DEFAULT_CONFIG = ROOT / "configs" / "default.yaml"
MODULES: tuple[str, ...] = (
    "framewire.app.commands.bench",
    "framewire.app.commands.build_engine",
    "framewire.app.commands.doctor",
    "framewire.app.commands.quantize",
    "framewire.app.commands.triton_repo",
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


def add_tolerance_args(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--iou`, `--min-agreement`, `--max-matte-mae`: what a model must reach against fp32
    (`framewire.app.accuracy.Tolerance`), for `bench accuracy` and `quantize --auto-fp32` alike."""
    parser.add_argument("--iou", type=float, default=0.9, help="IoU at which two boxes match (default: %(default)s)")
    parser.add_argument(
        "--min-agreement", type=float, default=0.95, help="box (face) agreement to reach (default: %(default)s)"
    )
    parser.add_argument(
        "--max-matte-mae", type=float, default=0.02, help="matte mean absolute error allowed, 0-1 (default: %(default)s)"
    )


def input_roots(config_path: str | Path) -> list[Path]:
    """Where relative input paths (model, file sources) are looked for after the current folder:
    beside the config, in the checkout, and beside the config's folder (the shipped configs name
    `assets/...` from the checkout's root, which an installed framewire has under /opt/framewire)."""
    folder = Path(config_path).resolve().parent
    return [folder, ROOT, folder.parent]


def load_job(args: argparse.Namespace, extra: Sequence[str] = ()) -> Config:
    """The config of `-c` with its `--set` overrides (then `extra`), inputs resolved against ROOT;
    the task's and the composites' own keys are checked too, so their errors name the file as well."""
    from framewire.app.compose.outputs import build_composites
    from framewire.app.compose.model import build_task
    from framewire.config import load_config, resolve_inputs
    from framewire.pipeline.errors import ConfigError

    if Path(args.config) == DEFAULT_CONFIG and not DEFAULT_CONFIG.is_file():
        raise ConfigError(
            "no config given, and an installed framewire has no default job beside it: pass -c FILE "
            "(the shipped configs, model and clips are in the source checkout's configs/ and assets/, "
            "and in the container image under /opt/framewire: -c /opt/framewire/configs/default.yaml)"
        )
    config = resolve_inputs(load_config(args.config, [*args.overrides, *extra]), input_roots(args.config), args.config)
    try:
        build_task(config)
        build_composites(config)
    except ConfigError as exc:
        raise ConfigError(f"{args.config}: {exc}") from None
    return config
