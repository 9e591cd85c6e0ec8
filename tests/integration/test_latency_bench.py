"""`bench latency` end to end at a small scale: the loopback RTSP server looping a small clip, the
shipped YuNet model, two policies for two seconds each; the JSON and the table come out, every frame
read is output or counted, and `block` drops nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framewire import cli
from tests.support.clips import make_clip

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


def test_bench_latency_runs_each_policy_against_a_live_rtsp_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clip = make_clip(tmp_path / "face.mp4", width=160, height=128, frames=25,
                     from_clip=ROOT / "assets" / "videos" / "carphone_pristine.mp4")  # fmt: skip
    config = tmp_path / "live.yaml"
    config.write_text(
        f"""
sources:
  - {{id: cam, uri: 'rtsp://127.0.0.1:1/live', max_staleness_ms: 300, latency_budget_ms: 5000}}
model:
  path: {ROOT / "assets" / "models" / "yunet" / "face_detection_yunet_2023mar.onnx"}
  task: face_detection
engine: {{threads: 1, processes_per_device: 1}}
stages: {{fuse: true, fuse_outputs: true}}
composite: [{{kind: blur}}]
outputs: [{{kind: jsonl, path: "out/{{source_id}}.jsonl"}}]
""",
        encoding="utf-8",
    )
    out = tmp_path / "latency.json"
    code = cli.main([
        "bench", "latency", "-c", str(config), "--clip", str(clip), "--seconds", "2",
        "--policy", "drop_oldest", "block", "--json", str(out), "--keep", str(tmp_path / "runs"),
    ])  # fmt: skip
    assert code == 0
    result = json.loads(out.read_text())
    assert result["benchmark"] == "latency" and result["latency_budget_ms"] == 5000
    assert (result["source"]["width"], result["source"]["height"], result["source"]["fps"]) == (160, 128, 25)
    assert list(result["runs"]) == ["drop_oldest", "block"]
    for policy, run in result["runs"].items():
        frames = run["frames"]
        assert run["exit_code"] == 0 and run["policy"] == policy
        assert run["reconnects"] == 0
        assert frames["output"] > 10  # two seconds of a 25 fps source, and the drain
        drops = frames["dropped_policy"] + frames["dropped_stale"] + frames["dropped_overflow"]
        assert frames["read"] == frames["output"] + drops
        assert frames["seqs_accounted"] is True
        lines = (tmp_path / "runs" / policy).glob("*.jsonl")
        assert sum(1 for path in lines for _ in path.open()) == frames["output"]
        assert {"p50", "p90", "p99", "max"} <= set(run["latency_ms"]) and run["latency_ms"]["p99"] > 0
        assert run["cores_used"] > 0 and run["peak_rss_mib"] > 0
        assert run["verdict"]["drops_counted"] is True
    block = result["runs"]["block"]
    assert block["frames"]["dropped_policy"] == block["frames"]["dropped_stale"] == 0
    assert block["max_staleness_ms"] is None and block["verdict"]["holds"] is True
    table = capsys.readouterr().out
    assert "drop_oldest" in table and "block" in table and "latency p99 ms" in table
