"""`framewire.start(config) -> Job`: the one way to start a job, from Python as the CLI does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import framewire

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
VIDEO = ROOT / "assets" / "videos" / "carphone_pristine.mp4"
YUNET = ROOT / "assets" / "models" / "yunet" / "face_detection_yunet_2023mar.onnx"


def _config(folder: Path, frames: int, *, realtime: bool = False) -> framewire.Config:
    text = f"""
sources: [{{id: cam, uri: {VIDEO}, max_frames: {frames}, realtime: {str(realtime).lower()}}}]
model: {{path: {YUNET}, task: face_detection}}
engine: {{backend: onnxruntime, providers: [cpu], threads: 1}}
outputs: [{{kind: jsonl, path: "{folder}/{{source_id}}.jsonl"}}]
"""
    return framewire.load_config("job.yaml", text=text)


def test_start_runs_a_job_to_its_report(tmp_path: Path) -> None:
    job = framewire.start(_config(tmp_path, 8))
    report = job.wait(timeout=180)
    assert isinstance(report, framewire.Report)
    assert (report.exit_code, report.error, report.frames) == (0, None, {"cam": 8})
    assert job.done and job.stats()["frames"] == 8 and job.stats()["running"] is False
    lines = (tmp_path / "cam.jsonl").read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(8))
    assert job.wait() is report  # waiting again gives the same report


def test_wait_times_out_and_stop_drains(tmp_path: Path) -> None:
    with framewire.start(_config(tmp_path, 300, realtime=True)) as job:
        with pytest.raises(framewire.JobTimeout):
            job.wait(timeout=0.2)
        assert isinstance(framewire.JobTimeout("x"), TimeoutError)
        while job.stats()["frames"] == 0:  # a paced file: stopped once its first frame is out
            with pytest.raises(framewire.JobTimeout):
                job.wait(timeout=0.05)
        job.stop()
        report = job.wait(timeout=60)
    assert report.exit_code == 0 and report.stopped
    assert 0 < report.frames["cam"] < 300


def test_a_config_the_plan_refuses_raises_before_anything_starts(tmp_path: Path) -> None:
    config = _config(tmp_path, 4).model_copy(update={"model": _config(tmp_path, 4).model.model_copy(update={"path": str(tmp_path / "none.onnx")})})
    with pytest.raises(framewire.ConfigError, match="model.path: model file not found"):
        framewire.start(config)


def test_the_public_api_is_lazy() -> None:
    code = "import sys, framewire; import framewire.pipeline.frame; print('cv2' in sys.modules, 'framewire.config' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "False"]
    for name in ("Client", "Pipeline", "start", "Job", "Report", "FramewireError", "ConfigError", "FrameRecord",
                 "EndOfStream", "SegmentClosed", "Config", "load_config"):  # fmt: skip
        assert name in framewire.__all__ and getattr(framewire, name) is not None


def test_json_log_format_gives_the_summary_and_the_error_as_objects(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        f"sources: [{{id: cam, uri: {VIDEO}, max_frames: 3}}]\nmodel: {{path: {YUNET}, task: face_detection}}\n"
        f"engine: {{backend: onnxruntime, providers: [cpu]}}\noutputs: [{{kind: jsonl, path: '{tmp_path}/o.jsonl'}}]\n"
    )
    cli = [sys.executable, "-m", "framewire.cli", "--log-format", "json", "run", "-c", str(config), "--no-progress"]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    objects = [json.loads(line) for line in done.stderr.splitlines()]
    summary = [o for o in objects if o.get("event") == "summary"]
    assert len(summary) == 1 and summary[0]["frames"] == 3 and summary[0]["sources"]["cam"]["frames"] == 3
    assert summary[0]["exit_code"] == 0 and summary[0]["level"] == "INFO"
    bad = subprocess.run([*cli[:-3], "-c", str(tmp_path / "missing.yaml")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    error = json.loads(bad.stderr.strip())
    assert error["event"] == "error" and error["level"] == "ERROR" and error["exit_code"] == 2
    assert error["error"].endswith("missing.yaml: config file not found")
