"""`engine.backend: openvino` through the CLI as a user runs it: the showcase (NanoDet, ByteTrack, a
line and a zone) on OpenVINO against the same job on ONNX Runtime fp32, and the one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.helpers import ROOT, error_lines, read_jsonl, run_cli

pytest.importorskip("openvino")
pytestmark = pytest.mark.timeout(400)

SHOWCASE = ROOT / "configs/showcase.yaml"
FRAMES = 80


def _showcase(tmp: Path, backend: str) -> list[dict]:
    proc = run_cli(
        "run", "-c", str(SHOWCASE), "--no-progress",
        "--set", f"engine.backend={backend}", "--set", f"engine.cache_dir={tmp / 'cache'}",
        "--set", f"sources.0.max_frames={FRAMES}",
        "--set", f"outputs=[{{kind: jsonl, path: '{tmp}/{backend}-{{source_id}}.jsonl'}}]",
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not error_lines(proc.stderr)
    return read_jsonl(tmp / f"{backend}-bikes.jsonl")


def _iou(a: list[float], b: list[float]) -> float:
    """IoU of two [x, y, w, h] boxes (the records' form)."""
    w = max(0.0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    union = a[2] * a[3] + b[2] * b[3] - w * h
    return w * h / union if union > 0 else 0.0


def test_the_showcase_on_openvino_matches_onnx_runtime(tmp_path: Path) -> None:
    reference = _showcase(tmp_path, "onnxruntime")
    test = _showcase(tmp_path, "openvino")
    assert [r["seq"] for r in test] == [r["seq"] for r in reference] == list(range(FRAMES))
    boxes = matched = 0
    for ref, got in zip(reference, test):
        ref_boxes = [d["box"] for d in ref["results"]["detections"]]  # tracked boxes, fp32
        got_boxes = [d["box"] for d in got["results"]["detections"]]
        boxes += max(len(ref_boxes), len(got_boxes))
        matched += sum(1 for box in ref_boxes if any(_iou(box, other) >= 0.9 for other in got_boxes))
    assert boxes > 100  # a busy street: worth comparing
    assert matched / boxes >= 0.97, (matched, boxes)
    assert test[-1]["results"]["analytics"] == reference[-1]["results"]["analytics"]


def test_validate_says_how_openvino_runs_and_devices_are_one_line() -> None:
    proc = run_cli("validate", "-c", str(SHOWCASE), "--set", "engine.backend=openvino")
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("  engine: ")]
    assert line.startswith("  engine: openvino on CPU, precision auto: ")
    openvino = ("-c", str(SHOWCASE), "--set", "engine.backend=openvino")
    unknown = run_cli("run", *openvino, "--set", "engine.device=TPU")
    assert unknown.returncode == 2
    (error,) = error_lines(unknown.stderr)
    assert "engine.device" in error and "TPU" in error
    import openvino as ov

    if "NPU" not in ov.Core().available_devices:
        absent = run_cli("run", *openvino, "--set", "engine.device=NPU")
        assert absent.returncode == 2 and "Traceback" not in absent.stderr
        (error,) = error_lines(absent.stderr)
        assert error.startswith("framewire: error: engine.device: 'NPU' is not available here (OpenVINO ")
