"""mypy on pipeline/ and engines/ (STYLE.md): a type error there fails the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_is_clean_on_pipeline_and_engines() -> None:
    pytest.importorskip("mypy")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "pipeline", "engines"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
