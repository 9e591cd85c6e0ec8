"""How close a model's results are to the fp32 model's: what `bench accuracy` reports and what
`quantize --keep-fp32 auto` holds a mixed-precision model to.

- faces (any task whose results hold `detections`): a test box matches a reference box when they
  overlap at IoU >= the threshold (0.9), each box matched at most once, best overlaps first;
  agreement = matched / max(reference boxes, test boxes), summed over all frames (1.0 when neither
  finds any), with the score difference of matched boxes;
- mattes (results holding an `alpha` array): mean absolute error of the 8-bit alpha, as a fraction
  of 255;
- tensors, per model output: max relative error = max|test - ref| / max|ref| (the worst element,
  relative to the output's range) and mean relative error = mean|test - ref| / mean|ref|.

`Tolerance` says what passes. Pure functions on results, unit-tested on hand-made detections.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from framewire.stages import detections
from framewire.stages.tasks.base import Result


@dataclass(frozen=True)
class Tolerance:
    """What a variant must reach against the reference (the defaults of `bench accuracy`)."""

    iou: float = 0.9
    """IoU at which two boxes match."""
    min_agreement: float = 0.95
    """Face (box) agreement a variant must reach."""
    max_matte_mae: float = 0.02
    """Matte mean absolute error allowed, 0-1."""


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two [x, y, w, h] boxes (stages.detections.iou, for one pair)."""
    return float(detections.iou(detections.boxes([{"box": a[:4]}]), detections.boxes([{"box": b[:4]}]))[0, 0])


def match_faces(
    reference: Sequence[Mapping[str, Any]], test: Sequence[Mapping[str, Any]], threshold: float = 0.9
) -> list[tuple[int, int, float]]:
    """Pairs (reference index, test index, IoU) at IoU >= threshold, each face used once, the best
    overlaps taken first (greedy: what an evaluator of detections does)."""
    overlaps = detections.iou(detections.boxes(reference), detections.boxes(test))
    candidates = [
        (float(overlaps[i, j]), int(i), int(j)) for i, j in zip(*np.nonzero(overlaps >= threshold))
    ]
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


def task_summary(reference: Sequence[Result], test: Sequence[Result], threshold: float) -> dict[str, Any]:
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


def verdict(summary: Mapping[str, Any], tolerance: Tolerance) -> tuple[bool, list[str]]:
    """Whether a `task_summary` is within `tolerance`, and why not."""
    failures = []
    min_agreement, max_matte_mae = tolerance.min_agreement, tolerance.max_matte_mae
    faces = summary.get("faces")
    if faces is not None and faces["agreement"] < min_agreement:
        failures.append(f"face agreement {faces['agreement']:.3f} < {min_agreement}")
    matte = summary.get("matte")
    if matte is not None and matte["mae"] > max_matte_mae:
        failures.append(f"matte MAE {matte['mae']:.4f} > {max_matte_mae}")
    return not failures, failures
