"""`quantize`: an INT8 copy of a config's model for the CPU, calibrated on frames of a video.

    python run_pipeline.py quantize -c configs/default.yaml --video assets/videos/bikes.mp4 \\
        --frames 64 --output out/yunet-int8.onnx
    python run_pipeline.py run -c configs/default.yaml --set model.path=out/yunet-int8.onnx

Importing this module is cheap; ONNX Runtime's quantiser is loaded by the handler.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from framewire.app.commands import add_tolerance_args


def register(sub: Any, add_config_args: Callable[[argparse.ArgumentParser], None]) -> None:
    parser = sub.add_parser(
        "quantize",
        help="INT8 (ONNX Runtime static QDQ) copy of the config's model, calibrated on a video",
        description="Quantise model.path of the config to INT8 for ONNX Runtime on the CPU. "
        "Calibration frames go through the task's own preprocessing.",
    )
    add_config_args(parser)
    parser.add_argument(
        "--video",
        action="append",
        default=[],
        help="calibration video, repeatable: the frames are shared among them (default: the config's "
        "sources); pick videos like the ones the model will see",
    )
    parser.add_argument(
        "--frames", type=int, default=128, help="calibration frames in all (default: %(default)s)"
    )
    parser.add_argument(
        "--stride",
        type=int,
        default=None,
        help="take every N-th frame (default: spread the frames over the whole video)",
    )
    parser.add_argument("--output", "-o", required=True, help="the INT8 model file to write")
    parser.add_argument(
        "--per-channel",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="weights quantised per output channel (default: on)",
    )
    parser.add_argument(
        "--min-channels",
        type=int,
        default=32,
        help="keep in fp32 the convolutions with fewer input channels, and the depthwise ones that "
        "would start an int8 region; 0 quantises all (default: %(default)s, measured fastest on the CPU)",
    )
    parser.add_argument(
        "--exclude", action="append", default=[], metavar="NODE", help="keep this node in fp32 (repeatable)"
    )
    parser.add_argument(
        "--method", choices=("minmax", "entropy", "percentile"), default="minmax", help="calibration method"
    )
    parser.add_argument("--reduce-range", action="store_true", help="7-bit weights (CPUs without VNNI)")
    parser.add_argument(
        "--recipe",
        choices=("cpu", "tensorrt", "fp16"),
        default="cpu",
        help="cpu: fastest on ONNX Runtime's CPU; tensorrt: Q/DQ int8 as TensorRT takes it (symmetric, "
        "per-channel weights); fp16: half precision, no calibration (TensorRT 11 fp16). All run on the "
        "CPU, so bench accuracy can check them (default: %(default)s)",
    )
    _add_backend_args(parser)
    _add_check_args(parser)
    parser.set_defaults(handler=run)


def _add_backend_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=("onnxruntime", "openvino"),
        default="onnxruntime",
        help="openvino: NNCF's post-training int8 for OpenVINO's CPU (run it with engine.backend openvino "
        "and engine.precision int8; --recipe, --per-channel, --min-channels, --method do not apply) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--preset", choices=("performance", "mixed"), default="performance",
        help="--backend openvino: NNCF's preset (mixed: asymmetric activations) (default: %(default)s)",
    )  # fmt: skip


def _add_check_args(parser: argparse.ArgumentParser) -> None:
    check = parser.add_argument_group(
        "--auto-fp32",
        "keep in fp32 the fewest most sensitive layers that bring the INT8 model within bench accuracy's "
        "tolerance, checked with the task's own results on frames of the calibration videos",
    )
    check.add_argument(
        "--auto-fp32",
        action="store_true",
        help="measure each layer's sensitivity and keep the fewest layers fp32 that pass the check "
        "(minutes on a large model)",
    )
    check.add_argument(
        "--check-frames",
        type=int,
        default=None,
        help="frames the check runs on, spread over the calibration videos (default: as many as --frames)",
    )
    check.add_argument(
        "--sensitivity-frames", type=int, default=8, help="frames each layer's sensitivity is measured on (default: %(default)s)"
    )
    add_tolerance_args(check)
    check.add_argument(
        "--max-output-error",
        type=float,
        default=0.01,
        help="for tasks without boxes or mattes: squared output error relative to the outputs' energy "
        "(default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    from framewire.app.commands import load_job
    from framewire.app.engine_inputs import task_feeds
    from framewire.app.compose.model import build_task
    from framewire.config import SourceConfig
    from framewire.engines.quantize import (
        QuantizeOptions,
        describe_float_nodes,
        mixed_frames,
        quantize_model,
    )
    from framewire.pipeline.errors import UsageError

    if args.frames < 1:
        raise UsageError(f"--frames must be at least 1, got {args.frames}")
    for flag in ("check_frames", "sensitivity_frames"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be at least 1, got {value}")
    if args.auto_fp32 and args.recipe == "fp16":
        raise UsageError("--auto-fp32 applies to INT8 recipes (cpu, tensorrt), not fp16")
    config = load_job(args)
    task = build_task(config)
    if args.recipe == "fp16":
        from framewire.engines.fp16 import convert_model_file

        kept = convert_model_file(config.model.path, args.output, task.dynamic_axes())
        print(f"{args.output}: fp16 of {config.model.path}, inputs and outputs fp32, {kept} node(s) kept fp32", file=sys.stderr)
        print(f"use it with: --set model.path={args.output}", file=sys.stderr)
        return 0
    videos = list(args.video) or [s.uri for s in config.sources if isinstance(s, SourceConfig)]
    _check_videos(args.video, config)
    if args.backend == "openvino":
        return _openvino(args, task, config.model.path, videos)
    options = QuantizeOptions(
        per_channel=args.per_channel,
        min_channels=args.min_channels,
        exclude=tuple(args.exclude),
        method=args.method,
        reduce_range=args.reduce_range,
        recipe=args.recipe,
    )
    feeds = task_feeds(task, mixed_frames(videos, args.frames, stride=args.stride))
    report = quantize_model(
        config.model.path, args.output, feeds, dynamic_axes=task.dynamic_axes(), options=options
    )
    print(
        f"{report.output}: INT8 (QDQ, {'s8s8 symmetric for TensorRT' if args.recipe == 'tensorrt' else 'u8 activations, s8 weights'}{', per channel' if args.per_channel else ''}) "
        f"of {config.model.path}, calibrated on {report.frames} frame(s) of {', '.join(videos)} in {report.seconds:.1f} s; "
        f"{report.quantized_nodes} tensors quantised; kept in fp32: {describe_float_nodes(report.float_nodes)}",
        file=sys.stderr,
    )
    if args.auto_fp32:
        _auto_fp32(args, task, config.model.path, videos)
    print(f"use it with: --set model.path={report.output}", file=sys.stderr)
    return 0


def _openvino(args: argparse.Namespace, task: Any, model_path: str, videos: list[str]) -> int:
    """NNCF's int8 for OpenVINO, on the same frames as the ONNX Runtime recipe."""
    from framewire.app.engine_inputs import task_feeds
    from framewire.engines.openvino_quantize import quantize_for_openvino
    from framewire.engines.quantize import mixed_frames
    from framewire.pipeline.errors import UsageError

    if args.auto_fp32:
        raise UsageError(
            "--auto-fp32 applies to the onnxruntime recipes; check the result with bench accuracy"
        )
    feeds = task_feeds(task, mixed_frames(videos, args.frames, stride=args.stride))
    report = quantize_for_openvino(
        model_path, args.output, feeds, dynamic_axes=task.dynamic_axes(), preset=args.preset
    )
    print(
        f"{report.output}: INT8 (OpenVINO IR by NNCF, preset {args.preset}) of {model_path}, calibrated on "
        f"{report.frames} frame(s) of {', '.join(videos)} in {report.seconds:.1f} s; "
        f"{report.quantized_nodes} FakeQuantize nodes",
        file=sys.stderr,
    )
    print(
        "use it with: --set engine.backend=openvino --set engine.precision=int8 "
        f"--set model.path={report.output}",
        file=sys.stderr,
    )
    return 0


