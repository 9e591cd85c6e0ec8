"""A file job SIGKILLed part-way and run again with `--resume`: every frame once in the JSONL, and a
recording that plays from the first frame to the last, as a user would see it with the real CLI."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.helpers import face_job, read_jsonl, run_cli, start_cli
from tests.support import clips

pytestmark = pytest.mark.timeout(180)

FRAMES = 150  # 6 s at 25 fps


def frames_written(jsonl: Path) -> int:
    return jsonl.read_bytes().count(b"\n") if jsonl.exists() else 0


def kill_at(args: list[str], jsonl: Path, frames: int, timeout: float = 120.0) -> None:
    """Run the CLI and SIGKILL its whole process group once the JSONL holds `frames` records."""
    proc = start_cli(*args)
    try:
        deadline = time.monotonic() + timeout
        while frames_written(jsonl) < frames:
            assert proc.poll() is None, f"the job ended before it was killed: {proc.communicate()[1][-2000:]}"
            assert time.monotonic() < deadline, "the job never reached the frame to kill it at"
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


def test_a_job_killed_at_60_percent_resumes_and_ends_with_every_frame_once(tmp_path: Path) -> None:
    clip = clips.make_clip(tmp_path / "in.mp4", frames=FRAMES, width=320, height=240)
    jsonl, video = tmp_path / "clip.jsonl", tmp_path / "clip.mp4"
    # Paced at its own 25 fps, so the kill lands near frame 90 whatever the machine's speed.
    kill_at(face_job(tmp_path, clip, "--set", "sources.0.realtime=true"), jsonl, int(FRAMES * 0.6))
    held = frames_written(jsonl)
    assert int(FRAMES * 0.6) <= held < FRAMES  # a torn last line at most beyond that

    done = run_cli(*face_job(tmp_path, clip, "--resume", "-v"))
    assert done.returncode == 0, done.stderr[-3000:]
    resumed_at = next(int(line.split("resuming at frame ")[1].split()[0])
                      for line in done.stderr.splitlines() if "resuming at frame " in line)  # fmt: skip
    assert 0 < resumed_at <= held and f"clip: {FRAMES - resumed_at} frames" in done.stderr

    records = [r for r in read_jsonl(jsonl) if "seq" in r]
    assert [r["seq"] for r in records] == list(range(FRAMES))  # every frame exactly once, in order
    assert clips.count_frames(video) == FRAMES  # the recording plays from the first frame to the last
    assert clips.video_times(video) == pytest.approx([i / 25 for i in range(FRAMES)], abs=1e-3)
    assert [r["pts"] for r in records] == clips.video_pts(clip)


def test_resuming_a_finished_job_does_nothing_again(tmp_path: Path) -> None:
    clip = clips.make_clip(tmp_path / "in.mp4", frames=30)
    first = run_cli(*face_job(tmp_path, clip))
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_cli(*face_job(tmp_path, clip, "--resume"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "framewire: 0 frames" in again.stderr
    assert [r["seq"] for r in read_jsonl(tmp_path / "clip.jsonl") if "seq" in r] == list(range(30))
    assert clips.count_frames(tmp_path / "clip.mp4") == 30
