"""`quantize --auto-fp32`: an INT8 model held to `bench accuracy`'s tolerance by keeping its most
sensitive layers in fp32 (`framewire.engines.mixed_precision` says how they are found).

The check is the task's own: the mixed model's frames go through the task's postprocessing and are
compared with the fp32 model's as `bench accuracy` compares them (`framewire.app.accuracy`): box agreement for
detections, mean absolute error for mattes. A task whose results hold neither is held to
`max_output_error` on its raw outputs (squared error relative to the outputs' energy).

The check must pass on each video's frames, as `bench accuracy` runs on each clip: pooled over
three clips, YuNet's all-int8 model reached agreement 0.956 while two of the clips alone were at
0.90 and 0.91 (docs/gpu.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from framewire.app.accuracy import Tolerance, task_summary, verdict
from framewire.app.engine_inputs import task_inputs
from framewire.engines import mixed_precision as mp
from framewire.pipeline.errors import EngineError
from framewire.stages.tasks.base import Result, Task

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckFrame:
    """A frame as the task preprocesses it: the model feed, what postprocessing needs, and the
    video it came from (the check passes per video)."""

    width: int
    height: int
    feed: dict[str, np.ndarray]
    meta: Mapping[str, Any]
    video: str = ""


def check_frames(task: Task, images: Sequence[tuple[str, np.ndarray]]) -> list[CheckFrame]:
    """(video, BGR frame) pairs through the task's own preprocessing."""
    frames = []
    for video, image in images:
        feed, meta = task_inputs(task, image)
        frames.append(CheckFrame(image.shape[1], image.shape[0], feed, meta, video))
    return frames


@dataclass
class Judge:
    """The fp32 model's results on the check frames, and the test a mixed model must pass."""

    task: Task
    frames: list[CheckFrame]
    reference_outputs: list[dict[str, np.ndarray]]
    tolerance: Tolerance
    max_output_error: float
    threads: int = 0
    reference: list[Result] = field(init=False)

    def __post_init__(self) -> None:
        self.reference = self._results(self.reference_outputs)

    def _results(self, outputs: Sequence[Mapping[str, np.ndarray]]) -> list[Result]:
        return [
            self.task.postprocess(out, frame.meta, frame.width, frame.height)
            for out, frame in zip(outputs, self.frames)
        ]

    def measure(self, model: onnx.ModelProto) -> tuple[bool, dict[str, Any]]:
        """Whether `model` passes on every video's frames, and the summary that says so: faces,
        matte and output_error over all frames, `videos` per video, `failures` naming the video."""
        outputs = mp.run_model(model, [frame.feed for frame in self.frames], self.threads)
        results = self._results(outputs)
        summary = self._summary(range(len(self.frames)), outputs, results)
        summary["videos"], summary["failures"] = {}, []
        videos = list(dict.fromkeys(frame.video for frame in self.frames))
        for video in videos:
            rows = [i for i, frame in enumerate(self.frames) if frame.video == video]
            part = summary if len(videos) == 1 else self._summary(rows, outputs, results)
            _, failures = self._verdict(part)
            summary["videos"][video] = short(part)
            summary["failures"] += [f"{video}: {failure}" if len(videos) > 1 else failure for failure in failures]
        return not summary["failures"], summary

    def _summary(
        self, rows: Iterable[int], outputs: Sequence[Mapping[str, np.ndarray]], results: Sequence[Result]
    ) -> dict[str, Any]:
        rows = list(rows)
        summary = task_summary([self.reference[i] for i in rows], [results[i] for i in rows], self.tolerance.iou)
        summary["output_error"] = mp.output_error(
            [self.reference_outputs[i] for i in rows], [outputs[i] for i in rows]
        )
        return summary

    def _verdict(self, summary: Mapping[str, Any]) -> tuple[bool, list[str]]:
        if "faces" in summary or "matte" in summary:
            return verdict(summary, self.tolerance)
        if summary["output_error"] <= self.max_output_error:
            return True, []
        return False, [f"output error {summary['output_error']:.4g} > {self.max_output_error}"]


