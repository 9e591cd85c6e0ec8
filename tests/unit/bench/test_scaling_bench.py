"""`bench scaling` on a tiny job: one point per (sources, infer processes), JSON and a PNG chart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framewire import cli

pytestmark = pytest.mark.timeout(120)


def test_bench_scaling_tiny_grid(tiny_job: Path, tmp_path: Path) -> None:
    out, png = tmp_path / "scaling.json", tmp_path / "scaling.png"
    code = cli.main(
        [
            "bench", "scaling", "-c", str(tiny_job), "--infer", "1", "--sources", "1", "2", "--frames", "6",
            "--json", str(out), "--png", str(png),
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert result["benchmark"] == "scaling"
    points = result["points"]
    assert [(p["sources"], p["infer_processes"]) for p in points] == [(1, 1), (2, 1)]
    assert [p["frames"] for p in points] == [6, 12]
    for p in points:
        assert {"fps", "steady_fps", "startup_s", "cpu_ms_per_frame", "latency_ms"} <= p.keys()
        assert "memory_pss_mib" in p
        assert p["fps"] > 0 and p["exit_code"] == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_with_shape_copies_the_first_source() -> None:
    from bench.scaling import with_shape
    from framewire.config import load_config

    config = load_config(
        "x",
        [],
        text="""
sources: [{id: a, uri: a.mp4}]
model: {path: m.onnx, task: face_detection}
outputs: [{kind: jsonl, path: out.jsonl}]
""",
    )
    shaped = with_shape(config, 3, 4, 10)
    assert [s.id for s in shaped.sources] == ["a0", "a1", "a2", "a3"]
    assert all(s.max_frames == 10 for s in shaped.sources)
    assert shaped.engine.processes_per_device == 3
    assert shaped.outputs[0].path == "{source_id}-out.jsonl"
