"""`bench accuracy`: face matching and agreement on hand-made detections, tensor errors, matte error,
and the command end to end on a tiny job (valid JSON, exit code 1 when a tolerance is missed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from framewire import cli
from framewire.app.accuracy import FaceAgreement, Tolerance, iou, match_faces, task_summary, tensor_errors, verdict
from framewire.stages.tasks.base import Result

pytestmark = pytest.mark.timeout(120)


def face(x: float, y: float, w: float = 10.0, h: float = 10.0, score: float = 0.9) -> dict:
    return {"box": [x, y, w, h], "score": score}


def test_iou_of_boxes() -> None:
    assert iou([0, 0, 10, 10], [0, 0, 10, 10]) == 1.0
    assert iou([0, 0, 10, 10], [20, 20, 5, 5]) == 0.0
    assert iou([0, 0, 10, 10], [5, 0, 10, 10]) == pytest.approx(50 / 150)
    assert iou([0, 0, 0, 0], [0, 0, 0, 0]) == 0.0


def test_match_is_one_to_one_best_overlap_first() -> None:
    reference = [face(0, 0), face(100, 100)]
    # Test face 0 overlaps reference 0 a little less than test face 1 does.
    test = [face(0.3, 0), face(0.1, 0), face(100, 100.2)]
    pairs = match_faces(reference, test, 0.9)
    assert [(i, j) for i, j, _ in pairs] == [(0, 1), (1, 2)]


def test_match_needs_the_iou_threshold() -> None:
    shifted = face(1.0, 0)  # IoU 90 / 110 = 0.818
    assert match_faces([face(0, 0)], [shifted], 0.9) == []
    assert len(match_faces([face(0, 0)], [shifted], 0.8)) == 1


def test_agreement_is_matched_over_the_larger_count() -> None:
    agreement = FaceAgreement(0.9)
    agreement.add([face(0, 0, score=0.9), face(50, 50)], [face(0, 0, score=0.8)])  # 1 of max(2, 1)
    agreement.add([face(0, 0)], [face(0, 0), face(80, 80)])  # 1 of max(1, 2)
    agreement.add([], [])  # nothing either side: no effect
    summary = agreement.summary()
    assert summary["agreement"] == pytest.approx(2 / 4)
    assert (summary["matched"], summary["reference_faces"], summary["test_faces"]) == (2, 3, 3)
    assert summary["score_diff_mean"] == pytest.approx(0.05)
    assert summary["score_diff_max"] == pytest.approx(0.1)


def test_no_faces_anywhere_is_full_agreement() -> None:
    agreement = FaceAgreement()
    agreement.add([], [])
    assert agreement.agreement == 1.0


def test_tensor_errors_are_relative_to_the_reference() -> None:
    ref = {"y": np.array([1.0, -2.0, 4.0], dtype=np.float32)}
    test = {"y": np.array([1.0, -2.5, 4.0], dtype=np.float32)}
    errors = tensor_errors(ref, test)["y"]
    assert errors["max_rel"] == pytest.approx(0.5 / 4.0)
    assert errors["mean_rel"] == pytest.approx((0.5 / 3) / (7 / 3))
    assert errors["max_abs"] == pytest.approx(0.5)


def test_matte_error_and_verdicts() -> None:
    ref = [Result({}, {"alpha": np.full((4, 4), 255, dtype=np.uint8)})]
    test = [Result({}, {"alpha": np.full((4, 4), 204, dtype=np.uint8)})]
    summary = task_summary(ref, test, 0.9)
    assert summary["matte"]["mae"] == pytest.approx(0.2)
    assert verdict(summary, Tolerance(0.9, 0.95, 0.05)) == (False, ["matte MAE 0.2000 > 0.05"])
    assert verdict({"faces": {"agreement": 0.97}}, Tolerance(0.9, 0.95, 0.05)) == (True, [])
    assert verdict({"faces": {"agreement": 0.9}}, Tolerance(0.9, 0.95, 0.05))[0] is False


def test_bench_accuracy_end_to_end(
    tiny_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "accuracy.json"
    code = cli.main(
        ["bench", "accuracy", "-c", str(tiny_job), "--frames", "3", "--calib-frames", "3",
         "--variants", "onnxruntime:cpu:fp32,onnxruntime:cpu:int8", "--json", str(out)]
    )  # fmt: skip
    data = json.loads(out.read_text())
    assert data["benchmark"] == "accuracy" and data["frames"] == 3
    labels = [r["variant"] for r in data["results"]]
    assert labels == ["onnxruntime:cpu:fp32", "onnxruntime:cpu:int8"]
    int8 = data["results"][1]
    assert set(int8["faces"]) >= {"agreement", "matched", "reference_faces", "test_faces", "score_diff_mean"}
    assert int8["tensors"]["worst_output"] in {
        f"{k}_{s}" for k in ("cls", "obj", "bbox", "kps") for s in (8, 16, 32)
    }
    assert data["quantised_now"]["frames"] == 3
    assert code == (0 if int8["passed"] else 1)
    assert "onnxruntime:cpu:int8" in capsys.readouterr().out


def test_bench_accuracy_fails_below_the_tolerance(
    tiny_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["bench", "accuracy", "-c", str(tiny_job), "--frames", "2", "--calib-frames", "2",
         "--variants", "onnxruntime:cpu:int8", "--min-agreement", "1.01", "--json", str(tmp_path / "a.json")]
    )  # fmt: skip
    assert code == 1
    assert "FAIL: face agreement" in capsys.readouterr().out
    assert json.loads((tmp_path / "a.json").read_text())["results"][1]["passed"] is False


def test_bench_accuracy_checks_an_fp16_model_on_the_cpu(tiny_job: Path, tmp_path: Path) -> None:
    out = tmp_path / "fp16.json"
    code = cli.main(
        ["bench", "accuracy", "-c", str(tiny_job), "--frames", "3",
         "--variants", "onnxruntime:cpu:fp16", "--json", str(out)]
    )  # fmt: skip
    data = json.loads(out.read_text())
    fp16 = data["results"][1]
    assert fp16["variant"] == "onnxruntime:cpu:fp16" and fp16["provider"] == "CPUExecutionProvider"
    assert fp16["passed"] and fp16["faces"]["agreement"] == 1.0 and code == 0  # converted now, then compared
