"""mypy on the installed package (STYLE.md asks for the runtime and the engines; the rest is clean too):
a type error there fails the suite. It reads the strict editable install's link tree, where pipeline/,
stages/ and engines/ sit under framewire/ as in the wheel (`make` installs it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_is_clean_on_the_installed_package() -> None:
    pytest.importorskip("mypy")
    trees = sorted((ROOT / "build").glob("__editable__.framewire-*"))
    assert trees, "no strict editable install: run `make test` (pip install -e . --config-settings editable_mode=strict)"
    env = {**os.environ, "PYTHONPATH": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "framewire"],
        cwd=trees[-1], capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:]
