"""Killing workers, stopping the daemon, and what `ps` shows, with the real CLI."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests import clips
from tests.e2e.helpers import VIDEOS, face_job, read_jsonl, start_cli

pytestmark = pytest.mark.timeout(120)

STAGES = ["decode[0]", "preprocess[0]", "infer[0]", "infer[1]", "postprocess[0]", "composite[0]", "output[0]", "output[1]"]


def workers(proc: psutil.Process) -> dict[str, int]:
    """Process titles of the daemon's workers: `framewire: <stage>[<n>]` -> pid."""
    found = {}
    for child in proc.children(recursive=True):
        try:
            title = " ".join(child.cmdline()).strip()
        except psutil.Error:
            continue
        if title.startswith("framewire: "):
            found[title.removeprefix("framewire: ")] = child.pid
    return found


def wait_for(predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def realtime_job(tmp_path: Path, frames: int) -> list[str]:
    # Paced at 25 fps, so the job is still running when the test acts on it.
    return face_job(tmp_path, VIDEOS / "bikes.mp4", "--set", "sources.0.realtime=true",
                    "--set", f"sources.0.max_frames={frames}")  # fmt: skip


@pytest.mark.parametrize("victim", ["preprocess[0]", "infer[0]", "postprocess[0]", "composite[0]"])
def test_sigkill_of_a_worker_mid_job_loses_no_frame(tmp_path: Path, victim: str) -> None:
    proc = start_cli(*realtime_job(tmp_path, 150))
    daemon = psutil.Process(proc.pid)
    wait_for(lambda: all(s in workers(daemon) for s in STAGES))
    time.sleep(1.5)  # about 35 frames in
    os.kill(workers(daemon)[victim], signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "restarting it" in err and "1 worker restart(s)" in err
    records = read_jsonl(tmp_path / "clip.jsonl")
    assert [r["seq"] for r in records] == list(range(150))
    assert clips.count_frames(tmp_path / "clip.mp4") == 150


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_reading_drains_and_closes_outputs(tmp_path: Path, sig: signal.Signals) -> None:
    proc = start_cli(*realtime_job(tmp_path, 250))
    daemon = psutil.Process(proc.pid)
    wait_for(lambda: all(s in workers(daemon) for s in STAGES))
    time.sleep(1.5)
    started = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # Ctrl-C reaches the whole process group
    else:
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 5
    assert proc.returncode == 0, err
    assert "stopped early" in err
    records = read_jsonl(tmp_path / "clip.jsonl")
    assert 10 < len(records) < 250
    assert [r["seq"] for r in records] == list(range(len(records)))
    assert clips.count_frames(tmp_path / "clip.mp4") == len(records)  # a properly closed MP4
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in daemon.children(recursive=True)
                   if p.pid in workers(daemon).values()) if daemon.is_running() else True  # fmt: skip


def test_worker_processes_are_named_and_exit_with_the_daemon(tmp_path: Path) -> None:
    proc = start_cli(*realtime_job(tmp_path, 250))
    daemon = psutil.Process(proc.pid)
    wait_for(lambda: all(s in workers(daemon) for s in STAGES))
    pids = list(workers(daemon).values())
    assert set(workers(daemon)) == set(STAGES)
    os.kill(proc.pid, signal.SIGKILL)  # the supervisor dies without any cleanup
    proc.communicate(timeout=30)
    wait_for(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                             for p in pids), timeout=10)  # fmt: skip
