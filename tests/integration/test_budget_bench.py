"""`bench budget --streams` end to end at a small scale: the loopback RTSP server looping a small clip,
two live sources for three seconds, the work alone timed on the same stream, a py-spy profile of
every process of one more run, summarised per process into the work and framewire's own buckets,
perf's on-CPU samples of a last run, by library, and the plain loop a stream on the same streams."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framewire import cli
from tests.support.clips import make_clip
from tests.support.components import perf, pyspy

pytestmark = pytest.mark.timeout(150)

ROOT = Path(__file__).resolve().parents[2]


def test_bench_budget_live_measures_streams_the_work_and_a_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pyspy()  # the profilers, set up (or ComponentMissing: fail, not skip)
    perf()
    clip = make_clip(tmp_path / "face.mp4", width=320, height=256, frames=25,
                     from_clip=ROOT / "assets" / "videos" / "carphone_pristine.mp4")  # fmt: skip
    config = tmp_path / "live.yaml"
    config.write_text(
        f"""
sources: [{{id: cam, uri: {clip}}}]
model:
  path: {ROOT / "assets" / "models" / "yunet" / "face_detection_yunet_2023mar.onnx"}
  task: face_detection
engine: {{threads: 1, processes_per_device: 1}}
stages: {{fuse: true, fuse_outputs: true}}
outputs: [{{kind: jsonl, path: "out/{{source_id}}.jsonl"}}]
""",
        encoding="utf-8",
    )
    out = tmp_path / "budget.json"
    code = cli.main([
        "bench", "budget", "-c", str(config), "--streams", "2", "--seconds", "3", "--clip", str(clip),
        "--work-frames", "25", "--peer", "--profile", "--profile-rate", "100", "--perf", "--perf-rate", "499",
        "--json", str(out),
    ])  # fmt: skip
    assert code == 0
    result = json.loads(out.read_text())
    assert result["mode"] == "live" and result["streams"] == 2
    (one,) = result["runs"]
    fw = one["framewire"]
    assert fw["exit_code"] == 0 and set(fw["per_stream"]) == {"cam0", "cam1"}
    assert all(s["records"] > 10 for s in fw["per_stream"].values())  # 2 s of 25 fps, and the drain
    assert fw["cpu_s"] > 0 and fw["frames_in_window"] > 0
    assert 0 < fw["fps_min"] <= fw["fps_max"]
    assert fw["kept"] == pytest.approx(sum(s["fps"] for s in fw["per_stream"].values()) / (2 * result["clip"]["fps"]))
    assert set(fw["overflow_per_stream"]) <= {"cam0", "cam1"} and sum(fw["overflow_per_stream"].values()) == fw[
        "dropped_overflow"]
    work = one["work"]
    assert work["frames"] == 25 and work["encode"] is None  # JSONL only: nothing to encode
    assert work["ms_per_frame"]["decode"] > 0 and work["ms_per_frame"]["model"] > 0
    assert work["paced"]["ms_per_frame"]["model"] > 0  # as each frame came: shown, not the limit
    share = result["share"]
    assert share["stream_limit"] == pytest.approx(2 / share["work_cores_per_stream"], rel=0.01)
    profile = result["profile"]
    assert profile["frames_in_window"] > 0 and profile["cpu_s"] > 0
    # The model's time is found where it is spent: the infer process (YuNet at 320x256, ~2 ms a
    # frame, 50 frames a second: about 30 of the 300 samples of 3 s at 100 Hz).
    assert profile["processes"]["infer[0]"]["ms_per_frame"]["model"] > 0
    assert not any("model" in p["ms_per_frame"] for n, p in profile["processes"].items() if n != "infer[0]")
    # perf's on-CPU samples: the model in the infer process, FFmpeg's decoding in the decode ones.
    on_cpu = result["perf"]
    assert on_cpu["frames"] > 0 and on_cpu["samples"] > 0 and on_cpu["rate_hz"] == 499
    assert on_cpu["stages"]["infer"]["model"] > 0 and on_cpu["stages"]["decode"]["decode"] > 0
    assert not any("model" in row for stage, row in on_cpu["stages"].items() if stage != "infer")
    assert not any("decode" in row for stage, row in on_cpu["stages"].items() if stage != "decode")
    assert on_cpu["ms_per_frame"]["python"] > 0 and on_cpu["own_ms_per_frame"] > 0
    # The plain loop a stream, on the same server in the same run: each stream put out in its window.
    peer = one["peer"]
    assert peer["exit_codes"] == [0, 0] and set(peer["per_stream"]) == {"peer0", "peer1"}
    assert peer["server_cores"] > 0 and fw["server_cores"] > 0  # it sent the streams to each side
    assert 0 < peer["fps_min"] <= peer["fps_max"] and peer["cpu_s"] > 0 and peer["frames_in_window"] > 0
    assert peer["ms_per_frame_out"] == pytest.approx(peer["cpu_s"] * 1000 / peer["frames_in_window"], rel=0.01)
    assert share["framewire_vs_peer"] == pytest.approx(
        share["framewire_ms_per_frame_out"] / share["peer_ms_per_frame_out"], rel=0.01)
    table = capsys.readouterr().out
    assert "plain loop, a process a stream: fps kept, slowest stream" in table
    assert "stream limit (work alone" in table and "CPU ms a frame per process" in table
    assert "per process and library (on-CPU samples, perf)" in table
    assert "fps kept, fastest stream" in table and "frames kept, all streams" in table
    assert "as each frame came (cold)" in table and "plain loop / work" in table
    assert share["framewire_vs_loop"] == pytest.approx(
        share["framewire_ms_per_frame_out"] / (share["work_ms_per_frame"] + result["work"]["loop"]["own_ms_per_frame"]), rel=0.01)
