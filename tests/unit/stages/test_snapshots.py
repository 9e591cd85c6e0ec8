"""Snapshots: the whole frame with its boxes or the object's crop; the track's first frame or its best."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from framewire.config.recording import SnapshotsConfig
from framewire.stages.outputs.snapshots import Snapshots

pytestmark = pytest.mark.timeout(30)


def frame(value: int) -> np.ndarray:
    return np.full((120, 160, 3), value, dtype=np.uint8)


def detection(score: float, box: tuple[float, float, float, float] = (40, 30, 40, 20)) -> dict[str, object]:
    return {"box": list(box), "score": score, "label": "car", "class_id": 2, "track_id": 7}


EVENT = {"event": "crossed", "source": "cam", "track_id": 7, "label": "car"}


def test_a_crop_is_the_object_and_a_margin(tmp_path: Path) -> None:
    shots = Snapshots(SnapshotsConfig(crop=True))
    path = str(tmp_path / "1.jpg")
    assert shots.take(frame(100), [detection(0.5)], EVENT, path, 1) == 0.5
    image = cv2.imread(path)
    assert image.shape[:2] == (24, 48)  # 20x40 and a tenth each side


def test_the_whole_frame_has_its_boxes(tmp_path: Path) -> None:
    shots = Snapshots(SnapshotsConfig())
    path = str(tmp_path / "1.jpg")
    shots.take(frame(0), [detection(0.5)], EVENT, path, 1)
    image = cv2.imread(path)
    assert image.shape[:2] == (120, 160) and image[30, 60].max() > 100 and image[60, 10].max() < 20


def test_pick_best_writes_again_only_on_a_better_score_while_the_track_lives(tmp_path: Path) -> None:
    shots = Snapshots(SnapshotsConfig(pick="best"))
    path = str(tmp_path / "1.jpg")
    shots.take(frame(10), [detection(0.5)], EVENT, path, 1)
    assert shots.frame("cam", frame(200), [detection(0.4)]) == []
    assert shots.frame("cam", frame(200), [detection(0.9)]) == [(1, path, 0.9)]
    assert cv2.imread(path).mean() > 150
    shots.track_ended("cam", 7)
    assert shots.frame("cam", frame(50), [detection(0.99)]) == []
    first = Snapshots(SnapshotsConfig(pick="first"))
    first.take(frame(10), [detection(0.5)], EVENT, path, 1)
    assert first.frame("cam", frame(200), [detection(0.9)]) == []
