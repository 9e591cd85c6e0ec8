"""`bench models`: each real model, run from its config, against its own package's pipeline.

- YOLOX (configs/yolox.yaml) against `ddddocr`'s detection, on bikes.mp4;
- an Ultralytics YOLOv8 (nudenet's model, from the installed package) against `nudenet`'s detector,
  on bigbuckbunny.mp4 and carphone_pristine.mp4;
- the PaddleOCR cascade (configs/ocr.yaml) against `rapidocr-onnxruntime`, on signs.mp4;
- tracking (configs/tracking.yaml without interval) against supervision's ByteTrack run on the
  same boxes: identity switches against the clip's truth, and how often the two trackers agree.

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
    parser.add_argument("--ocr-frames", type=int, default=30, help="frames of signs.mp4 for OCR (default: %(default)s)")
    parser.add_argument("--min-iou", type=float, default=0.9, help="IoU at which two boxes agree (default: %(default)s)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")


def _boxes(run: ChainRun) -> list[np.ndarray]:
    from stages.detections import boxes

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
    from pipeline.config import validate_config

    config = validate_config(raw, "nudenet")
    out: dict[str, Any] = {}
    for video in ("bigbuckbunny.mp4", "carphone_pristine.mp4"):
        images = frames_of(str(VIDEOS / video), frames)
        run = run_chain(config, images)
        reference = R.nudenet_detections(images)
        out[video] = _agreement([b for b, _ in reference], _boxes(run), min_iou)
        labels = [sorted(d["label"] for d in r.get("detections", [])) for r in run.records]
        out[video]["same_labels_frames"] = sum(a == sorted(names) for a, (_, names) in zip(labels, reference, strict=True))
    return out


def ocr(frames: int, min_iou: float) -> dict[str, Any]:
    images = frames_of(str(VIDEOS / "signs.mp4"), frames)
    run = run_chain(load(str(CONFIGS / "ocr.yaml")), images)
    reference = R.rapidocr_lines(images)
    out = _agreement([np.array([b for b, _ in lines]).reshape(-1, 4) for lines in reference], _boxes(run), min_iou)
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
    print(table(["model", "frames", "reference boxes", "ours", "matched", "share of reference", "share of ours"], rows))
    print(f"OCR strings equal: {o['same_strings']} of {o['reference_boxes']} lines ({o['string_share']})")
    t = report["tracking_vs_supervision"]
    print(
        f"tracking ({t['frames']} frames, {t['objects']} objects): identity switches framewire {t['id_switches']}, "
        f"supervision {t['reference_id_switches']}; same id mapping for {t['agreement']} of the tracked boxes"
    )
    return 0


def _row(stats: dict[str, Any]) -> list[Any]:
    return [stats["frames"], stats["reference_boxes"], stats["our_boxes"], stats["matched"],
            stats["share_of_reference"], stats["share_of_ours"]]  # fmt: skip


def track_ids(frames: int) -> dict[str, Any]:
    """Tracks on signs.mp4 (interval 0): switches against the truth, ours and the reference's, and
    the share of boxes whose id maps one to one onto the reference's id."""
    truth = _signs_truth(frames)
    images = frames_of(str(VIDEOS / "signs.mp4"), frames)
    run = run_chain(load(str(CONFIGS / "tracking.yaml"), ["tracking.interval=0", "secondary=[]"]), images)
    ours = [[(b, d["track_id"]) for b, d in zip(boxes, r["detections"], strict=True) if "track_id" in d]
            for boxes, r in zip(_boxes(run), run.records, strict=True)]  # fmt: skip
    detector = [(b, np.array([d["score"] for d in r["detections"]])) for b, r in zip(_boxes(run), run.records, strict=True)]
    per_frame = R.supervision_tracks(detector, track_activation_threshold=0.5)
    theirs = [[(b[i], t) for i, t in ids.items()] for (b, _), ids in zip(detector, per_frame, strict=True)]
    pairs = collections.Counter(
        (d["track_id"], ids[i]) for r, ids in zip(run.records, per_frame, strict=True)
        for i, d in enumerate(r["detections"]) if "track_id" in d and i in ids
    )  # fmt: skip
    best: dict[int, int] = {}
    for (mine, _), count in pairs.items():
        best[mine] = max(best.get(mine, 0), count)
    both = sum(pairs.values())
    return {
        "frames": frames, "objects": len(truth[0]),
        "id_switches": R.id_switches(truth, ours), "reference_id_switches": R.id_switches(truth, theirs),
        "agreement": round(sum(best.values()) / both, 4) if both else 1.0, "tracked_boxes": both,
    }  # fmt: skip


def _signs_truth(frames: int) -> list[dict[str, np.ndarray]]:
    """Where each word of signs.mp4 is (the clip is drawn by bench.text_clip)."""
    from bench.text_clip import text_frames

    _, truth = text_frames(frames)
    return [{k: np.array(v, dtype=np.float64) for k, v in frame.items()} for frame in truth]
