"""`bench models`: each real model, run from its config, against its own package's pipeline.

- YOLOX (configs/yolox.yaml) against `ddddocr`'s detection, on bikes.mp4;
- an Ultralytics YOLOv8 (nudenet's model, from the installed package) against `nudenet`'s detector,
  on bigbuckbunny.mp4 and carphone_pristine.mp4;
- the PaddleOCR cascade (configs/ocr.yaml) against `rapidocr-onnxruntime`, on signs.mp4;
- tracking (configs/tracking.yaml without interval, and a synthetic crowd of 25 crossing objects
  with jitter, misses and low scores) against supervision's ByteTrack run on the same boxes:
  identity switches against the truth, and how often the two trackers give the same ids.

Boxes agree at IoU >= 0.9, one to one; the share is of the reference's boxes (and of ours). The
references are installed on first use into .venv/reference (bench.references).
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import yaml

from bench import references as R
from bench.chain import ChainRun, frames_of, load, run_chain
from bench.harness import ROOT, machine, table, write_json

VIDEOS = ROOT / "assets" / "videos"
CONFIGS = ROOT / "configs"


def add_arguments(parser: argparse.ArgumentParser, add_config_args: Callable[..., None]) -> None:
    parser.add_argument("--frames", type=int, default=None, help="frames of each clip (default: all)")
    parser.add_argument(
        "--ocr-frames", type=int, default=30, help="frames of signs.mp4 for OCR (default: %(default)s)"
    )
    parser.add_argument(
        "--min-iou", type=float, default=0.9, help="IoU at which two boxes agree (default: %(default)s)"
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")


def _boxes(run: ChainRun) -> list[np.ndarray]:
    from framewire.components import boxes

    return [boxes(r.get("detections", [])) for r in run.records]


def _agreement(reference: Sequence[np.ndarray], ours: Sequence[np.ndarray], min_iou: float) -> dict[str, Any]:
    matched = sum(len(R.matched(r, o, min_iou)) for r, o in zip(reference, ours, strict=True))
    total, found = sum(len(r) for r in reference), sum(len(o) for o in ours)
    return {
        "frames": len(reference), "reference_boxes": total, "our_boxes": found, "matched": matched,
        "share_of_reference": round(matched / total, 4) if total else 1.0,
        "share_of_ours": round(matched / found, 4) if found else 1.0,
    }  # fmt: skip


def yolox(frames: int | None, min_iou: float) -> dict[str, Any]:
    images = frames_of(str(VIDEOS / "bikes.mp4"), frames)
    run = run_chain(load(str(CONFIGS / "yolox.yaml")), images)
    return _agreement(R.ddddocr_boxes(images), _boxes(run), min_iou)


def yolov8(frames: int | None, min_iou: float) -> dict[str, Any]:
    raw = yaml.safe_load((CONFIGS / "yolox.yaml").read_text())
    raw["model"] = {"path": str(R.nudenet_model()), "task": "detection", "pad": "top_left", "pad_value": 0,
                    "channels": "bgr", "nms": "agnostic"}  # fmt: skip
    from framewire import validate_config

    config = validate_config(raw, "nudenet")
    out: dict[str, Any] = {}
    for video in ("bigbuckbunny.mp4", "carphone_pristine.mp4"):
        images = frames_of(str(VIDEOS / video), frames)
        run = run_chain(config, images)
        reference = R.nudenet_detections(images)
        out[video] = _agreement([b for b, _ in reference], _boxes(run), min_iou)
        labels = [sorted(d["label"] for d in r.get("detections", [])) for r in run.records]
        out[video]["same_labels_frames"] = sum(
            a == sorted(names) for a, (_, names) in zip(labels, reference, strict=True)
        )
    return out


def ocr(frames: int, min_iou: float) -> dict[str, Any]:
    images = frames_of(str(VIDEOS / "signs.mp4"), frames)
    run = run_chain(load(str(CONFIGS / "ocr.yaml")), images)
    reference = R.rapidocr_lines(images)
    out = _agreement(
        [np.array([b for b, _ in lines]).reshape(-1, 4) for lines in reference], _boxes(run), min_iou
    )
    same = 0
    for lines, record, ours in zip(reference, run.records, _boxes(run), strict=True):
        found = record.get("detections", [])
        for i, j, _ in R.matched(np.array([b for b, _ in lines]).reshape(-1, 4), ours, min_iou):
            same += found[j].get("attributes", {}).get("text", {}).get("text") == lines[i][1]
    out["same_strings"] = same
    out["string_share"] = round(same / out["reference_boxes"], 4) if out["reference_boxes"] else 1.0
    return out


def run(args: argparse.Namespace) -> int:
    report: dict[str, Any] = {"machine": machine(), "min_iou": args.min_iou}
    report["yolox_vs_ddddocr"] = yolox(args.frames, args.min_iou)
    report["yolov8_vs_nudenet"] = yolov8(args.frames, args.min_iou)
    report["ocr_vs_rapidocr"] = ocr(args.ocr_frames, args.min_iou)
    report["tracking_vs_supervision"] = track_ids(100 if args.frames is None else args.frames)
    write_json(args.json, report)
    rows = [["yolox vs ddddocr (bikes)", *_row(report["yolox_vs_ddddocr"])]]
    rows += [[f"yolov8 vs nudenet ({v})", *_row(s)] for v, s in report["yolov8_vs_nudenet"].items()]
    o = report["ocr_vs_rapidocr"]
    rows.append(["ocr vs rapidocr (signs)", *_row(o)])
    print(
        table(
            ["model", "frames", "reference boxes", "ours", "matched", "share of reference", "share of ours"],
            rows,
        )
    )
    print(f"OCR strings equal: {o['same_strings']} of {o['reference_boxes']} lines ({o['string_share']})")
    print(table(
        ["tracking", "frames", "objects", "id switches (framewire)", "id switches (supervision)", "same ids", "tracked boxes"],
        [[name, t["frames"], t["objects"], t["id_switches"], t["reference_id_switches"], t["agreement"], t["tracked_boxes"]]
         for name, t in report["tracking_vs_supervision"].items()],
    ))  # fmt: skip
    return 0


def _row(stats: dict[str, Any]) -> list[Any]:
    return [stats["frames"], stats["reference_boxes"], stats["our_boxes"], stats["matched"],
            stats["share_of_reference"], stats["share_of_ours"]]  # fmt: skip


def track_ids(frames: int) -> dict[str, Any]:
    """Tracks on signs.mp4 (interval 0) and on a synthetic crowd, against the truth and against
    supervision's ByteTrack on the same boxes."""
    images = frames_of(str(VIDEOS / "signs.mp4"), frames)
    run = run_chain(load(str(CONFIGS / "tracking.yaml"), ["tracking.interval=0", "secondary=[]"]), images)
    detector = [
        (b, np.array([d["score"] for d in r["detections"]]))
        for b, r in zip(_boxes(run), run.records, strict=True)
    ]
    ours = [{i: d["track_id"] for i, d in enumerate(r["detections"]) if "track_id" in d} for r in run.records]
    out = {"signs": compare_trackers(detector, ours, _signs_truth(frames))}
    for seed in (3, 4, 5):
        boxes, truth = crowd(seed)
        out[f"crowd_seed{seed}"] = compare_trackers(boxes, our_tracks(boxes), truth)
    return out


