"""`bench pipeline` end to end on a tiny job: both sides run, the JSON has the documented keys, and
the hand-written loop writes as many frames as the daemon."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framewire import cli

pytestmark = pytest.mark.timeout(120)

SIDE_KEYS = {
    "frames",
    "wall_s",
    "fps",
    "steady_fps",
    "startup_s",
    "cpu_s",
    "cpu_ms_per_frame",
    "latency_ms",
    "stage_latency_ms",
    "stage_busy",
    "memory",
    "cpu_s_by_process",
    "output_frames",
    "exit_code",
}


def test_bench_pipeline_writes_json_and_matching_outputs(
    tiny_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pipeline.json"
    code = cli.main(["bench", "pipeline", "-c", str(tiny_job), "--repeat", "1", "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert result["benchmark"] == "pipeline"
    assert {"machine", "job", "runs", "framewire", "loop", "ratio", "same_output_frames"} <= set(result)
    for side in ("framewire", "loop"):
        assert SIDE_KEYS <= set(result[side]), side
        assert result[side]["frames"] == 12
        assert result[side]["exit_code"] == 0
        assert {"p50", "p99"} <= set(result[side]["latency_ms"])
        assert set(result[side]["stage_busy"]) >= {"preprocess", "infer", "postprocess", "composite"}
    # Same job, same outputs: 12 frames in the H.264 file and in the JSONL file, on both sides.
    assert result["framewire"]["output_frames"] == result["loop"]["output_frames"]
    assert set(result["loop"]["output_frames"].values()) == {12}
    assert result["same_output_frames"] is True
    assert result["loop_engine_threads"] == 2  # 1 thread x 2 infer processes
    assert result["ratio"]["fps"] > 0
    table = capsys.readouterr().out
    assert "framewire/loop" in table and "fps (steady state)" in table


def test_loop_threads_default_to_the_daemons_total() -> None:
    from bench.pipeline import default_loop_threads
    from framewire.config import load_config

    config = load_config("x", ["engine.threads=3", "engine.processes_per_device=2"], text=_MINIMAL)
    assert default_loop_threads(config) == 6
    config = load_config("x", ["engine.threads=0"], text=_MINIMAL)
    assert default_loop_threads(config) == 0


def test_redirect_outputs_adds_jsonl_and_moves_files(tmp_path: Path) -> None:
    from bench.jobs import redirect_outputs
    from framewire.config import JsonlOutput, VideoFileOutput, ZmqOutput, load_config

    config = load_config("x", [], text=_MINIMAL)
    job = redirect_outputs(config, tmp_path)
    kinds = [type(o) for o in job.outputs]
    assert kinds == [VideoFileOutput, ZmqOutput, JsonlOutput]
    assert job.outputs[0].path.startswith(str(tmp_path))
    assert job.outputs[1].endpoint.startswith(f"ipc://{tmp_path}")
    assert "{source_id}" in job.outputs[2].path


_MINIMAL = """
sources: [{id: a, uri: a.mp4}]
model: {path: m.onnx, task: face_detection}
outputs:
  - {kind: video_file, path: out.mp4}
  - {kind: zmq, endpoint: "tcp://127.0.0.1:5561"}
"""


def test_the_hub_process_is_counted_for_this_run_only() -> None:
    # The sampler reads each process's total; the bench process also ran the earlier runs.
    from bench import harness
    from bench.runs import _this_run

    seen = {harness.HUB_PROCESS: 64.0, "infer[0]": 8.0, "output[0]": 20.0}
    assert _this_run(seen, 2.5) == {harness.HUB_PROCESS: 2.5, "infer[0]": 8.0, "output[0]": 20.0}
