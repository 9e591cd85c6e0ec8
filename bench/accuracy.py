"""`bench accuracy -c FILE`: each backend and precision against ONNX Runtime fp32 on the CPU.

Every variant (`bench/variants.py`; default: every one this machine has) runs the same N real frames
of a video, one frame per call, through the task's own preprocessing. Against the reference
(`onnxruntime:cpu:fp32`) it reports:

- tensors, per model output: max relative error = max|test - ref| / max|ref| (the worst element,
  relative to the output's range) and mean relative error = mean|test - ref| / mean|ref|; the table
  shows the worst output;
- faces (face_detection): a test face matches a reference face when their boxes overlap at
  IoU >= `--iou` (0.9), each face matched at most once, best overlaps first; agreement =
  matched / max(reference faces, test faces), summed over all frames (1.0 when neither finds any);
  the score difference of matched faces (mean and max);
- mattes (matting): mean absolute error of the 8-bit alpha, as a fraction of 255.

A variant below `--min-agreement` or above `--max-matte-mae` fails: the table says so and the exit
code is 1. Without `--int8-model` the INT8 model is quantised now on `--calib-frames` frames of
`--calib-video` (default: the same video, frames spread over it).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench import harness

ROOT = harness.ROOT


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    add_config_args(parser)
    parser.add_argument("--video", help="frames to compare on (default: the config's first source)")
    parser.add_argument("--frames", type=int, default=50, help="frames compared (default: %(default)s)")
    parser.add_argument(
        "--stride", type=int, default=None, help="every N-th frame (default: spread over the video)"
    )
    parser.add_argument(
        "--variants", help="backend:device:precision list (default: every variant this machine has)"
    )
    parser.add_argument(
        "--int8-model", metavar="PATH", help="INT8 model for onnxruntime:cpu:int8 (default: quantise now)"
    )
    parser.add_argument(
        "--fp16-model", metavar="PATH", help="fp16 model for onnxruntime:cpu:fp16 (default: convert now)"
    )
    parser.add_argument("--calib-video", help="video to quantise on (default: --video)")
    parser.add_argument(
        "--calib-frames", type=int, default=128, help="frames to quantise on (default: %(default)s)"
    )
    parser.add_argument(
        "--iou", type=float, default=0.9, help="IoU at which two faces match (default: %(default)s)"
    )
    parser.add_argument(
        "--min-agreement",
        type=float,
        default=0.95,
        help="face agreement a variant must reach (default: %(default)s)",
    )
    parser.add_argument(
        "--max-matte-mae",
        type=float,
        default=0.02,
        help="matte mean absolute error allowed, 0-1 (default: %(default)s)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")


# --- task-level comparison (pure functions: unit-tested on hand-made detections) ---------------------


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two [x, y, w, h] boxes."""
    ax, ay, aw, ah = (float(v) for v in a[:4])
    bx, by, bw, bh = (float(v) for v in b[:4])
    iw = min(ax + aw, bx + bw) - max(ax, bx)
    ih = min(ay + ah, by + bh) - max(ay, by)
    inter = max(0.0, iw) * max(0.0, ih)
    union = aw * ah + bw * bh - inter
    return inter / union if union > 0 else 0.0


def match_faces(
    reference: Sequence[Mapping[str, Any]], test: Sequence[Mapping[str, Any]], threshold: float = 0.9
) -> list[tuple[int, int, float]]:
    """Pairs (reference index, test index, IoU) at IoU >= threshold, each face used once, the best
    overlaps taken first (greedy: what an evaluator of detections does)."""
    candidates = [
        (iou(r["box"], t["box"]), i, j) for i, r in enumerate(reference) for j, t in enumerate(test)
    ]
    candidates = [c for c in candidates if c[0] >= threshold]
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    used_ref: set[int] = set()
    used_test: set[int] = set()
    pairs = []
    for overlap, i, j in candidates:
        if i in used_ref or j in used_test:
            continue
        used_ref.add(i)
        used_test.add(j)
        pairs.append((i, j, overlap))
    return sorted(pairs)


@dataclass
class FaceAgreement:
    """Faces of a test run against the reference, accumulated over frames."""

    threshold: float = 0.9
    matched: int = 0
    possible: int = 0
    reference_faces: int = 0
    test_faces: int = 0
    score_diffs: list[float] = field(default_factory=list)

    def add(self, reference: Sequence[Mapping[str, Any]], test: Sequence[Mapping[str, Any]]) -> None:
        pairs = match_faces(reference, test, self.threshold)
        self.matched += len(pairs)
        self.possible += max(len(reference), len(test))
        self.reference_faces += len(reference)
        self.test_faces += len(test)
        self.score_diffs += [abs(float(reference[i]["score"]) - float(test[j]["score"])) for i, j, _ in pairs]

    @property
    def agreement(self) -> float:
        """matched / max(n_ref, n_test) over all frames; 1.0 when neither side found a face."""
        return self.matched / self.possible if self.possible else 1.0

    def summary(self) -> dict[str, Any]:
        return {
            "agreement": self.agreement,
            "matched": self.matched,
            "reference_faces": self.reference_faces,
            "test_faces": self.test_faces,
            "score_diff_mean": float(np.mean(self.score_diffs)) if self.score_diffs else None,
            "score_diff_max": float(np.max(self.score_diffs)) if self.score_diffs else None,
        }


