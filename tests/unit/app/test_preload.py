"""What the fork server imports before the first worker starts (framewire.app.preload): every worker
needs it, and a file job waits for it. The daemon's HTTP side (metrics, previews) is not part of it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from framewire.app.preload import PRELOAD

pytestmark = pytest.mark.timeout(60)

NOT_IN_WORKERS = ("prometheus_client", "framewire.pipeline.ops.preview", "framewire.pipeline.ops.metrics")


def test_the_workers_imports_leave_out_the_http_side() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(PRELOAD)!r}: importlib.import_module(name)\n"
        f"print(json.dumps([m for m in {list(NOT_IN_WORKERS)!r} if m in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
