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