def tensor_errors(
    reference: Mapping[str, np.ndarray], test: Mapping[str, np.ndarray]
) -> dict[str, dict[str, float]]:
    """Per output: `max_rel` = max|t - r| / max|r| and `mean_rel` = mean|t - r| / mean|r|."""
    out = {}
    for name, ref in reference.items():
        r = np.asarray(ref, dtype=np.float64)
        t = np.asarray(test[name], dtype=np.float64)
        if r.shape != t.shape:
            raise ValueError(
                f"output {name!r}: shape {list(t.shape)} against the reference's {list(r.shape)}"
            )
        diff = np.abs(t - r)
        scale_max = float(np.abs(r).max()) if r.size else 0.0
        scale_mean = float(np.abs(r).mean()) if r.size else 0.0
        out[name] = {
            "max_rel": float(diff.max()) / scale_max if scale_max > 0 else float(diff.max(initial=0.0)),
            "mean_rel": float(diff.mean()) / scale_mean
            if scale_mean > 0
            else float(diff.mean() if diff.size else 0.0),
            "max_abs": float(diff.max(initial=0.0)),
        }
    return out


@dataclass
class TensorStats:
    """Per output: the worst max_rel and the mean of mean_rel over frames."""

    max_rel: dict[str, float] = field(default_factory=dict)
    mean_rel_sum: dict[str, float] = field(default_factory=dict)
    frames: int = 0

    def add(self, errors: Mapping[str, Mapping[str, float]]) -> None:
        self.frames += 1
        for name, e in errors.items():
            self.max_rel[name] = max(self.max_rel.get(name, 0.0), e["max_rel"])
            self.mean_rel_sum[name] = self.mean_rel_sum.get(name, 0.0) + e["mean_rel"]

    def summary(self) -> dict[str, Any]:
        per = {
            name: {"max_rel": self.max_rel[name], "mean_rel": self.mean_rel_sum[name] / max(1, self.frames)}
            for name in self.max_rel
        }
        worst = max(per, key=lambda n: per[n]["max_rel"]) if per else None
        return {
            "per_output": per,
            "worst_output": worst,
            "max_rel": per[worst]["max_rel"] if worst else 0.0,
            "mean_rel": max((p["mean_rel"] for p in per.values()), default=0.0),
        }


# --- the run -------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from bench import variants as vmod
    from engines.quantize import video_frames
    from pipeline.config import load_config, resolve_inputs
    from pipeline.errors import UsageError
    from app.plan import build_task

    if args.frames < 1:
        raise UsageError(f"--frames must be at least 1, got {args.frames}")
    config = resolve_inputs(load_config(args.config, args.overrides), [ROOT])
    task = build_task(config)
    video = args.video or config.sources[0].uri
    chosen = vmod.parse(args.variants) if args.variants else vmod.available()
    if vmod.REFERENCE in chosen:
        chosen.remove(vmod.REFERENCE)
    int8_model, quantised = None, None
    if any(v.uses_int8_model for v in chosen):
        int8_model, quantised = vmod.ensure_int8_model(
            config, task, args.int8_model, args.calib_video or video, args.calib_frames
        )
    fp16_model = None
    if any(v.uses_fp16_model for v in chosen):
        fp16_model = vmod.ensure_fp16_model(config, task, args.fp16_model)

    images = list(video_frames(video, args.frames, stride=args.stride))
    if not images:
        raise UsageError(f"--video: no frames in {video}")
    prepared = []
    for image in images:
        spec = task.input_spec(image.shape[1], image.shape[0])
        buffer = np.zeros(tuple(int(d) for d in spec.shape), dtype=spec.dtype)  # type: ignore[arg-type]
        meta = task.preprocess(image, buffer)
        prepared.append((image, {task.input_name: buffer}, meta))

    reference_engine = vmod.open_variant(config, vmod.REFERENCE, config.model.path, 1, video, task)
    task.check_model(reference_engine.inputs, reference_engine.outputs)
    reference = [_infer(reference_engine, task, feed) for _, feed, _ in prepared]
    reference_results = [
        task.postprocess(outputs, meta, image.shape[1], image.shape[0])
        for (image, _, meta), outputs in zip(prepared, reference)
    ]
    reference_engine.close()

    results = [
        {
            "variant": vmod.REFERENCE.label,
            "reference": True,
            "provider": "CPUExecutionProvider",
            **_task_summary(reference_results, reference_results, args.iou),
            "tensors": {"max_rel": 0.0, "mean_rel": 0.0, "worst_output": None, "per_output": {}},
            "passed": True,
        }
    ]
    for variant in chosen:
        harness.stderr(f"bench accuracy: {variant.label}")
        entry: dict[str, Any] = {"variant": variant.label, "reference": False}
        try:
            engine = vmod.open_variant(
                config, variant, vmod.model_path(config, variant, int8_model, fp16_model), 1, video, task
            )
            entry["provider"] = engine.provider
            stats = TensorStats()
            test_results = []
            for (image, feed, meta), ref_outputs in zip(prepared, reference):
                outputs = _infer(engine, task, feed)
                stats.add(tensor_errors(ref_outputs, outputs))
                test_results.append(task.postprocess(outputs, meta, image.shape[1], image.shape[0]))
            engine.close()
            entry.update(_task_summary(reference_results, test_results, args.iou))
            entry["tensors"] = stats.summary()
            entry["passed"], entry["failures"] = _verdict(entry, args.min_agreement, args.max_matte_mae)
        except Exception as exc:  # noqa: BLE001 - a variant that cannot run is reported, others go on
            entry["error"] = _first_line(exc)
            entry["passed"] = False
        results.append(entry)

    machine = harness.machine()
    report = {
        "benchmark": "accuracy",
        "machine": machine,
        "config": str(args.config),
        "model": config.model.path,
        "task": task.name,
        "int8_model": int8_model,
        "quantised_now": quantised,
        "video": video,
        "frames": len(prepared),
        "iou": args.iou,
        "min_agreement": args.min_agreement,
        "max_matte_mae": args.max_matte_mae,
        "results": results,
    }
    harness.say(render(report))
    harness.write_json(args.json, report)
    return 0 if all(r.get("passed") for r in results) else 1


