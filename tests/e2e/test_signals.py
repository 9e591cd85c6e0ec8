"""Killing workers, stopping the daemon, and what `ps` shows, with the real CLI."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.e2e.helpers import VIDEOS, face_job, read_jsonl, start_cli
from tests.support import clips

pytestmark = pytest.mark.timeout(120)

# The default job fuses preprocess..composite into the infer workers and both outputs into one process;
# the split layout runs every stage in processes of its own.
SPLIT = ("--set", "stages.fuse=false", "--set", "stages.fuse_outputs=false")
STAGES = ["decode[0]", "preprocess[0]", "infer[0]", "infer[1]", "postprocess[0]", "composite[0]", "output[0]", "output[1]"]
FUSED_STAGES = ["decode[0]", "infer[0]", "infer[1]", "output[0]"]  # output[0] runs every output


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


def written(tmp_path: Path) -> int:
    """Frames the outputs have written so far (the JSONL is line-buffered)."""
    jsonl = tmp_path / "clip.jsonl"
    return jsonl.read_text().count("\n") if jsonl.exists() else 0


def realtime_job(tmp_path: Path, frames: int, *extra: str) -> list[str]:
    # Paced at 25 fps, so the job is still running when the test acts on it.
    return face_job(tmp_path, VIDEOS / "bikes.mp4", "--set", "sources.0.realtime=true",
                    "--set", f"sources.0.max_frames={frames}", *extra)  # fmt: skip


@contextlib.contextmanager
def daemon_of(args: list[str]) -> Iterator[tuple[subprocess.Popen[str], psutil.Process]]:
    """The CLI started on `args`; killed with its whole session if the test fails before it ends."""
    proc = start_cli(*args)
    try:
        yield proc, psutil.Process(proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


@pytest.mark.parametrize(
    ("victim", "layout", "stages"),
    [
        *((victim, SPLIT, STAGES) for victim in ["preprocess[0]", "infer[0]", "postprocess[0]", "composite[0]"]),
        ("infer[0]", (), FUSED_STAGES),  # an output is not restarted: its file would be cut (exit 1)
    ],
    ids=["preprocess", "infer", "postprocess", "composite", "fused-infer"],
)
def test_sigkill_of_a_worker_mid_job_loses_no_frame(
    tmp_path: Path, victim: str, layout: tuple[str, ...], stages: list[str]
) -> None:
    with daemon_of(realtime_job(tmp_path, 150, *layout)) as (proc, daemon):
        wait_for(lambda: all(s in workers(daemon) for s in stages))
        wait_for(lambda: written(tmp_path) >= 35)  # mid-job, however slow the start
        os.kill(workers(daemon)[victim], signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "restarting it" in err and "1 worker restart(s)" in err
    records = read_jsonl(tmp_path / "clip.jsonl")
    assert [r["seq"] for r in records] == list(range(150))
    assert clips.count_frames(tmp_path / "clip.mp4") == 150


@pytest.mark.parametrize(
    ("sig", "group"),
    [(signal.SIGTERM, False), (signal.SIGTERM, True), (signal.SIGINT, True)],
    ids=["sigterm-main", "sigterm-group", "sigint-group"],
)
def test_signal_stops_reading_drains_and_closes_outputs(tmp_path: Path, sig: signal.Signals, group: bool) -> None:
    """To the main process, or to the whole group as systemd (KillMode=control-group), `timeout`,
    `kill -TERM -PGID` and Ctrl-C send it: exit 0, and every frame read is in both files."""
    with daemon_of(realtime_job(tmp_path, 250)) as (proc, daemon):
        wait_for(lambda: all(s in workers(daemon) for s in FUSED_STAGES))
        wait_for(lambda: written(tmp_path) >= 35)  # the `10 <` below, however slow the start
        started = time.monotonic()
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert proc.returncode == 0, err
    assert "stopped early" in err and "died" not in err
    # "clip: N frames in T s, R fps" with no "(M read)": every frame the source delivered was written.
    read = int(re.search(r"^clip: (\d+) frames in [\d.]+ s, [\d.]+ fps$", err, re.M).group(1))  # type: ignore[union-attr]
    records = read_jsonl(tmp_path / "clip.jsonl")
    assert 10 < len(records) == read < 250
    assert [r["seq"] for r in records] == list(range(read))
    assert clips.count_frames(tmp_path / "clip.mp4") == read  # a properly closed MP4
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in daemon.children(recursive=True)
                   if p.pid in workers(daemon).values()) if daemon.is_running() else True  # fmt: skip


@pytest.mark.parametrize(("layout", "stages"), [(SPLIT, STAGES), ((), FUSED_STAGES)], ids=["split", "fused"])
def test_worker_processes_are_named_and_exit_with_the_daemon(
    tmp_path: Path, layout: tuple[str, ...], stages: list[str]
) -> None:
    with daemon_of(realtime_job(tmp_path, 250, *layout)) as (proc, daemon):
        wait_for(lambda: all(s in workers(daemon) for s in stages))
        pids = list(workers(daemon).values())
        assert set(workers(daemon)) == set(stages)
        os.kill(proc.pid, signal.SIGKILL)  # the supervisor dies without any cleanup
        proc.communicate(timeout=30)
    wait_for(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                             for p in pids), timeout=10)  # fmt: skip


def test_sigkill_of_the_whole_group_leaves_recordings_that_play(tmp_path: Path) -> None:
    """OOM killer, power loss, `docker kill`: everything up to the last fragment plays. The JSONL
    (line-buffered) says which frames the outputs had been given; the segments hold them all but the
    last second or so (a 1 s fragment, and what sat in the encoder)."""
    args = realtime_job(tmp_path, 250, "--set", "outputs.0.segment_s=2",
                        "--set", f"outputs.0.path={tmp_path}/{{source_id}}-{{index:02d}}.mp4")  # fmt: skip
    with daemon_of(args) as (proc, daemon):
        wait_for(lambda: len(list(tmp_path.glob("clip-*.mp4"))) >= 3)  # past 4 s
        time.sleep(0.6)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    written = [r["seq"] for r in read_jsonl(tmp_path / "clip.jsonl") if "seq" in r]
    assert written == list(range(len(written))) and 100 <= len(written) < 250
    segments = sorted(tmp_path.glob("clip-*.mp4"))
    counts = [clips.count_frames(p) for p in segments]  # PyAV decodes every one of them
    assert counts[:-1] == [50] * (len(segments) - 1)  # closed segments are whole
    played = sum(counts)
    assert len(written) - 2 * 25 <= played <= len(written)
    times = [t for p in segments for t in clips.video_times(p)]
    assert times == pytest.approx([i / 25 for i in range(played)], abs=1e-3)  # the first frames, in order
