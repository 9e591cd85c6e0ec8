"""The accuracy gate: a precision a model failed on a recorded clip is not what `auto` runs; asked
for by name it runs; records are the model's own (its sha256) and replace earlier ones of a clip."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from framewire.engines import openvino_gate
from framewire.engines.openvino_gate import gated_precision, record, refused

pytestmark = pytest.mark.timeout(30)


def _results(passed: bool) -> list[dict]:
    return [
        {"variant": "onnxruntime:cpu:fp32", "reference": True, "passed": True},
        {"variant": "openvino:cpu:bf16", "passed": passed,
         "failures": [] if passed else ["face agreement 0.800 < 0.95"], "faces": {"agreement": 1.0 if passed else 0.8}},
    ]  # fmt: skip


def test_a_failed_precision_is_refused_for_auto_only(
    conv_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gate = tmp_path / "gate.json"
    monkeypatch.setattr(openvino_gate, "GATE", gate)
    assert record(_results(True), str(conv_model), "bikes.mp4", 50, "Xeon", gate=gate) == 1
    assert record(_results(False), str(conv_model), "signs.mp4", 50, "Xeon", gate=gate) == 1
    assert [r["video"] for r in json.loads(gate.read_text())["records"]] == ["bikes.mp4", "signs.mp4"]
    why = refused(str(conv_model), "bf16", gate)
    assert why == "face agreement 0.800 < 0.95 on 50 frames of signs.mp4 (Xeon)"
    assert refused(str(conv_model), "int8", gate) is None  # never measured: not refused
    monkeypatch.setattr(openvino_gate, "refused", lambda path, precision: refused(path, precision, gate))
    with caplog.at_level(logging.WARNING, logger="framewire.engines.openvino_gate"):
        assert gated_precision(str(conv_model), "auto", "bf16") == "fp32"
        assert gated_precision(str(conv_model), "bf16", "bf16") == "bf16"  # by name: it runs
        assert gated_precision(str(conv_model), "auto", "fp32") == "auto"
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("engine.precision auto: bf16 failed the accuracy gate for ")
    # The clip passes again: the new record replaces the old one, and auto runs bf16.
    record(_results(True), str(conv_model), "signs.mp4", 50, "Xeon", gate=gate)
    assert len(json.loads(gate.read_text())["records"]) == 2
    assert gated_precision(str(conv_model), "auto", "bf16") == "auto"


def test_a_variant_that_ran_another_precision_is_no_verdict(conv_model: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate.json"
    results = [
        {"variant": "openvino:cpu:bf16", "provider": "OpenVINO CPU fp32", "passed": True},  # no bf16 here
        {"variant": "openvino:cpu:fp32", "provider": "OpenVINO CPU fp32", "passed": True},
        {"variant": "openvino:cpu:int8", "provider": "OpenVINO CPU int8+fp32", "passed": False},
    ]
    assert record(results, str(conv_model), "bikes.mp4", 8, "EPYC", gate=gate) == 2
    assert [r["precision"] for r in json.loads(gate.read_text())["records"]] == ["fp32", "int8"]


def test_another_model_is_not_judged_by_these_records(conv_model: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate.json"
    record(_results(False), str(conv_model), "bikes.mp4", 50, "Xeon", gate=gate)
    other = tmp_path / "other.onnx"
    other.write_bytes(conv_model.read_bytes() + b"\0")
    assert refused(str(other), "bf16", gate) is None


def test_the_shipped_gate_file_reads() -> None:
    assert isinstance(openvino_gate.records(), list)
