"""`bench transport` on small frames: every mode measured, JSON with the documented keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framewire import cli

pytestmark = pytest.mark.timeout(120)


def test_bench_transport_small_frames(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "transport.json"
    code = cli.main(
        ["bench", "transport", "--sizes", "64x48", "--frames", "10", "--warmup", "2", "--repeat", "1"]
        + ["--json", str(out)]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert result["benchmark"] == "transport"
    assert {r["mode"] for r in result["results"]} == {"pool", "pool-ref", "zmq", "copy", "hub"}
    for entry in result["results"]:
        assert entry["size"] == "64x48" and entry["bytes"] == 64 * 48 * 3
        assert entry["latency_ms"]["p50"] >= 0  # an in-process copy of 9 KiB rounds to 0.000 ms
        if entry["mode"] != "copy":
            assert entry["latency_ms"]["p50"] > 0
        assert entry["latency_ms"]["p99"] >= entry["latency_ms"]["p50"]
        assert entry["cpu_ms_per_frame"] >= 0
        if entry["mode"] == "hub":  # the whole daemon with no-op stages
            assert entry["fps"] > 0
    assert "pool-ref" in capsys.readouterr().out


def test_bad_size_is_a_usage_error() -> None:
    assert cli.main(["bench", "transport", "--sizes", "big"]) == 2


def test_named_sizes() -> None:
    from bench.transport import parse_size

    assert parse_size("1080p") == ("1080p", 1920, 1080)
    assert parse_size("4K") == ("4k", 3840, 2160)
    assert parse_size("320x240") == ("320x240", 320, 240)


def _gpu_count() -> int:
    from framewire.engines import cuda

    try:
        cuda.runtime()
    except Exception:  # noqa: BLE001 - no cuda-python: no GPU for this benchmark
        return 0
    return cuda.device_count()


HAS_GPU = _gpu_count() > 0


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_the_gpu_modes_without_a_gpu_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "transport", "--sizes", "64x48", "--modes", "gpu-pinned"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("framewire: error: ") and "gpu" in err.lower() and err.count("\n") == 1


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU and cuda-python")
@pytest.mark.parametrize("spin", [[], ["--spin-wait"]], ids=["blocking", "spin"])
def test_the_gpu_modes_copy_a_pool_slot_to_the_gpu(tmp_path: Path, spin: list[str]) -> None:
    out = tmp_path / "gpu.json"
    modes = ["gpu-pinned", "gpu-staged", "gpu-pageable"]
    args = ["bench", "transport", "--sizes", "640x480", "--modes", *modes, "--frames", "20", "--repeat", "1"]
    assert cli.main([*args, *spin, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["spin_wait"] is bool(spin)
    assert [r["mode"] for r in result["results"]] == modes
    for entry in result["results"]:
        assert entry["latency_ms"]["p50"] > 0 and entry["gbytes_per_s"] > 0
