"""Triton itself reads what `triton-repo` writes: the real `tritonserver` 2.51 (the one pytriton ships,
tests.support.components.triton_venv) polls a repository of every shipped config's models with
auto-complete off, so its own model-config validation (ValidateModelConfig and, in strict mode,
ValidateModelIOConfig) runs on each `config.pbtxt` as written. That build has only the Python
backend, so a valid entry gets as far as looking for the ONNX Runtime (or TensorRT) backend library
and stops there; an invalid one is refused earlier, when the repository is polled, with another
message (the contrast cases below, broken by hand, show the check can fail).

The server opens no port (HTTP, gRPC and metrics off) and, with --exit-on-error, exits by itself
once every model has been tried, so the test waits on the process, not on a port or a log line. It
loads no Python model, so the Python backend maps no shared memory: nothing is left in /dev/shm.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from functools import cache
from pathlib import Path

import pytest

from framewire import cli
from tests.support.components import triton_venv

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
JOBS = ("default", "lipsync", "matting", "nanodet", "ocr", "ssd", "yolox")
"""The shipped configs whose models differ (the others reuse these models under the same names)."""
YUNET = "face_detection_yunet_2023mar"
GPU_SETS = ("engine.providers=[tensorrt,cuda]", "engine.devices=[0,2]", "engine.precision=fp16",
            "engine.max_batch=4", "engine.processes_per_device=3")  # fmt: skip
NO_BACKEND = "unable to find backend library for backend '{}'"
_LOAD_FAILED = re.compile(r"failed to load '([^']+)' version \d+: (.*?)\"?$", re.MULTILINE)
_POLL_FAILED = re.compile(r"Poll failed for model directory '([^']+)': (.*?)\"?$", re.MULTILINE)


@cache
def tritonserver() -> Path:
    """The `tritonserver` binary inside the triton venv's pytriton (its libraries are found through
    its RPATH, next to it in the wheel), and pytriton's backends folder beside it."""
    python = triton_venv()
    where = "import importlib.util as u; print(u.find_spec('pytriton').submodule_search_locations[0])"
    done = subprocess.run([str(python), "-c", where], capture_output=True, text=True, check=True, timeout=60)
    binary = Path(done.stdout.strip()) / "tritonserver" / "bin" / "tritonserver"
    assert binary.is_file(), f"no tritonserver in pytriton at {binary}"
    return binary


def serve_once(repo: Path, log: Path) -> tuple[str, dict[str, str], dict[str, str]]:
    """Run tritonserver on `repo` until it gives up (every model tried): its log, and per model
    the reason it failed to load and the reason it was refused when the repository was polled."""
    binary = tritonserver()
    backends = binary.parents[1] / "backends"
    cmd = [str(binary), f"--model-repository={repo}", f"--backend-directory={backends}",
           "--disable-auto-complete-config", "--exit-on-error=true",
           "--allow-http=false", "--allow-grpc=false", "--allow-metrics=false"]  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    text = log.read_text(errors="replace")
    assert code == 1 and "failed to load all models" in text, f"tritonserver exited {code}: {text[-2000:]}"
    assert re.search(r"strict_model_config\s*\|\s*1\s*\|", text), "auto-complete was not off"
    assert re.search(r"server_version\s*\|\s*2\.51\.0\s*\|", text)
    return text, dict(_LOAD_FAILED.findall(text)), dict(_POLL_FAILED.findall(text))


def write(repo: Path, job: str, *args: str) -> None:
    assert cli.main(["triton-repo", "-c", str(CONFIGS / f"{job}.yaml"), "-o", str(repo), *args]) == 0


def test_triton_validates_every_written_config(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    for job in JOBS:
        write(repo, job)
    # The default model again as a GPU entry with ONNX Runtime's TensorRT accelerator, with preferred
    # batches, and as a tensorrt_plan entry (the plan's bytes are TensorRT's business, not the config's).
    gpu = [a for s in GPU_SETS for a in ("--set", s)]
    write(repo, "default", *gpu, "--name", "faces_gpu", "--max-batch", "16")
    write(repo, "default", "--name", "faces_batches", "--preferred-batch", "2", "--preferred-batch", "8")
    plan = tmp_path / "yunet.plan"
    plan.write_bytes(b"a TensorRT plan is only read by the TensorRT backend")
    write(repo, "default", "--platform", "tensorrt", "--plan", str(plan), "--name", "faces_plan")
    # A cascade's secondary models as plans too (their crops as the batch, 32).
    plans = ["--plan", str(plan), "--plan", f"text={plan}", "--plan", f"angle={plan}"]
    names = ["--name", "det_plan", "--secondary-name", "text=rec_plan", "--secondary-name", "angle=cls_plan"]
    write(repo, "ocr", "--platform", "tensorrt", *plans, *names)
    models = sorted(p.name for p in repo.iterdir())
    assert len(models) == 15, models

    log, load_failed, poll_failed = serve_once(repo, tmp_path / "server.log")
    assert poll_failed == {}, f"Triton refused written configs: {poll_failed}"
    assert sorted(load_failed) == models, log[-3000:]
    for name, reason in load_failed.items():
        backend = "tensorrt" if name.endswith("_plan") else "onnxruntime"
        assert NO_BACKEND.format(backend) in reason, f"{name}: {reason}"


CONTRAST = {
    "preferred batch above max_batch_size": (
        ("dynamic_batching {", "dynamic_batching {\n  preferred_batch_size: [ 16 ]"),
        "dynamic batching preferred size must be <= max batch size",
    ),
    "a zero dim": (("dims: [ 3, -1, -1 ]", "dims: [ 3, 0, -1 ]"), "dimension must be integer >= 1, or -1"),
    "an unknown data type": (("data_type: TYPE_FP32", "data_type: TYPE_FLOAT"), "failed to read text proto"),
    "a name other than the folder's": (
        (f'name: "{YUNET}"', 'name: "yunet"'),
        "unexpected directory name",
    ),
}


def test_triton_refuses_a_broken_config_when_it_polls(tmp_path: Path) -> None:
    """The contrast: the same entry broken by hand is refused before any backend is looked for."""
    written = tmp_path / "written"
    write(written, "default")
    repo = tmp_path / "models"
    shutil.copytree(written / YUNET, repo / YUNET)  # the intact entry: as far as the backend library
    for case, ((old, new), _) in CONTRAST.items():
        folder = repo / re.sub(r"\W+", "_", case)
        shutil.copytree(written / YUNET, folder)
        text = (folder / "config.pbtxt").read_text()
        assert old in text, case
        text = text.replace(old, new, 1).replace(f'name: "{YUNET}"', f'name: "{folder.name}"')
        (folder / "config.pbtxt").write_text(text)

    _, load_failed, poll_failed = serve_once(repo, tmp_path / "server.log")
    assert list(load_failed) == [YUNET] and NO_BACKEND.format("onnxruntime") in load_failed[YUNET]
    assert sorted(poll_failed) == sorted(re.sub(r"\W+", "_", case) for case in CONTRAST)
    for case, (_, message) in CONTRAST.items():
        reason = poll_failed[re.sub(r"\W+", "_", case)]
        assert message in reason, f"{case}: {reason}"
