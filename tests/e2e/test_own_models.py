"""Bring your own model, as a new user would: each real model runs from a config through the CLI,
with no code, and what it finds matches its own package's pipeline on every frame of a test clip
(IoU >= 0.9 for at least 95% of the reference boxes; OCR strings equal for at least 95% of lines).
Tracking keeps its ids (counted against the clip's truth, beside the reference tracker on the same
boxes), and `interval: 2` runs the detector on one frame in three with the boxes in between near
the detector's own.

The reference packages are installed on first use into .venv/reference (bench/references.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from bench import references as R
from bench.text_clip import text_frames, write_frames
from tests.e2e.helpers import ROOT, VIDEOS, decoded_frames, read_jsonl, run_cli

pytestmark = pytest.mark.timeout(600)

CONFIGS = ROOT / "configs"
MIN_IOU, MIN_SHARE = 0.9, 0.95


def _job(tmp: Path, config: Path, uri: Path, *extra: str) -> list[dict[str, Any]]:
    """Run `config` on `uri` through the CLI; its JSONL records (no video written)."""
    done = run_cli(
        "run", "-c", str(config), "--no-progress",
        "--set", "sources.0.id=clip", "--set", f"sources.0.uri={uri}", "--set", "composite=[]",
        "--set", f"outputs=[{{kind: jsonl, path: '{tmp}/{{source_id}}.jsonl'}}]",
        *extra, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    records = read_jsonl(tmp / "clip.jsonl")
    assert [r["seq"] for r in records] == list(range(len(records))) and all(r["v"] == 2 for r in records)
    return records


def _boxes(record: dict[str, Any]) -> np.ndarray:
    from framewire.stages.detections import boxes

    return boxes(record["results"]["detections"])


def _cut(tmp: Path, video: str, start: int, count: int) -> Path:
    frames = decoded_frames(VIDEOS / video)[start : start + count]
    return write_frames(tmp / f"{Path(video).stem}-{start}.mp4", frames)


def _agreement(reference: list[np.ndarray], records: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(reference boxes matched at IoU >= 0.9, reference boxes, our boxes) over every frame."""
    assert len(reference) == len(records)
    pairs = sum(
        len(R.matched(ref, _boxes(rec), MIN_IOU)) for ref, rec in zip(reference, records, strict=True)
    )
    return pairs, sum(len(r) for r in reference), sum(len(_boxes(r)) for r in records)


def test_yolox_from_the_shipped_config_matches_ddddocr(tmp_path: Path) -> None:
    clip = _cut(tmp_path, "bikes.mp4", 140, 30)
    records = _job(tmp_path, CONFIGS / "yolox.yaml", clip)
    reference = R.ddddocr_boxes(decoded_frames(clip))
    matched, total, ours = _agreement(reference, records)
    assert total >= 60, total
    assert matched >= MIN_SHARE * total and matched >= MIN_SHARE * ours, (matched, total, ours)
    assert {d["label"] for r in records for d in r["results"]["detections"]} == {"target"}


def test_an_ultralytics_yolov8_model_matches_nudenet(tmp_path: Path) -> None:
    """nudenet's model (AGPL-3.0) is loaded from the installed package, never copied. Its format
    (yolov8), input size and labels come from the model itself, and its task too (no `task:`, as
    the README promises); the preprocessing keys say what nudenet's own code does (pad bottom-right
    with black, BGR as its colour conversions end up)."""
    model = {
        "path": str(R.nudenet_model()),
        "pad": "top_left", "pad_value": 0, "channels": "bgr", "nms": "agnostic",
    }  # fmt: skip
    config = yaml.safe_load((CONFIGS / "yolox.yaml").read_text())
    config["model"] = model
    path = tmp_path / "nudenet.yaml"
    path.write_text(yaml.safe_dump(config))
    clip = _cut(tmp_path, "bigbuckbunny.mp4", 44, 30)
    records = _job(tmp_path, path, clip)
    reference = R.nudenet_detections(decoded_frames(clip))
    matched, total, ours = _agreement([boxes for boxes, _ in reference], records)
    assert total >= 60, total
    assert matched >= MIN_SHARE * total and matched >= MIN_SHARE * ours, (matched, total, ours)
    labels = sorted(d["label"] for r in records for d in r["results"]["detections"])
    assert labels == sorted(name for _, names in reference for name in names)


def test_the_ocr_cascade_reads_what_rapidocr_reads(tmp_path: Path) -> None:
    clip = VIDEOS / "signs.mp4"
    records = _job(tmp_path, CONFIGS / "ocr.yaml", clip, "--set", "sources.0.max_frames=6")
    reference = R.rapidocr_lines(decoded_frames(clip)[:6])
    lines = same = boxes = 0
    for ref, record in zip(reference, records, strict=True):
        found = record["results"]["detections"]
        pairs = R.matched(np.array([box for box, _ in ref]), _boxes(record), MIN_IOU)
        boxes += len(pairs)
        lines += len(ref)
        for i, j, _ in pairs:
            same += found[j].get("attributes", {}).get("text", {}).get("text") == ref[i][1]
    assert lines >= 30, lines
    assert boxes >= MIN_SHARE * lines and same >= MIN_SHARE * lines, (boxes, same, lines)


