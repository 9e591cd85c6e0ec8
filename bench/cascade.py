"""`bench cascade`: what batching a cascade's crops and `tracking.interval` save.

1. Crops batched against one call per object: each secondary model of the OCR cascade
   (configs/ocr.yaml: the recogniser, the orientation classifier) alone, on the primary's text boxes
   of the same frames, with `max_batch: 0` (all of a frame's crops in one inference) and
   `max_batch: 1`: time in the secondary stage per frame (engines opened before; median of
   `--repeats` alternated runs), inferences, and the share of objects given the same answer.
2. `interval` against none: configs/tracking.yaml with interval 0 and N, the detector's frames and
   time, the whole chain's time per frame, and how near the boxes the tracker carries over skipped
   frames are to the detector's own on those frames (mean IoU, boxes matched one to one).

Every stage runs in this process, as one fused infer worker (bench.chain); engine threads as the
config says.
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.chain import frames_of, load, run_chain
from bench.harness import ROOT, machine, stderr, table, wait_for_quiet, write_json


def add_arguments(parser: argparse.ArgumentParser, add_config_args: Callable[..., None]) -> None:
    parser.add_argument("--ocr", default=str(ROOT / "configs" / "ocr.yaml"), help="the cascade's config")
    parser.add_argument(
        "--tracking", default=str(ROOT / "configs" / "tracking.yaml"), help="the tracking config"
    )
    parser.add_argument(
        "--frames", type=int, default=30, help="frames of each config's source (default: %(default)s)"
    )
    parser.add_argument(
        "--interval", type=int, default=2, help="the interval to compare with none (default: %(default)s)"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="alternated runs of each batching mode (default: %(default)s)"
    )
    parser.add_argument(
        "--max-load", type=float, default=None, help="first wait for a load average below this"
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], help="key.path=value for both configs"
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")


def _answers(records: list[dict[str, Any]], name: str) -> list[Any]:
    """Each object's answer from secondary `name`: its text or its label."""
    out = []
    for record in records:
        for found in record.get("detections", []):
            value = found.get("attributes", {}).get(name) or {}
            out.append(value.get("text", value.get("label")))
    return out


def _secondary_pass(
    config: Any, images: list[np.ndarray], primary: list[dict[str, Any]]
) -> tuple[float, int, list[dict[str, Any]]]:
    """The config's secondary stage alone over the frames, given the primary's detections: seconds
    in `process` (the engine opened before), inferences, and the records."""
    from bench.chain import SOURCE, _MemoryPool
    from framewire.components import Frame, StageContext, secondary_stage_from_config

    height, width = images[0].shape[:2]
    pool = _MemoryPool({"image": ((height, width, 3), "uint8")})
    stage = secondary_stage_from_config(config)
    stage.start(StageContext("secondary", 0))
    records, spent = [], 0.0
    try:
        for seq, image in enumerate(images):
            np.copyto(pool.regions["image"], image)
            frame = Frame(SOURCE, seq, seq, 0.0, width, height, slot=0, pool=pool)  # type: ignore[arg-type]
            frame.result = copy.deepcopy(primary[seq])
            started = time.perf_counter()
            list(stage.process(frame))
            spent += time.perf_counter() - started
            records.append(frame.result)
        return spent, stage.inferences, records
    finally:
        stage.stop()


