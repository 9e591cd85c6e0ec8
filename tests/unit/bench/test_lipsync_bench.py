"""The lip-sync benchmark's pieces: the shipped test models are what the builder makes, and the loop
runs the job with the daemon's own steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import lipsync, lipsync_models

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[3]


def test_the_shipped_test_models_are_what_the_builder_makes() -> None:
    folder = ROOT / "assets" / "models" / "lipsync_test"
    assert (folder / "generator.onnx").read_bytes() == lipsync_models.generator()
    assert (folder / "audio_encoder.onnx").read_bytes() == lipsync_models.audio_encoder()


def test_the_loop_runs_the_lipsync_job_and_times_its_steps(tmp_path: Path) -> None:
    from framewire.config import load_config, resolve_inputs

    config = resolve_inputs(load_config(ROOT / "configs" / "lipsync.yaml"), [ROOT])
    audio = tmp_path / "a.wav"
    lipsync.write_wav(audio, np.zeros(16000, np.float32))
    result = lipsync.run_loop(config.model_dump(mode="json", exclude_none=True), str(audio), str(tmp_path / "o.mp4"))
    assert result["frames"] == 30  # 1 s at 29.97 fps
    assert set(result["steps_ms"]) == {"region", "audio", "preprocess", "model", "postprocess", "composite", "encode"}
    assert 0 < result["steps_ms"]["model"] < sum(result["steps_ms"].values()) and result["cpu_ms_per_frame"] > 0
    job = lipsync.daemon_job(config, 3, str(audio), tmp_path)
    split = lipsync.daemon_job(config, 3, str(audio), tmp_path, split=True)
    assert not split.stages.fuse and [s.workers for s in split.steps] == [3, 1]
    assert [s.id for s in job.sources] == ["avatar0", "avatar1", "avatar2"] and job.engine.processes_per_device == 3
    assert job.stages.fuse and all(s.audio is not None and s.audio.uri == str(audio) for s in job.sources)
