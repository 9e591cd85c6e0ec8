"""`bench accuracy -c FILE`: each backend and precision against ONNX Runtime fp32 on the CPU.

Every variant (`bench/variants.py`; default: every one this machine has) runs the same N real frames
of a video, one frame per call, through the task's own preprocessing. Against the reference
(`onnxruntime:cpu:fp32`) it reports:

- tensors, per model output (app/accuracy.py has the definitions): max relative error (the worst element,
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
from typing import Any

import numpy as np

from framewire.components import Tolerance, TensorStats, task_summary, tensor_errors, verdict
# CLI glue (docs/benchmarks.md, tests/unit/bench/test_public_api.py): `bench accuracy` takes the same
# tolerance flags as `framewire accuracy`.
from framewire.app.commands import add_tolerance_args
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
    add_tolerance_args(parser)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    parser.add_argument(
        "--record-gate",
        action="store_true",
        help="write the OpenVINO variants' verdicts into the accuracy gate (engines/openvino_gate.json): "
        "precision auto then never runs one this model failed",
    )


# --- the run -------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from bench import variants as vmod
    from framewire import UsageError, load_config
    from framewire.components import resolve_inputs, task_from_config, task_inputs, video_frames

    if args.frames < 1:
        raise UsageError(f"--frames must be at least 1, got {args.frames}")
    config = resolve_inputs(load_config(args.config, args.overrides), [ROOT])
    task = task_from_config(config)
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
    prepared = [(image, *task_inputs(task, image)) for image in images]

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
            **task_summary(reference_results, reference_results, args.iou),
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
            entry.update(task_summary(reference_results, test_results, args.iou))
            entry["tensors"] = stats.summary()
            entry["passed"], entry["failures"] = verdict(entry, Tolerance(args.iou, args.min_agreement, args.max_matte_mae))
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
    if args.record_gate:
        from framewire.components import GATE, record_gate

        written = record_gate(results, config.model.path, video, len(prepared), str(machine.get("cpu", "?")))
        harness.stderr(f"bench accuracy: {written} OpenVINO verdict(s) recorded in {GATE.resolve()}")
    return 0 if all(r.get("passed") for r in results) else 1


def _infer(engine: Any, task: Any, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    outputs = engine.infer(feed, task.output_names)
    return {name: np.array(value, copy=True) for name, value in outputs.items()}


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
