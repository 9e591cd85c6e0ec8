"""The two shipped COCO detectors, configured as the docs say (configs/nanodet.yaml, configs/ssd.yaml),
run through the CLI on a cut of bikes.mp4 with people, cyclists and cars, and give the same boxes as a
reference decoding of the same model on the same decoded frames: IoU >= 0.9 for >= 95% of the boxes
both ways, same classes.

- NanoDet: the reference is NanoDet's own post-process written here with numpy, apart from framewire's
  decoder: GFL decode (softmax over each side's 11 bins, expected bin x stride from the cell centre
  (col + 0.5, row + 0.5) x stride, clamped to the input) and `multiclass_nms` (every class at or above
  the score threshold at a cell, then greedy NMS per class at IoU 0.6).
- SSD: the NMS is inside the graph, so the reference is the ONNX model's own outputs, read with
  ONNX Runtime at graph optimisation level `all` (framewire's default, which the config keeps) on one
  thread; the input is the frame resized to 300x300 as uint8 RGB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort
import pytest
import yaml

from bench.text_clip import write_frames
from tests.e2e.helpers import ROOT, VIDEOS, decoded_frames, read_jsonl, run_cli

pytestmark = pytest.mark.timeout(180)

MIN_IOU, MIN_SHARE = 0.9, 0.95
START, COUNT = 100, 60
"""Frames 100-159 of bikes.mp4: cyclists on a street of parked and passing cars, a pedestrian."""


def _config(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text()))


def _labels(path: Path) -> list[str]:
    """One label a line, or "id  name" lines with gaps (the SSD's coco_labels.txt), by id."""
    lines = [line.split(maxsplit=1) for line in path.read_text().splitlines() if line.strip()]
    if all(len(p) == 2 and p[0].isdigit() for p in lines):
        names = {int(i): n.strip() for i, n in lines}
        return [names.get(i, str(i)) for i in range(max(names) + 1)]
    return [" ".join(p) for p in lines]


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)


def _greedy_nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> list[int]:
    order = list(np.argsort(-scores, kind="stable"))
    keep: list[int] = []
    while order:
        best = order.pop(0)
        keep.append(best)
        if order:
            overlap = _iou(boxes[[best]], boxes[order])[0]
            order = [i for i, o in zip(order, overlap, strict=True) if o <= threshold]
    return keep


def _nanodet_reference(session: ort.InferenceSession, frame: np.ndarray, cfg: dict[str, Any]) -> list[tuple[np.ndarray, int]]:
    """NanoDet-m's GFL decode and multiclass NMS on one BGR frame; (box in frame pixels, class id)."""
    m = cfg["model"]
    height, width = frame.shape[:2]
    image = cv2.resize(frame, (416, 416), interpolation=cv2.INTER_LINEAR).astype(np.float32)
    image = (image - np.float32(m["mean"])) / np.float32(m["std"])
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"input_1:0": image.transpose(2, 0, 1)[None]}), strict=True))
    boxes, scores, classes = [], [], []
    for stride in (8, 16, 32):
        side = 416 // stride
        cls = next(v[0] for v in outputs.values() if v.shape == (1, side * side, 80))
        reg = next(v[0] for v in outputs.values() if v.shape == (1, side * side, 44))
        bins = np.exp(reg.reshape(-1, 4, 11).astype(np.float64))
        dist = (bins / bins.sum(-1, keepdims=True) * np.arange(11)).sum(-1) * stride
        rows, cols = np.divmod(np.arange(side * side), side)
        cx, cy = (cols + 0.5) * stride, (rows + 0.5) * stride
        box = np.clip(np.stack([cx - dist[:, 0], cy - dist[:, 1], cx + dist[:, 2], cy + dist[:, 3]], 1), 0, 416)
        cell, klass = np.nonzero(cls >= m["score_threshold"])
        boxes.append(box[cell])
        scores.append(cls[cell, klass])
        classes.append(klass)
    box, score, klass = np.concatenate(boxes), np.concatenate(scores), np.concatenate(classes)
    box = box * np.array([width / 416, height / 416] * 2)
    found = []
    for c in np.unique(klass):
        idx = np.nonzero(klass == c)[0]
        found += [(box[idx[k]], int(c)) for k in _greedy_nms(box[idx], score[idx], m["iou_threshold"])]
    return found


