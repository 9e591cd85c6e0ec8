"""`bench budget --peer` on the file job: the plain threaded program beside framewire on the same clip.
The program itself as a real process on a real clip (every frame out once, in order, at its own
time, the faces blurred), its failures in one line, its shares, and which peer each mode takes."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from bench import budget, budget_file, file_peer, harness
from framewire import UsageError, cli
from framewire.config import load_config

pytestmark = pytest.mark.timeout(90)


def _config_json(tiny_job: Path, folder: Path) -> Path:
    config = load_config(str(tiny_job))
    path = folder / "config.json"
    path.write_text(json.dumps(config.model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    return path


def _peer(config: Path, uri: str, folder: Path, threads: int = 2) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "bench.file_peer", "--config", str(config), "--uri", uri,
            "--video", str(folder / "out.mp4"), "--records", str(folder / "out.jsonl"),
            "--summary", str(folder / "summary.json"), "--threads", str(threads)]  # fmt: skip
    return subprocess.run(args, cwd=harness.ROOT, capture_output=True, text=True, timeout=60)


def _frames(path: Path) -> list[av.VideoFrame]:
    with av.open(str(path)) as container:
        return list(container.decode(container.streams.video[0]))


def _sharpness(image: np.ndarray, box: list[float]) -> float:
    x, y, w, h = (int(v) for v in box)
    grey = cv2.cvtColor(image[y : y + h, x : x + w], cv2.COLOR_BGR2GRAY)
    return float(cv2.Laplacian(grey, cv2.CV_64F).var())


@pytest.mark.parametrize("threads", [1, 2])
def test_the_plain_program_puts_out_every_frame_once_in_order_at_its_time_with_the_faces_blurred(
    tiny_job: Path, tmp_path: Path, threads: int
) -> None:
    clip = tiny_job.parent / "face.mp4"
    done = _peer(_config_json(tiny_job, tmp_path), str(clip), tmp_path, threads)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    source, written = _frames(clip), _frames(tmp_path / "out.mp4")
    assert [r["seq"] for r in records] == list(range(12))
    assert [r["pts"] for r in records] == [f.pts for f in source]  # in the clip's order, each once
    assert [float(f.pts * f.time_base) for f in written] == [float(f.pts * f.time_base) for f in source]
    summary = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert summary["frames"] == 12 and summary["errors"] == []
    assert summary["began"] <= summary["first_out"] <= summary["ended"]
    faced = [(i, r["detections"][0]["box"]) for i, r in enumerate(records) if r["detections"]]
    assert faced, "the clip shows a face: the model finds it"
    index, box = faced[0]
    before = _sharpness(source[index].to_ndarray(format="bgr24"), box)
    after = _sharpness(written[index].to_ndarray(format="bgr24"), box)
    assert after < before / 3  # blurred, not only re-encoded


def test_a_clip_that_cannot_be_read_fails_the_program_in_one_line(tiny_job: Path, tmp_path: Path) -> None:
    done = _peer(_config_json(tiny_job, tmp_path), str(tmp_path / "missing.mp4"), tmp_path)
    assert done.returncode != 0
    assert "missing.mp4" in done.stderr.strip().splitlines()[-1]


def test_run_file_peer_times_the_program_and_says_why_it_failed(tiny_job: Path, tmp_path: Path) -> None:
    config = load_config(str(tiny_job))
    ran = file_peer.run_file_peer(config, str(tiny_job.parent / "face.mp4"), tmp_path / "ok", 2)
    assert ran["frames"] == ran["lines"] == 12 and ran["threads"] == 2
    assert 0 < ran["interpreter_s"] < ran["startup_s"] < ran["wall_s"]
    assert ran["cpu_s"] > 0 and ran["ms_per_frame"] == pytest.approx(ran["cpu_s"] * 1000 / 12)
    with pytest.raises(RuntimeError, match=r"bench budget file peer: exit 1: .*missing\.mp4"):
        file_peer.run_file_peer(config, str(tmp_path / "missing.mp4"), tmp_path / "bad", 1)


def test_the_program_needs_a_model_thread(tmp_path: Path) -> None:
    done = _peer(tmp_path / "c.json", "u", tmp_path, threads=0)
    assert done.returncode == 2 and "--threads 0: at least 1" in done.stderr


def test_the_file_peer_s_share_sets_it_against_the_limit_the_work_and_framewire() -> None:
    share = {"limit_wall_s": 4.0, "work_ms_per_frame": 10.0, "framewire_ms_per_frame": 14.0, "wall_s": 6.0}
    got = budget_file.file_peer_share(share, {"ms_per_frame": 16.0, "wall_s": 8.0, "startup_s": 1.0})
    assert got == pytest.approx({
        "peer_ms_per_frame": 16.0, "peer_cpu_ratio": 1.6, "peer_wall_s": 8.0, "peer_wall_ratio": 2.0,
        "peer_startup_s": 1.0, "peer_after_startup_ratio": 1.75, "framewire_vs_peer_cpu": 0.875,
        "framewire_vs_peer_wall": 0.75,
    })  # fmt: skip
    assert budget_file.file_peer_share(share, {"ms_per_frame": None, "wall_s": 8.0, "startup_s": None})[
        "peer_after_startup_ratio"] is None  # fmt: skip


def test_each_mode_takes_its_own_peer_and_refuses_the_other_s() -> None:
    assert budget.peer_layout(None, live=True) is None and budget.peer_layout(None, live=False) is None
    assert budget.peer_layout(budget.PEER_DEFAULT, live=True) == "stream"
    assert budget.peer_layout(budget.PEER_DEFAULT, live=False) == "threads"
    assert budget.peer_layout("core", live=True) == "core" and budget.peer_layout("threads", live=False) == "threads"
    with pytest.raises(UsageError, match="--peer threads: the file job's plain program; live layouts: stream, core, pool"):
        budget.peer_layout("threads", live=True)
    with pytest.raises(UsageError, match="--peer core: a layout of the live job .--streams N.; the file job's"):
        budget.peer_layout("core", live=False)


def test_a_live_layout_for_the_file_job_is_refused_in_one_line(tiny_job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "budget", "-c", str(tiny_job), "--peer", "core"]) == 2
    (said,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert "bench budget --peer core: a layout of the live job (--streams N)" in said


def test_bench_budget_runs_the_plain_program_beside_the_file_job(
    tiny_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "budget.json"
    assert cli.main(["bench", "budget", "-c", str(tiny_job), "--min-frames", "24", "--peer", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    (one,) = result["runs"]
    assert one["peer"]["frames"] == one["framewire"]["frames"] == 24  # the same looped clip
    share = result["share"]
    # the JSON's figures are rounded to 3 places, and this tiny job's limit is about 40 ms
    assert share["peer_wall_ratio"] == pytest.approx(one["peer"]["wall_s"] / share["limit_wall_s"], rel=0.05)
    assert share["framewire_vs_peer_wall"] == pytest.approx(share["wall_s"] / one["peer"]["wall_s"], rel=0.02)
    table = capsys.readouterr().out
    assert "plain program, threads: wall / limit" in table and "framewire / plain program, threads (wall)" in table


@pytest.mark.parametrize("where", ["at its first picture", "when it closes the file"])
def test_a_writer_that_fails_never_blocks_the_main_thread(tmp_path: Path, where: str) -> None:
    from fractions import Fraction

    from framewire.components import VideoFileOutput

    pictures: queue.Queue[object] = queue.Queue(2)
    errors: list[str] = []
    info = {"rate": Fraction(25), "time_base": Fraction(1, 25), "width": 16, "height": 16}
    if where == "at its first picture":  # OpenCV's 4:2:0 conversion needs even sides: it drains the rest
        target, side = tmp_path / "out.mp4", 15
    else:  # FFmpeg opens the file on its first write: the error comes after END
        target, side = tmp_path / "missing" / "out.mp4", 16
    video = VideoFileOutput(kind="video_file", path=str(target))
    writer = threading.Thread(target=file_peer.write, args=(str(target), video, info, pictures, errors))
    writer.start()
    for pts in range(10):  # more than the queue holds: a put would block on a writer that stopped
        pictures.put((np.zeros((side, side, 3), np.uint8), pts), timeout=10)
    pictures.put(file_peer.END, timeout=10)
    writer.join(10)
    assert not writer.is_alive()
    (error,) = errors
    assert error.startswith(f"writing {target}: ") and "\n" not in error  # one line, whatever the library said