def _tracks(record: dict[str, Any]) -> list[tuple[np.ndarray, int]]:
    found = record["results"]["detections"]
    return [(box, d["track_id"]) for box, d in zip(_boxes(record), found, strict=True) if "track_id" in d]


def test_tracking_keeps_ids_and_interval_cuts_the_detectors_work(tmp_path: Path) -> None:
    """Moving words (two pass each other): no identity switch against the clip's truth, as the
    reference tracker run on the same boxes; with interval 2, one frame in three runs the detector
    and the boxes the tracker carries in between overlap the detector's own. The first run has its
    stages fused (one infer process per source), the second split into processes of their own
    (two preprocess workers; the track and secondary stages ordered per source)."""
    count = 45
    clip = VIDEOS / "signs.mp4"
    fast = (
        "--set",
        "model.limit=max",
        "--set",
        "model.limit_side=640",
        "--set",
        f"sources.0.max_frames={count}",
    )
    config = CONFIGS / "tracking.yaml"
    every = _job(
        tmp_path / "every", config, clip, *fast, "--set", "tracking.interval=0", "--set", "secondary=[]"
    )
    _, truth = text_frames(count)
    truth_boxes = [{k: np.array(v, dtype=np.float64) for k, v in frame.items()} for frame in truth]
    ours = R.id_switches(truth_boxes, [_tracks(r) for r in every])
    detector = [(_boxes(r), np.array([d["score"] for d in r["results"]["detections"]])) for r in every]
    per_frame = R.supervision_tracks(detector, track_activation_threshold=0.5)
    theirs = R.id_switches(
        truth_boxes,
        [
            [(boxes[i], t) for i, t in ids.items()]
            for (boxes, _), ids in zip(detector, per_frame, strict=True)
        ],
    )
    assert ours == 0 and ours <= theirs, (ours, theirs)
    assert all(len(_tracks(r)) == len(truth[0]) for r in every[1:])

    split = ("--set", "stages.fuse=false", "--set", "stages.preprocess.workers=2")
    skipping = _job(tmp_path / "skip", config, clip, *fast, *split)
    ran = [r["seq"] for r in skipping if not any(d.get("predicted") for d in r["results"]["detections"])]
    assert ran == list(range(0, count, 3))  # the detector's frames: 15 of 45
    texts = {
        d["track_id"]: d.get("attributes", {}).get("text", {}).get("text")
        for d in skipping[-1]["results"]["detections"]
    }
    # Every track was read (once per 10 frames); the recogniser keeps or drops a space at this size.
    assert sorted(str(t).replace(" ", "") for t in texts.values()) == sorted(
        t.replace(" ", "") for t in truth[0]
    )
    overlaps = []
    for record, reference in zip(skipping, every, strict=True):
        if record["seq"] % 3:
            pairs = R.matched(_boxes(reference), _boxes(record), 0.0)
            overlaps += [iou for _, _, iou in pairs]
    assert len(overlaps) >= 25 * 5 and float(np.mean(overlaps)) >= 0.75, np.mean(overlaps)


def test_bytetrack_gives_the_reference_trackers_ids_on_a_crowd() -> None:
    """25 objects crossing, jittered, one in four missed, a third of low score: framewire's ByteTrack
    and supervision's, on the same boxes, track the same boxes with the same ids."""
    from bench.models import compare_trackers, crowd, our_tracks

    boxes, truth = crowd(seed=3)
    stats = compare_trackers(boxes, our_tracks(boxes), truth)
    assert stats["tracked_boxes"] > 5000
    assert stats["agreement"] >= 0.99 and stats["id_switches"] <= stats["reference_id_switches"], stats
    assert stats["only_ours"] + stats["only_reference"] <= 0.01 * stats["tracked_boxes"], stats


def test_validate_says_how_each_model_is_read_and_bad_ones_stop_at_start(tmp_path: Path) -> None:
    done = run_cli("validate", "-c", str(CONFIGS / "ocr.yaml"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("  model: text_detection: probability map")
    assert "  secondary.0 (text): text_recognition: CTC over 6623 characters, input height 48" in lines
    assert "  secondary.1 (angle) classes (2): 0=0, 1=180" in lines
    done = run_cli("validate", "-c", str(CONFIGS / "yolox.yaml"))
    assert "detection: format yolox (3549 rows = the grid cells at the strides), 1 classes" in done.stdout
    assert "  model classes (1): 0=target" in done.stdout.splitlines()
    bad = run_cli(
        "run",
        "-c",
        str(CONFIGS / "ocr.yaml"),
        "--set",
        "model.path=assets/models/u2netp/u2netp.onnx",
        "--set",
        "model.task=matting",
        "--set",
        f"outputs=[{{kind: jsonl, path: '{tmp_path}/x.jsonl'}}]",
    )
    assert bad.returncode == 2
    assert [line for line in bad.stderr.splitlines() if line.strip()] == [
        "framewire: error: secondary.0: needs a model that gives boxes, but model.task 'matting' gives none "
        "(detection, face_detection, text_detection do)"
    ]
    assert not (tmp_path / "x.jsonl").exists()
