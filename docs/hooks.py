"""MkDocs hook: the reference pages made from the code (docs/gen_reference.py) join the site at every
build, so `mkdocs build` and `mkdocs serve` never show a stale one and none is kept in git."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

_PATH = Path(__file__).with_name("gen_reference.py")


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_reference", _PATH)
    assert spec is not None and spec.loader is not None  # a file that exists beside this one
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def on_files(files: Files, config: Any) -> Files:
    for page, make in _generator().PAGES.items():
        files.append(File.generated(config, page, content=make()))
    return files
