"""`bench engine`: variants parsed, the command end to end on tiny settings (JSON and PNG), and
`--compare` of two results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framewire import cli
from bench.variants import REFERENCE, Variant, available, engine_config, parse
from framewire.config import EngineConfig
from framewire.pipeline.errors import UsageError

pytestmark = pytest.mark.timeout(120)


def test_parse_variants() -> None:
    assert parse("onnxruntime:cpu:fp32, onnxruntime:cpu:int8,tensorrt:fp16") == [
        REFERENCE,
        Variant("onnxruntime", "cpu", "int8"),
        Variant("tensorrt", "gpu", "fp16"),
    ]
    for bad in ("onnxruntime:cpu", "tflite:cpu:fp32", "onnxruntime:cuda:fp16", "onnxruntime:cuda:int8", ""):
        with pytest.raises(UsageError):
            parse(bad)
    (fp16,) = parse("onnxruntime:cpu:fp16")  # from an fp16 model file (quantize --recipe fp16)
    assert fp16.uses_fp16_model and not fp16.uses_int8_model


def test_the_cpu_variants_are_always_available() -> None:
    found = available()
    assert found[:2] == [REFERENCE, Variant("onnxruntime", "cpu", "int8")]


def test_engine_config_of_a_variant() -> None:
    base = EngineConfig(threads=1)
    cpu8 = engine_config(base, Variant("onnxruntime", "cpu", "int8"), 4, "v.mp4")
    assert (cpu8.providers, cpu8.precision, cpu8.max_batch, cpu8.threads) == (("cpu",), "fp32", 4, 1)
    trt8 = engine_config(base, Variant("tensorrt", "gpu", "int8"), 8, "v.mp4")
    assert (trt8.backend.value, trt8.precision, trt8.calibration.video) == ("tensorrt", "int8", "v.mp4")


def test_bench_engine_end_to_end(tiny_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "engine.json", tmp_path / "engine.png"
    code = cli.main(
        ["bench", "engine", "-c", str(tiny_job), "--variants", "onnxruntime:cpu:fp32,onnxruntime:cpu:int8",
         "--frames", "2", "--batches", "1,2", "--warmup", "1", "--seconds", "0.05", "--min-iterations", "3",
         "--calib-frames", "2", "--json", str(out), "--chart", str(png)]
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "engine" and data["batches"] == [1, 2]
    assert [r["variant"] for r in data["results"]] == ["onnxruntime:cpu:fp32", "onnxruntime:cpu:int8"]
    for result in data["results"]:
        assert result["error"] is None and result["batchable"] is True
        assert result["startup_s"] > 0 and result["peak_rss_mib"] > 0
        assert result["input_shape"] == [1, 3, 128, 160]
        assert [row["batch"] for row in result["rows"]] == [1, 2]
        for row in result["rows"]:
            assert row["iterations"] >= 3
            assert row["latency_ms"]["p50"] <= row["latency_ms"]["p90"] <= row["latency_ms"]["p99"]
            assert row["throughput_fps"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "frames/s" in capsys.readouterr().out


def _result(p50: float, fps: float) -> dict:
    return {
        "benchmark": "engine",
        "results": [
            {
                "variant": "onnxruntime:cpu:fp32",
                "startup_s": 0.1,
                "peak_rss_mib": 200.0,
                "rows": [{"batch": 1, "latency_ms": {"p50": p50}, "throughput_fps": fps}],
            }
        ],
    }


def test_compare_prints_new_over_old(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new, out = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "cmp.json"
    old.write_text(json.dumps(_result(10.0, 100.0)))
    new.write_text(json.dumps(_result(5.0, 200.0)))
    assert cli.main(["bench", "engine", "--compare", str(old), str(new), "--json", str(out)]) == 0
    assert "p50 new/old" in capsys.readouterr().out
    (row,) = json.loads(out.read_text())["rows"]
    assert row["new_over_old"]["latency_p50"] == 0.5 and row["new_over_old"]["throughput"] == 2.0


def test_compare_refuses_a_file_of_another_benchmark(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"benchmark": "pipeline"}))
    assert cli.main(["bench", "engine", "--compare", str(other), str(other)]) == 2


def test_openvino_variants_parse_and_configure() -> None:
    assert parse("openvino:cpu:bf16,openvino:gpu:fp16,openvino:cpu:int8") == [
        Variant("openvino", "cpu", "bf16"),
        Variant("openvino", "gpu", "fp16"),
        Variant("openvino", "cpu", "int8"),
    ]
    for bad in ("openvino:tpu:fp32", "openvino:cpu:fp8"):
        with pytest.raises(UsageError, match="OpenVINO's device is one of cpu, gpu, npu, auto"):
            parse(bad)
    int8 = Variant("openvino", "cpu", "int8")
    assert int8.uses_int8_model and not int8.on_gpu and not Variant("openvino", "gpu", "fp16").on_gpu
    config = engine_config(EngineConfig(threads=1), int8, 4, "v.mp4")
    got = (config.backend.value, config.device, config.precision, config.max_batch)
    assert got == ("openvino", "CPU", "int8", 4)
    assert engine_config(EngineConfig(), Variant("openvino", "gpu", "fp16"), 1, "v.mp4").device == "GPU"


def test_bench_engine_runs_openvino_beside_onnx_runtime(tiny_job: Path, tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    out = tmp_path / "engine.json"
    code = cli.main(
        ["bench", "engine", "-c", str(tiny_job), "--variants", "onnxruntime:cpu:fp32,openvino:cpu:fp32",
         "--frames", "2", "--batches", "1,3", "--warmup", "1", "--seconds", "0.05", "--min-iterations", "3",
         "--json", str(out), "--set", f"engine.cache_dir={tmp_path / 'cache'}"]
    )  # fmt: skip
    assert code == 0
    results = json.loads(out.read_text())["results"]
    assert [r["variant"] for r in results] == ["onnxruntime:cpu:fp32", "openvino:cpu:fp32"]
    openvino = results[1]
    assert openvino["error"] is None and openvino["batchable"] is True
    assert openvino["provider"] == "OpenVINO CPU fp32"
    assert [row["batch"] for row in openvino["rows"]] == [1, 3]
