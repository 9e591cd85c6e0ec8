"""mypy on the installed packages (STYLE.md asks for pipeline/ and engines/; the rest is clean too):
a type error there fails the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_is_clean_on_the_installed_packages() -> None:
    pytest.importorskip("mypy")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy"]  # the files of [tool.mypy] in pyproject.toml, cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