def our_tracks(per_frame: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[dict[int, int]]:
    """framewire's ByteTrack (the tracking stage's tracker) on given boxes: {detection: track id}."""
    from framewire.components import ByteTracker

    tracker = ByteTracker()
    return [tracker.update(seq, boxes, scores) for seq, (boxes, scores) in enumerate(per_frame)]


def compare_trackers(
    per_frame: Sequence[tuple[np.ndarray, np.ndarray]],
    ours: Sequence[dict[int, int]],
    truth: Sequence[dict[str, np.ndarray]],
) -> dict[str, Any]:
    """Identity switches against the truth, ours and supervision's on the same boxes, and the share
    of boxes both track whose id maps onto the other's (one id of ours, one of theirs)."""
    theirs = R.supervision_tracks(per_frame, track_activation_threshold=0.5)
    listed = [
        [[(b[i], t) for i, t in ids.items()] for (b, _), ids in zip(per_frame, side, strict=True)]
        for side in (ours, theirs)
    ]
    pairs = collections.Counter((a[i], b[i]) for a, b in zip(ours, theirs, strict=True) for i in a if i in b)
    best: dict[int, int] = {}
    for (mine, _), count in pairs.items():
        best[mine] = max(best.get(mine, 0), count)
    both = sum(pairs.values())
    return {
        "frames": len(per_frame), "objects": len({k for frame in truth for k in frame}),
        "id_switches": R.id_switches(truth, listed[0]), "reference_id_switches": R.id_switches(truth, listed[1]),
        "agreement": round(sum(best.values()) / both, 4) if both else 1.0, "tracked_boxes": both,
        "only_ours": sum(len(set(a) - set(b)) for a, b in zip(ours, theirs, strict=True)),
        "only_reference": sum(len(set(b) - set(a)) for a, b in zip(ours, theirs, strict=True)),
    }  # fmt: skip


def crowd(
    seed: int, objects: int = 25, frames: int = 300
) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[dict[str, np.ndarray]]]:
    """A hard synthetic scene: objects crossing at constant speeds, boxes jittered by 4 px, one in
    four missed each frame, a third of them with low scores. Per frame, the boxes with their scores,
    and the truth of each box (its object's name and box)."""
    rng = np.random.default_rng(seed)
    start = rng.uniform(50, 500, (objects, 2))
    velocity = rng.uniform(-4, 4, (objects, 2))
    size = rng.uniform(30, 80, (objects, 2))
    per_frame, truth = [], []
    for frame in range(frames):
        found, scores, named = [], [], {}
        for k in range(objects):
            if rng.random() < 0.25:
                continue
            centre = start[k] + velocity[k] * frame + rng.normal(0, 4, 2)
            half = size[k] * (1 + rng.normal(0, 0.03, 2)) / 2
            box = np.r_[centre - half, centre + half]
            found.append(box)
            scores.append(rng.uniform(0.3, 0.95) if rng.random() < 0.3 else rng.uniform(0.7, 0.95))
            named[f"object{k}"] = box
        per_frame.append((np.array(found).reshape(-1, 4), np.array(scores)))
        truth.append(named)
    return per_frame, truth


def _signs_truth(frames: int) -> list[dict[str, np.ndarray]]:
    """Where each word of signs.mp4 is (the clip is drawn by bench.text_clip)."""
    from bench.text_clip import text_frames

    _, truth = text_frames(frames)
    return [{k: np.array(v, dtype=np.float64) for k, v in frame.items()} for frame in truth]