def batching(path: str, frames: int, overrides: list[str], repeats: int) -> dict[str, Any]:
    """Each secondary model of the config alone, its crops batched per frame and one call each,
    on the primary's detections of the same frames; `repeats` alternated runs, medians."""
    base = load(path, overrides)
    images = frames_of(base.sources[0].uri, frames)
    primary = run_chain(base.model_copy(update={"secondary": ()}), images).records
    out: dict[str, Any] = {}
    for item in base.secondary:
        times: dict[str, list[float]] = {"batched": [], "per_object": []}
        stats: dict[str, Any] = {}
        answers: dict[str, list[Any]] = {}
        for _ in range(repeats):
            for mode, batch in (("batched", 0), ("per_object", 1)):
                config = base.model_copy(
                    update={"secondary": (item.model_copy(update={"max_batch": batch}),)}
                )
                spent, inferences, records = _secondary_pass(config, images, primary)
                times[mode].append(1000 * spent / len(images))
                answers[mode] = _answers(records, item.name)
                stats[mode] = {"inferences": inferences, "crops": sum(a is not None for a in answers[mode])}
        for mode in times:
            stats[mode]["ms_per_frame"] = round(float(np.median(times[mode])), 2)
            stats[mode]["ms_per_frame_runs"] = [round(t, 2) for t in times[mode]]
        pairs = list(zip(answers["batched"], answers["per_object"], strict=True))
        stats["same_answers"] = round(sum(a == b for a, b in pairs) / max(len(pairs), 1), 4)
        stats["speedup"] = round(
            float(np.median([p / b for p, b in zip(times["per_object"], times["batched"], strict=True)])), 2
        )
        out[item.name] = stats
    return out


def interval(path: str, frames: int, every: int, overrides: list[str]) -> dict[str, Any]:
    from bench.references import matched
    from framewire.components import boxes

    base = [*overrides, "secondary=[]"]
    images = frames_of(load(path, base).sources[0].uri, frames)
    runs = {n: run_chain(load(path, [*base, f"tracking.interval={n}"]), images) for n in (0, every)}
    overlaps: list[float] = []
    for seq, (plain, skipping) in enumerate(zip(runs[0].records, runs[every].records, strict=True)):
        if seq % (every + 1):
            pairs = matched(boxes(plain.get("detections", [])), boxes(skipping.get("detections", [])), 0.0)
            overlaps += [iou for _, _, iou in pairs]
    out: dict[str, Any] = {}
    for n, run in runs.items():
        detector_s = sum(run.seconds.get(s, 0.0) for s in ("preprocess", "infer", "postprocess"))
        out[f"interval_{n}"] = {
            "detector_frames": run.detector_frames,
            "detector_ms_per_frame": round(1000 * detector_s / len(images), 2),
            "chain_ms_per_frame": round(1000 * run.wall_s / len(images), 2),
        }
    a, b = out["interval_0"], out[f"interval_{every}"]
    out["detector_work_cut"] = round(a["detector_frames"] / max(b["detector_frames"], 1), 2)
    out["detector_time_cut"] = round(a["detector_ms_per_frame"] / max(b["detector_ms_per_frame"], 1e-9), 2)
    out["skipped_frames_mean_iou"] = round(float(np.mean(overlaps)), 4) if overlaps else None
    out["skipped_frames_boxes"] = len(overlaps)
    return out


def run(args: argparse.Namespace) -> int:
    if args.max_load is not None:
        wait_for_quiet(args.max_load, 120.0, stderr)
    report = {
        "machine": machine(),
        "frames": args.frames,
        "batching": batching(args.ocr, args.frames, args.overrides, args.repeats),
        "interval": interval(args.tracking, args.frames, args.interval, args.overrides),
    }
    write_json(args.json, report)
    b, i = report["batching"], report["interval"]
    rows = [[f"{name}: {mode}", s[mode]["ms_per_frame"], s[mode]["inferences"], s[mode]["crops"],
             s["speedup"] if mode == "batched" else "", s["same_answers"] if mode == "batched" else ""]
            for name, s in b.items() for mode in ("batched", "per_object")]  # fmt: skip
    print(table(["secondary", "ms/frame", "inferences", "crops", "speed-up", "same answers"], rows))
    keys = [k for k in i if k.startswith("interval_")]
    print(table(
        ["tracking", "detector frames", "detector ms/frame", "chain ms/frame"],
        [[k, i[k]["detector_frames"], i[k]["detector_ms_per_frame"], i[k]["chain_ms_per_frame"]] for k in keys],
    ))  # fmt: skip
    print(
        f"detector work cut {i['detector_work_cut']}x (time {i['detector_time_cut']}x); boxes of skipped frames "
        f"against the detector's own: mean IoU {i['skipped_frames_mean_iou']} over {i['skipped_frames_boxes']} boxes"
    )
    return 0
