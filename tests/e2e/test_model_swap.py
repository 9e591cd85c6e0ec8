"""A model's new version during a paced block job, through the CLI and `POST /model` (issue 37 part 3):
every frame once, in order; the records name the version that made them, old then new, switching
once; a broken model file leaves the job running on the old version, with one line saying why."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

import onnx
import pytest

from tests.e2e.helpers import VIDEOS, YUNET, face_job, read_jsonl, start_cli
from tests.e2e.test_http import call, free_port, get, wait_until
from tests.support import clips

pytestmark = pytest.mark.timeout(240)


def unloadable_copy(path: Path) -> Path:
    """The model with one weight cut in half: it parses and fits the task, so it passes every check
    made before its workers start, but ONNX Runtime refuses to load it."""
    model = onnx.load(str(YUNET))
    weight = next(w for w in model.graph.initializer if len(w.raw_data) > 64)
    weight.raw_data = weight.raw_data[: len(weight.raw_data) // 2]
    onnx.save(model, str(path))
    return path


def test_a_new_model_version_takes_over_a_paced_job_and_a_broken_one_leaves_the_old_running(tmp_path: Path) -> None:
    # A paced clip long enough to outlast the swaps on a busy machine; the test drains it after them.
    carphone = VIDEOS / "carphone_pristine.mp4"
    clip = clips.make_clip(tmp_path / "paced.mp4", frames=1800, fps=30, width=176, height=144, from_clip=carphone)
    new = shutil.copy(YUNET, tmp_path / "yunet-v2.onnx")
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(YUNET.read_bytes()[:100_000])
    unloadable = unloadable_copy(tmp_path / "unloadable.onnx")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    settings = ["sources.0.realtime=true", "http.enabled=true", f"http.port={port}"]
    proc = start_cli(*face_job(tmp_path, clip, *(arg for s in settings for arg in ("--set", s))))

    def ask(path: str, method: str = "GET", body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """`call`, saying what the daemon said when it is gone."""
        try:
            return call(url + path, method, body)
        except OSError:
            if proc.poll() is None:
                raise
            raise AssertionError(proc.stderr.read() if proc.stderr else "the daemon exited") from None

    def frames() -> int:
        status, body = ask("/sources")
        return int(body["sources"][0]["frames"]) if status == 200 and body["sources"] else 0

    def swap_state() -> dict[str, Any]:
        return ask("/model")[1]["swap"]

    try:
        wait_until(lambda: get(url + "/readyz")[0] == 200, proc, timeout=120)
        wait_until(lambda: frames() > 10, proc)  # the old version has made some
        status, old = ask("/model")
        assert status == 200 and old["swap"] is None and old["version"].startswith("face_detection_yunet_2023mar.onnx@")

        status, body = ask("/model", "POST", {"path": str(cut), "version": "cut"})
        assert status == 400 and body["error"].startswith(f"model.path: model file '{cut}' is not a valid ONNX model")
        refused = {"error": "model.pth: unknown key (did you mean path?)"}
        assert ask("/model", "POST", {"pth": str(new)}) == (400, refused)

        assert ask("/model", "POST", {"path": str(unloadable), "version": "unloadable"})[0] == 202
        wait_until(lambda: swap_state()["state"] == "failed", proc)
        failed = swap_state()
        assert "ONNX Runtime could not load it" in failed["error"] and ask("/model")[1]["version"] == old["version"]

        status, body = ask("/model", "POST", {"path": str(new), "version": "v2"})
        assert status == 202 and body["swap"]["state"] in ("starting", "taking_over")
        wait_until(lambda: swap_state()["state"] in ("retiring", "done"), proc)
        assert ask("/model")[1]["version"] == "v2"
        at_swap = frames()
        wait_until(lambda: frames() > at_swap + 10, proc)  # the new version has made some
        wait_until(lambda: swap_state()["state"] == "done", proc)  # the old workers are gone
        assert ask("/drain", "POST")[0] == 202
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    records = read_jsonl(tmp_path / "clip.jsonl")
    assert [r["seq"] for r in records] == list(range(len(records)))  # every frame once, in order
    assert 30 < len(records) < 1800
    runs = [(version, len(list(group))) for version, group in itertools.groupby(r["model"] for r in records)]
    assert [version for version, _ in runs] == [old["version"], "v2"], runs  # old, then new: one switch
    why = [line for line in err.splitlines() if "model" in line and ("not changed" in line or "not loaded" in line)]
    assert len(why) == 3, err  # one line for each refusal, the job going on
    assert f"'{cut}' is not a valid ONNX model" in why[0] and "model.pth: unknown key" in why[1]
    assert "model unloadable not loaded" in why[2] and "ONNX Runtime could not load it" in why[2]
    assert "model v2 took over from face_detection_yunet_2023mar.onnx@" in err
