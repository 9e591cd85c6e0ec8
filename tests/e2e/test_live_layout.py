"""The live layout (`stages.layout: live`) with the real CLI and the default face job on a paced clip
under `drop_oldest`: no decode process, a SIGKILLed infer worker restarted with its source, and a
SIGTERM that drains and closes the outputs, as in the default layout (tests/e2e/test_signals.py)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.helpers import VIDEOS, face_job, read_jsonl
from tests.e2e.test_signals import daemon_of, wait_for, workers, written
from tests.support import clips

pytestmark = pytest.mark.timeout(120)

LIVE = ("--set", "stages.layout=live", "--set", "sources.0.policy=drop_oldest", "--set", "sources.0.realtime=true")


def live_job(tmp_path: Path, frames: int) -> list[str]:
    return face_job(tmp_path, VIDEOS / "bikes.mp4", *LIVE, "--set", f"sources.0.max_frames={frames}")


def test_a_sigkilled_infer_worker_comes_back_with_its_source_and_the_outputs_stay_whole(tmp_path: Path) -> None:
    with daemon_of(live_job(tmp_path, 150)) as (proc, daemon):
        wait_for(lambda: {"infer[0]", "infer[1]", "output[0]"} <= set(workers(daemon)))
        assert not any(name.startswith("decode") for name in workers(daemon))  # read where the model runs
        wait_for(lambda: written(tmp_path) >= 35)
        before = written(tmp_path)
        killed_at = time.monotonic()
        os.kill(workers(daemon)["infer[0]"], signal.SIGKILL)  # the clip is in worker 0's share
        wait_for(lambda: written(tmp_path) > before + 5, timeout=30)
        back_s = time.monotonic() - killed_at
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert "restarting it" in err and "1 worker restart(s)" in err
    assert back_s < 10  # frames again soon after (the 2 s of the fake-stage test, plus the model's start)
    records = read_jsonl(tmp_path / "clip.jsonl")
    assert [r["seq"] for r in records] == list(range(len(records)))  # in order, no gap, across the restart
    assert clips.count_frames(tmp_path / "clip.mp4") == len(records)  # one file, never cut


def test_sigterm_drains_the_live_source_and_closes_its_outputs(tmp_path: Path) -> None:
    with daemon_of(live_job(tmp_path, 250)) as (proc, daemon):
        wait_for(lambda: {"infer[0]", "infer[1]", "output[0]"} <= set(workers(daemon)))
        wait_for(lambda: written(tmp_path) >= 35)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert proc.returncode == 0, err
    assert "stopped early" in err and "died" not in err
    found = re.search(r"^clip: (\d+) frames in [\d.]+ s, [\d.]+ fps", err, re.M)
    assert found is not None, err
    records = read_jsonl(tmp_path / "clip.jsonl")
    assert 10 < len(records) == int(found.group(1)) < 250
    assert [r["seq"] for r in records] == list(range(len(records)))
    assert clips.count_frames(tmp_path / "clip.mp4") == len(records)
