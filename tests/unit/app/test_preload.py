"""What the fork server imports before the first worker starts (framewire.app.preload): every worker
needs it, and a file job waits for it. The daemon's HTTP side (metrics, previews) is not part of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


FORKED = '''
import json, os, sys
from framewire.app.preload import PRELOAD
from framewire.pipeline.worker.forkserver import worker_context

def build(config_path, out):
    before = set(sys.modules)
    from framewire.app.compose.model import build_task
    from framewire.config import load_config, resolve_inputs
    from framewire.engines.registry import choose_backend
    config = resolve_inputs(load_config(config_path), [os.path.dirname(os.path.dirname(config_path))])
    build_task(config)  # reads the model's inputs
    choose_backend(config.engine, quiet=True)  # asks whether TensorRT and a GPU are there
    out.send(sorted(set(sys.modules) - before))

if __name__ == "__main__":
    context = worker_context(PRELOAD)
    ours, theirs = context.Pipe()
    worker = context.Process(target=build, args=(sys.argv[1], theirs))
    worker.start()
    print(json.dumps(ours.recv()))
    worker.join(30)
'''


def test_a_forked_worker_builds_its_task_without_importing_more(tmp_path: Path) -> None:
    """What a stage worker does first after its fork (read the model's inputs, choose the backend)
    imports nothing the fork server has not: each such import would be paid once a worker, on the
    way to the first frame, and kept in pages of its own."""
    script = tmp_path / "forked.py"
    script.write_text(FORKED, encoding="utf-8")
    config = Path(__file__).resolve().parents[3] / "configs" / "default.yaml"
    done = subprocess.run([sys.executable, str(script), str(config)], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert [m for m in imported if m.split(".")[0] in ("onnx", "onnxruntime", "cv2", "av", "numpy", "pydantic")] == []
    assert "framewire.engines.trt_build" not in imported
