"""MkDocs hook: the reference pages made from the code (docs/gen_reference.py) join the site at every
build, so `mkdocs build` and `mkdocs serve` never show a stale one and none is kept in git."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tomllib
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


def on_startup(command: str, dirty: bool) -> None:
    """mkdocstrings reads the API (mkdocs.yml: `paths: [build/docs-api]`) from the package as the wheel
    lays it out: pyproject's package-dir puts pipeline/, stages/ and engines/ under framewire/, which
    the checkout's framewire/ folder alone lacks (`framewire.ConfigError` -> framewire.pipeline.errors
    would not resolve), and griffe follows the editable link tree's symlinks back to the checkout. So
    the mapped folders are copied there before each build (sources only, a few MB)."""
    root = Path(__file__).resolve().parents[1]
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    tree = root / "build" / "docs-api"
    shutil.rmtree(tree, ignore_errors=True)
    for package, folder in sorted(mapping.items()):  # framewire first, then its mapped subpackages
        shutil.copytree(root / folder, tree / package.replace(".", "/"), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip


def on_files(files: Files, config: Any) -> Files:
    for page, make in _generator().PAGES.items():
        files.append(File.generated(config, page, content=make()))
    return files
