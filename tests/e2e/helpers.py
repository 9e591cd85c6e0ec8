"""Running `run_pipeline.py` as a user would, and checking what it wrote."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "run_pipeline.py"
YUNET = ROOT / "assets" / "models" / "yunet" / "face_detection_yunet_2023mar.onnx"
U2NETP = ROOT / "assets" / "models" / "u2netp" / "u2netp.onnx"
VIDEOS = ROOT / "assets" / "videos"


def _default_threshold() -> float:
    from framewire.config import load_config

    return float(load_config(ROOT / "configs" / "default.yaml").model.params.get("score_threshold", 0.9))


DEFAULT_THRESHOLD = _default_threshold()
"""The default job's face score threshold: the reference detector uses the same."""


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CLI), *args],
        cwd=cwd or ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def start_cli(*args: str, cwd: Path | None = None, env_extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CLI), *args],
        cwd=cwd or ROOT,
        env={**env(), **(env_extra or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def face_job(tmp: Path, uri: str | Path, *extra: str, source_id: str = "clip") -> list[str]:
    """`run` arguments for the default face job on one source, writing into `tmp` (no zmq)."""
    return [
        "run",
        "--no-progress",
        "--set", f"sources.0.id={source_id}",
        "--set", f"sources.0.uri={uri}",
        "--set", f"outputs=[{{kind: video_file, path: '{tmp}/{{source_id}}.mp4'}}, "
        f"{{kind: jsonl, path: '{tmp}/{{source_id}}.jsonl'}}]",
        *extra,
    ]  # fmt: skip


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("framewire: error:")]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def decoded_frames(path: Path) -> list[np.ndarray]:
    """The frames exactly as framewire's decoder gives them to the pipeline."""
    from framewire.media.video_reader import VideoReader

    with VideoReader("ref", str(path)) as reader:
        reader.open()
        return [f.image for f in reader.frames()]


def reference_faces(image: np.ndarray, score_threshold: float = DEFAULT_THRESHOLD, max_side: int = 640) -> list[dict[str, Any]]:
    """cv2.FaceDetectorYN on the frame, at the size framewire's `input_size: auto` uses."""
    h, w = image.shape[:2]
    scale = min(1.0, max_side / max(w, h))
    rw, rh = max(1, round(w * scale)), max(1, round(h * scale))
    resized = image if (rw, rh) == (w, h) else cv2.resize(image, (rw, rh), interpolation=cv2.INTER_LINEAR)
    detector = _detector(rw, rh, score_threshold)
    _, faces = detector.detect(resized)
    out = []
    for row in faces if faces is not None else []:
        out.append(
            {
                "box": [float(v) / scale for v in row[:4]],
                "landmarks": [[float(row[4 + 2 * i]) / scale, float(row[5 + 2 * i]) / scale] for i in range(5)],
                "score": float(row[14]),
            }
        )
    return out


@functools.lru_cache(maxsize=8)
def _detector(width: int, height: int, score_threshold: float) -> Any:
    return cv2.FaceDetectorYN.create(str(YUNET), "", (width, height), score_threshold, 0.3, 5000)


def iou(a: list[float], b: list[float]) -> float:
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    ix = max(0.0, min(ax + aw, bx + bw) - max(ax, bx))
    iy = max(0.0, min(ay + ah, by + bh) - max(ay, by))
    inter = ix * iy
    union = aw * ah + bw * bh - inter
    return inter / union if union > 0 else 0.0


SCORE_MARGIN = 0.02
"""How far from the threshold a face may score and still be found on one side only: the model's
input is the decoder's pixels within a level (a 720p frame's planes are scaled before they are
converted: framewire.media.yuv.to_bgr_resized), which moves a score by less than this."""


def assert_faces_match(records: list[dict[str, Any]], frames: list[np.ndarray], min_iou: float = 0.9) -> int:
    """Every frame: the faces cv2.FaceDetectorYN finds, each at IoU >= min_iou, and no others;
    only a face that scores within SCORE_MARGIN of the threshold may be found by one side alone.
    Returns the number of faces the reference finds."""
    assert len(records) == len(frames)
    total = 0
    for record, image in zip(records, frames, strict=True):
        ours = record["results"]["detections"]
        near = reference_faces(image, DEFAULT_THRESHOLD - SCORE_MARGIN)  # found, or nearly
        strong = sum(face["score"] >= DEFAULT_THRESHOLD + SCORE_MARGIN for face in near)
        found = f"frame {record['seq']}: {len(ours)} faces, cv2 finds {strong} to {len(near)}"
        assert strong <= len(ours) <= len(near), found
        for face in near:
            best = max((iou(face["box"], o["box"]) for o in ours), default=0.0)
            if face["score"] >= DEFAULT_THRESHOLD + SCORE_MARGIN:
                assert best >= min_iou, f"frame {record['seq']}: best IoU {best:.3f} for {face['box']}"
        for face in ours:
            best = max((iou(face["box"], r["box"]) for r in near), default=0.0)
            assert best >= min_iou, f"frame {record['seq']}: a face cv2 does not find: {face['box']}"
            assert face["score"] >= DEFAULT_THRESHOLD
        total += sum(face["score"] >= DEFAULT_THRESHOLD for face in near)
    return total
