"""A video output's `threads: auto`: x264's own threads only where the job's processes leave cores
idle (they spend 20-40% more CPU on the same frames), and the number given reaches the encoder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from framewire.app.compose.outputs import _output, encoder_threads
from framewire.config import validate_config

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
BIKES = str(ROOT / "assets" / "videos" / "bikes.mp4")
YUNET = str(ROOT / "assets" / "models" / "yunet" / "face_detection_yunet_2023mar.onnx")


def _config(sources: int = 1, threads: Any = "auto", processes: int = 2, fuse_outputs: bool = True) -> Any:
    return validate_config({
        "sources": [{"id": f"s{i}", "uri": BIKES} for i in range(sources)],
        "model": {"path": YUNET, "task": "face_detection"},
        "engine": {"providers": ["cpu"], "processes_per_device": processes},
        "stages": {"fuse": True, "fuse_outputs": fuse_outputs},
        "outputs": [{"kind": "video_file", "path": "/tmp/{source_id}.mp4", "threads": threads},
                    {"kind": "jsonl", "path": "/tmp/{source_id}.jsonl"}],
    }, "test.yaml")  # fmt: skip


def test_one_thread_where_the_job_s_processes_fill_the_cores() -> None:
    # decode + 2 infer + 1 output = 4 processes
    assert encoder_threads(_config(), cores=2) == 1
    assert encoder_threads(_config(), cores=4) == 1
    assert encoder_threads(_config(), cores=16) == 0  # cores to spare: x264's own choice
    assert encoder_threads(_config(sources=13), cores=16) == 1  # 13 + 2 + 1 = 16 processes
    assert encoder_threads(_config(sources=12), cores=16) == 0
    assert encoder_threads(_config(fuse_outputs=False), cores=5) == 1  # two output processes


def test_auto_is_resolved_for_the_output_and_a_number_is_kept() -> None:
    config = _config()
    assert _output(config, 0).config.threads == encoder_threads(config)
    assert _output(_config(threads=3), 0).config.threads == 3


def test_workers_start_with_opencv_s_thread_pool_off() -> None:
    import cv2

    from framewire.app.compose.plan import build_plan, single_threaded_opencv

    assert build_plan(_config()).worker_init is single_threaded_opencv
    before = cv2.getNumThreads()
    try:
        single_threaded_opencv()
        assert cv2.getNumThreads() == 1
    finally:
        cv2.setNumThreads(before)


def test_the_output_worker_asking_does_not_repeat_the_jobs_backend_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Seen on a GPU host with the cpu extra: the warning came once from the job and again from the
    output worker, which counts the infer workers to size x264's threads."""
    import logging

    from framewire.engines import registry

    gpu_with_cpu_build = registry.Machine(None, 1, "", frozenset({"CPUExecutionProvider"}))
    monkeypatch.setattr(registry, "detect_machine", lambda: gpu_with_cpu_build)
    monkeypatch.setattr(registry, "_logged", set())
    with caplog.at_level(logging.DEBUG, logger="framewire.engines.registry"):
        assert encoder_threads(_config(), cores=2) == 1
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