@dataclass
class AutoFloat:
    """What `choose_float_layers` found."""

    model: onnx.ModelProto
    kept: list[str]
    layers: int
    before: dict[str, Any]
    after: dict[str, Any]
    trials: list[tuple[int, bool]]
    sensitivity: dict[str, float]

    def info(self) -> dict[str, Any]:
        """For the model's `framewire.quantization` metadata."""
        return {
            "auto_fp32": {
                "kept": self.kept,
                "layers": self.layers,
                "int8_only": short(self.before),
                "result": short(self.after),
                "trials": [list(t) for t in self.trials],
            }
        }


def choose_float_layers(
    task: Task,
    qdq: onnx.ModelProto,
    float_model: onnx.ModelProto,
    images: Sequence[tuple[str, np.ndarray]],
    *,
    tolerance: Tolerance,
    max_output_error: float = 0.01,
    sensitivity_frames: int = 8,
    threads: int = 0,
    progress: Callable[[str], None] | None = None,
) -> AutoFloat:
    """The Q/DQ model with the fewest of its most sensitive layers in fp32 that passes the check on
    each video's frames of `images`, (video, frame) pairs; the sensitivity is measured on
    `sensitivity_frames` of them, spread. EngineError when no frame is given, or when even every
    weighted layer in fp32 fails (other operators quantised: the `cpu` recipe)."""
    say = progress or (lambda _text: None)
    frames = check_frames(task, images)
    if not frames:
        raise EngineError("auto fp32: no check frames")
    reference = mp.run_model(float_model, [frame.feed for frame in frames], threads)
    judge = Judge(task, frames, reference, tolerance, max_output_error, threads)
    passed, before = judge.measure(qdq)
    say(f"all int8: {describe(before)}")
    layers = mp.quantised_layers(qdq)
    if passed:
        return AutoFloat(qdq, [], len(layers), before, before, [(0, True)], {})
    step = max(1, len(frames) // max(1, sensitivity_frames))
    sample = [frame.feed for frame in frames[::step][:sensitivity_frames]]
    say(f"sensitivity of {len(layers)} layers on {len(sample)} frame(s)")
    scores = mp.sensitivity(qdq, float_model, sample, threads=threads)
    order = sorted(layers, key=lambda name: -scores[name])
    search = mp.fewest_float(order, lambda names: judge.measure(mp.keep_float(qdq, float_model, names))[0])
    if search.kept is None:
        raise EngineError(
            f"auto fp32: even with all {len(layers)} weighted layers in fp32 the model fails the check "
            "(other operators are quantised: use --recipe tensorrt)"
        )
    model = mp.keep_float(qdq, float_model, search.kept)
    _, after = judge.measure(model)
    say(f"{len(search.kept)} of {len(layers)} layers in fp32 after {len(search.trials)} checks: {describe(after)}")
    return AutoFloat(model, search.kept, len(layers), before, after, search.trials, scores)


def short(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers of a summary: agreement, matte_mae, output_error (and per video, when given)."""
    out: dict[str, Any] = {"output_error": summary.get("output_error")}
    if "faces" in summary:
        out["agreement"] = summary["faces"]["agreement"]
    if "matte" in summary:
        out["matte_mae"] = summary["matte"]["mae"]
    if len(summary.get("videos", {})) > 1:
        out["videos"] = summary["videos"]
    return out


def describe(summary: Mapping[str, Any]) -> str:
    """One line: `face agreement 0.956, output error 2.11 (by video: a.mp4 0.992, b.mp4 0.909)`."""
    parts = []
    if "faces" in summary:
        parts.append(f"face agreement {summary['faces']['agreement']:.3f}")
    if "matte" in summary:
        parts.append(f"matte MAE {summary['matte']['mae']:.4f}")
    parts.append(f"output error {summary['output_error']:.3g}")
    videos = summary.get("videos", {})
    if len(videos) > 1:
        key = "agreement" if "faces" in summary else "matte_mae" if "matte" in summary else "output_error"
        each = ", ".join(f"{Path(video).name} {value[key]:.3g}" for video, value in videos.items())
        parts[-1] += f" (by video: {each})"
    return ", ".join(parts)