def _ssd_reference(session: ort.InferenceSession, frame: np.ndarray, cfg: dict[str, Any]) -> list[tuple[np.ndarray, int]]:
    """The SSD graph's own outputs on one BGR frame resized to 300x300 uint8 RGB."""
    height, width = frame.shape[:2]
    image = cv2.cvtColor(cv2.resize(frame, (300, 300), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)
    boxes, classes, scores, count = session.run(None, {"normalized_input_image_tensor": image[None]})
    n = int(count[0])
    found = []
    for (ymin, xmin, ymax, xmax), c, s in zip(boxes[0][:n], classes[0][:n], scores[0][:n], strict=True):
        if s >= cfg["model"]["score_threshold"]:
            box = np.clip(np.array([xmin * width, ymin * height, xmax * width, ymax * height]), 0, [width, height] * 2)
            found.append((box, int(round(float(c)))))
    return found


def _agreement(reference: list[list[tuple[np.ndarray, int]]], ours: list[list[tuple[np.ndarray, int]]]) -> tuple[int, int, int]:
    """(pairs of the same class at IoU >= 0.9, matched one to one; reference boxes; our boxes)."""
    pairs = 0
    for ref, got in zip(reference, ours, strict=True):
        for c in {k for _, k in ref} & {k for _, k in got}:
            a = np.array([b for b, k in ref if k == c])
            b = np.array([b for b, k in got if k == c])
            overlap = _iou(a, b)
            while overlap.size and overlap.max() >= MIN_IOU:
                i, j = np.unravel_index(overlap.argmax(), overlap.shape)
                pairs += 1
                overlap[i, :], overlap[:, j] = -1, -1
    return pairs, sum(map(len, reference)), sum(map(len, ours))


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    frames = decoded_frames(VIDEOS / "bikes.mp4")[START : START + COUNT]
    return write_frames(tmp_path_factory.mktemp("detectors") / "bikes-cut.mp4", frames)


@pytest.mark.parametrize("name", ["nanodet", "ssd"])
def test_detector_matches_its_reference(name: str, clip: Path, tmp_path: Path) -> None:
    cfg = _config(name)
    done = run_cli(
        "run", "-c", str(ROOT / "configs" / f"{name}.yaml"), "--no-progress",
        "--set", f"sources.0.uri={clip}", "--set", "composite=[]",
        "--set", f"outputs=[{{kind: jsonl, path: '{tmp_path}/{{source_id}}.jsonl'}}]",
        timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    records = read_jsonl(tmp_path / "bikes.jsonl")
    labels = _labels(ROOT / cfg["model"]["labels"])
    assert all(d["label"] == labels[d["class_id"]] for r in records for d in r["results"]["detections"])
    ours = [
        [(np.array(d["box"][:2] + [d["box"][0] + d["box"][2], d["box"][1] + d["box"][3]]), d["class_id"])
         for d in r["results"]["detections"]]
        for r in records
    ]  # fmt: skip
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(ROOT / cfg["model"]["path"]), options, providers=["CPUExecutionProvider"])
    decode = _nanodet_reference if name == "nanodet" else _ssd_reference
    wanted = {labels.index(c) for c in cfg["model"]["classes"]}
    frames = decoded_frames(clip)
    assert len(frames) == len(records) == COUNT
    reference = [[(b, c) for b, c in decode(session, f, cfg) if c in wanted] for f in frames]
    pairs, total_ref, total_ours = _agreement(reference, ours)
    assert total_ref >= 40, f"{name}: too few reference boxes ({total_ref}) for the test to mean much"
    assert pairs >= MIN_SHARE * total_ref and pairs >= MIN_SHARE * total_ours, (name, pairs, total_ref, total_ours)