def _check_videos(given: list[str], config: Any) -> None:
    """Each calibration video opens as a video, before ONNX Runtime's quantiser (which would hide why
    behind "no calibration frames reached the model")."""
    from framewire.app.io_check import check_video
    from framewire.config import SourceConfig

    for video in given:
        check_video(video, "--video")
    if not given:
        for i, source in enumerate(config.sources):
            if isinstance(source, SourceConfig):  # a plug-in's source has no file to read
                check_video(source.uri, f"sources.{i}.uri (the calibration video without --video)", source.id)


def _auto_fp32(args: argparse.Namespace, task: Any, model_path: str, videos: list[str]) -> None:
    """Replace the INT8 model just written by the one with its most sensitive layers in fp32."""
    from pathlib import Path

    import onnx

    from framewire.app.accuracy import Tolerance
    from framewire.app.mixed_precision import choose_float_layers, describe
    from framewire.engines.quantize import labelled_frames, prepare_float_model, save_with_info

    def say(text: str) -> None:
        print(f"auto fp32: {text}", file=sys.stderr)

    images = list(labelled_frames(videos, args.check_frames or args.frames, stride=args.stride))
    try:
        found = choose_float_layers(
            task,
            onnx.load(args.output),
            prepare_float_model(model_path, task.dynamic_axes()),
            images,
            tolerance=Tolerance(args.iou, args.min_agreement, args.max_matte_mae),
            max_output_error=args.max_output_error,
            sensitivity_frames=args.sensitivity_frames,
            progress=say,
        )
    except BaseException:
        # The command failed: no model it did not check is left where it was asked for.
        Path(args.output).unlink(missing_ok=True)
        raise
    save_with_info(found.model, args.output, found.info())
    kept = ", ".join(found.kept) or "none"
    print(
        f"{args.output}: {len(found.kept)} of {found.layers} weighted layers kept in fp32 ({kept}); "
        f"on {len(images)} check frame(s): {describe(found.after)} (all int8: {describe(found.before)})",
        file=sys.stderr,
    )