def _infer(engine: Any, task: Any, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    outputs = engine.infer(feed, task.output_names)
    return {name: np.array(value, copy=True) for name, value in outputs.items()}


def _task_summary(reference: Sequence[Any], test: Sequence[Any], threshold: float) -> dict[str, Any]:
    """Face agreement and matte error, for whichever the task's results hold."""
    out: dict[str, Any] = {}
    if any("detections" in r.data for r in reference):
        faces = FaceAgreement(threshold)
        for r, t in zip(reference, test):
            faces.add(r.data.get("detections", []), t.data.get("detections", []))
        out["faces"] = faces.summary()
    if any("alpha" in r.arrays for r in reference):
        errors = [
            float(np.mean(np.abs(r.arrays["alpha"].astype(np.int16) - t.arrays["alpha"].astype(np.int16))))
            / 255.0
            for r, t in zip(reference, test)
        ]
        out["matte"] = {"mae": float(np.mean(errors)), "max_frame_mae": float(np.max(errors))}
    return out


def _verdict(entry: Mapping[str, Any], min_agreement: float, max_matte_mae: float) -> tuple[bool, list[str]]:
    failures = []
    faces = entry.get("faces")
    if faces is not None and faces["agreement"] < min_agreement:
        failures.append(f"face agreement {faces['agreement']:.3f} < {min_agreement}")
    matte = entry.get("matte")
    if matte is not None and matte["mae"] > max_matte_mae:
        failures.append(f"matte MAE {matte['mae']:.4f} > {max_matte_mae}")
    return not failures, failures


HEADERS = (
    "variant",
    "max rel err",
    "mean rel err",
    "worst output",
    "faces ref/test",
    "agreement",
    "score diff",
    "matte MAE",
    "verdict",
)


def render(report: Mapping[str, Any]) -> str:
    rows: list[list[Any]] = []
    notes: list[str] = []
    for r in report["results"]:
        if r.get("error"):
            rows.append([r["variant"], None, None, None, None, None, None, None, "ERROR"])
            notes.append(f"{r['variant']}: {r['error']}")
            continue
        faces, matte, tensors = r.get("faces"), r.get("matte"), r.get("tensors", {})
        verdict = (
            "reference"
            if r.get("reference")
            else ("ok" if r["passed"] else "FAIL: " + "; ".join(r["failures"]))
        )
        rows.append(
            [
                r["variant"],
                tensors.get("max_rel"),
                tensors.get("mean_rel"),
                tensors.get("worst_output") or "-",
                f"{faces['reference_faces']}/{faces['test_faces']}" if faces else "-",
                faces["agreement"] if faces else None,
                faces["score_diff_mean"] if faces else None,
                matte["mae"] if matte else None,
                verdict,
            ]
        )
    machine = report.get("machine", {})
    head = (
        f"bench accuracy: {report['model']} ({report['task']}) on {report['frames']} frames of {report['video']}, "
        f"against onnxruntime:cpu:fp32; faces match at IoU >= {report['iou']}; "
        f"tolerance: agreement >= {report['min_agreement']}, matte MAE <= {report['max_matte_mae']}; "
        f"{machine.get('cpu', '?')}"
    )
    return "\n".join([head, harness.table(HEADERS, rows), *notes])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else "") or type(exc).__name__
