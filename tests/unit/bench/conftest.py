"""A tiny job for the benchmarks: a generated clip with a real face, the shipped YuNet model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.clips import make_clip

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tiny_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config for 12 frames of 160x128 with a face: blur, an H.264 file and JSONL."""
    folder = tmp_path_factory.mktemp("bench-job")
    clip = make_clip(
        folder / "face.mp4",
        width=160,
        height=128,
        frames=12,
        from_clip=ROOT / "assets" / "videos" / "carphone_pristine.mp4",
    )
    config = folder / "job.yaml"
    config.write_text(
        f"""
version: 1
sources:
  - id: cam
    uri: {clip}
model:
  path: {ROOT / "assets" / "models" / "yunet" / "face_detection_yunet_2023mar.onnx"}
  task: face_detection
  score_threshold: 0.7
engine:
  threads: 1
  processes_per_device: 2
composite:
  - kind: blur
outputs:
  - kind: video_file
    path: out/{{source_id}}.mp4
    preset: ultrafast
  - kind: jsonl
    path: out/{{source_id}}.jsonl
  - kind: zmq
    endpoint: tcp://127.0.0.1:5599
""",
        encoding="utf-8",
    )
    return config
