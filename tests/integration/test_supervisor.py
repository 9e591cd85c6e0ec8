"""The supervisor with real spawned processes over ipc://, model-free stages (tests/support/fakes.py)."""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from framewire.pipeline.errors import JobFailed
from framewire.pipeline.plan import HttpSettings, Plan, Report, SourcePlan
from framewire.pipeline.stagespec import StageSpec
from framewire.pipeline.run.supervisor import Supervisor
from tests.support import fakes

pytestmark = pytest.mark.timeout(120)


def make_plan(out: Path, sources: dict[str, int], *, infer_workers: int = 2, **overrides: Any) -> Plan:
    middle = overrides.pop(
        "middle",
        (
            StageSpec("preprocess", 1, functools.partial(fakes.passthrough, "pre"), skips_stale=True),
            StageSpec(
                "infer", infer_workers, functools.partial(fakes.passthrough, "inf", 0.01),
                sheds=True, skips_stale=True,
            ),
            StageSpec("postprocess", 1, functools.partial(fakes.passthrough, "post")),
        ),
    )
    source_kwargs = overrides.pop("source_kwargs", {})
    output = overrides.pop("output", functools.partial(fakes.sink, str(out)))
    return Plan(
        stages=(*middle, StageSpec("out", 1, output, writes_output=True)),
        sources=tuple(
            SourcePlan(sid, functools.partial(fakes.source, sid, n, **source_kwargs.get(sid, {})))
            for sid, n in sources.items()
        ),
        slot_layout=fakes.layout,
        ipc_dir=None,
        **overrides,
    )


def records(out: Path, source_id: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / f"{source_id}.jsonl").read_text().splitlines()]


def assert_complete(out: Path, source_id: str, frames: int, stages: list[str] | None = None) -> None:
    recs = records(out, source_id)
    assert [r["seq"] for r in recs] == list(range(frames))
    assert [r["pixel"] for r in recs] == [i % 251 for i in range(frames)]
    if stages is not None:
        assert all(r["meta"]["seen"] == stages for r in recs)
    assert (out / f"{source_id}.closed").exists()


def kill_when(done_at: int, title: str) -> tuple[Any, list[int]]:
    killed: list[int] = []

    def progress(done: int, total: int | None) -> None:
        if done >= done_at and not killed:
            for child in psutil.Process().children(recursive=True):
                try:
                    if " ".join(child.cmdline()).strip().startswith(f"framewire: {title}"):
                        os.kill(child.pid, signal.SIGKILL)
                        killed.append(child.pid)
                        return
                except psutil.Error:
                    continue

    return progress, killed


def test_several_sources_in_order_with_parallel_workers(tmp_path: Path) -> None:
    report = Supervisor(make_plan(tmp_path, {"a": 120, "b": 60, "c": 1}, infer_workers=3)).run()
    assert report.exit_code == 0, report.error
    assert report.frames == {"a": 120, "b": 60, "c": 1}
    for sid, n in {"a": 120, "b": 60, "c": 1}.items():
        assert_complete(tmp_path, sid, n, ["pre", "inf", "post"])


def test_slots_bound_frames_in_flight(tmp_path: Path) -> None:
    report = Supervisor(make_plan(tmp_path, {"a": 80}, slots_per_source=2)).run()
    assert report.exit_code == 0, report.error
    assert_complete(tmp_path, "a", 80)


@pytest.mark.parametrize("stage", ["preprocess[0]", "infer[0]", "infer[1]", "postprocess[0]"])
def test_sigkill_of_a_middle_worker_loses_nothing(tmp_path: Path, stage: str) -> None:
    progress, killed = kill_when(25, stage)
    report = Supervisor(make_plan(tmp_path, {"a": 150, "b": 40}), progress=progress).run()
    assert killed, "the worker was not found"
    assert report.exit_code == 0, report.error
    assert sum(report.restarts.values()) == 1
    assert_complete(tmp_path, "a", 150, ["pre", "inf", "post"])
    assert_complete(tmp_path, "b", 40, ["pre", "inf", "post"])


def test_death_of_an_output_ends_the_job_with_an_error(tmp_path: Path) -> None:
    progress, killed = kill_when(10, "output")
    plan = make_plan(tmp_path, {"a": 2000}, source_kwargs={"a": {"delay_s": 0.002}})
    started = time.monotonic()
    report = Supervisor(plan, progress=progress).run()
    assert killed
    assert report.exit_code == 1
    assert report.error == "out worker died (killed by SIGKILL)" or "died (killed by SIGKILL)" in (report.error or "")
    assert time.monotonic() - started < 30


def test_a_hung_worker_is_killed_and_restarted_and_loses_nothing(tmp_path: Path) -> None:
    middle = (
        StageSpec("preprocess", 1, functools.partial(fakes.passthrough, "pre"), skips_stale=True),
        StageSpec(
            "infer", 2, functools.partial(fakes.HangsOnce, "inf", 30, str(tmp_path / "hung")),
            sheds=True, skips_stale=True,
        ),
        StageSpec("postprocess", 1, functools.partial(fakes.passthrough, "post")),
    )
    supervisor = Supervisor(make_plan(tmp_path, {"a": 80}, middle=middle, stall_timeout_s=1.0))
    started = time.monotonic()
    report = supervisor.run()
    assert (tmp_path / "hung").exists()  # it did hang
    assert report.exit_code == 0, report.error
    assert report.restarts == {"infer": 1}
    assert time.monotonic() - started < 30
    assert_complete(tmp_path, "a", 80, ["pre", "inf", "post"])
    stalls = supervisor.metrics.values("framewire_worker_stalls_total")
    assert list(stalls.values()) == [1.0]


def test_a_hung_output_ends_the_job_with_one_line(tmp_path: Path) -> None:
    hanging = functools.partial(fakes.HangingSink, str(tmp_path), 5)
    plan = make_plan(tmp_path, {"a": 40}, stall_timeout_s=1.0, output=hanging)
    started = time.monotonic()
    report = Supervisor(plan).run()
    assert report.exit_code == 1
    assert report.error is not None and report.error.startswith("output[0] worker died (hung: held frame 5 of source a for ")
    assert report.error.endswith("s, over stages.stall_timeout_s)")
    assert time.monotonic() - started < 30


def test_death_of_decode_ends_that_source_and_keeps_its_frames(tmp_path: Path) -> None:
    progress, killed = kill_when(20, "decode[0]")
    plan = make_plan(tmp_path, {"a": 5000, "b": 50}, source_kwargs={"a": {"delay_s": 0.002}})
    report = Supervisor(plan, progress=progress).run()
    assert killed
    assert report.exit_code == 1
    assert "decode worker for source a died" in (report.error or "")
    recs = records(tmp_path, "a")
    assert [r["seq"] for r in recs] == list(range(len(recs))) and len(recs) == report.frames["a"]
    assert_complete(tmp_path, "b", 50)


def test_a_failing_source_does_not_stop_the_others(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, {"bad": 100, "good": 70}, source_kwargs={"bad": {"fail_at": 30}})
    report = Supervisor(plan).run()
    assert report.exit_code == 1
    assert report.error == "RuntimeError: source bad: synthetic failure at frame 30"
    assert_complete(tmp_path, "bad", 30)
    assert_complete(tmp_path, "good", 70)


def test_start_up_failure_is_fatal_with_its_message(tmp_path: Path) -> None:
    middle = (StageSpec("infer", 2, fakes.failing_start, sheds=True, skips_stale=True),)
    started = time.monotonic()
    report = Supervisor(make_plan(tmp_path, {"a": 10}, middle=middle)).run()
    assert report.exit_code == 1
    assert report.error == "model.path: fake engine cannot load broken.onnx"
    assert time.monotonic() - started < 30


def test_a_frame_that_fails_is_passed_on_and_counted(tmp_path: Path) -> None:
    middle = (StageSpec("postprocess", 1, functools.partial(fakes.passthrough, "post", 0.0, 7)),)
    report = Supervisor(make_plan(tmp_path, {"a": 20}, middle=middle)).run()
    assert report.exit_code == 1 and report.failed == {"a": 1}
    recs = records(tmp_path, "a")
    assert [r["seq"] for r in recs] == list(range(20))
    assert recs[7]["error"] == "postprocess: ValueError: post refuses frame 7"
    assert recs[6]["error"] is None


def test_fail_policy_ends_the_job(tmp_path: Path) -> None:
    middle = (StageSpec("postprocess", 1, functools.partial(fakes.passthrough, "post", 0.0, 7)),)
    report = Supervisor(make_plan(tmp_path, {"a": 20}, middle=middle, skip_failed_frames=False)).run()
    assert report.exit_code == 1
    assert "postprocess failed on source a frame 7" in (report.error or "")


def test_stop_request_drains_and_closes(tmp_path: Path) -> None:
    holder: dict[str, Any] = {}

    def progress(done: int, total: int | None) -> None:
        # Both sources mid-stream: under load the fast one alone could reach 15 before the slow
        # one's first frame (seen with both cores kept busy).
        if done >= 15 and not holder.get("asked") and all((tmp_path / f"{s}.jsonl").exists() for s in "ab"):
            holder["asked"] = True
            holder["sup"].request_stop()

    plan = make_plan(tmp_path, {"a": 100000, "b": 100000}, source_kwargs={"a": {"delay_s": 0.001}})
    sup = Supervisor(plan, progress=progress)
    holder["sup"] = sup
    started = time.monotonic()
    report: Report = sup.run()
    assert report.exit_code == 0, report.error
    assert report.stopped
    assert time.monotonic() - started < 20
    for sid in ("a", "b"):
        recs = records(tmp_path, sid)
        assert [r["seq"] for r in recs] == list(range(len(recs)))
        assert (tmp_path / f"{sid}.closed").exists()


def test_dynamic_batching_across_sources_keeps_every_frame_in_order(tmp_path: Path) -> None:
    middle = (
        StageSpec("preprocess", 1, functools.partial(fakes.passthrough, "pre"), skips_stale=True),
        StageSpec("infer", 1, functools.partial(fakes.batching, "inf", 4, 20.0), sheds=True, skips_stale=True,
                  credits=8),
    )
    plan = make_plan(tmp_path, {"a": 60, "b": 60, "c": 60}, middle=middle)
    report = Supervisor(plan).run()
    assert report.exit_code == 0, report.error
    sizes = []
    for sid in ("a", "b", "c"):
        assert_complete(tmp_path, sid, 60, ["pre", "inf"])
        sizes += [r["meta"]["batch_seen"] for r in records(tmp_path, sid)]
    assert max(sizes) == 4 and all(1 <= s <= 4 for s in sizes)
    assert sum(sizes) / len(sizes) > 2  # three sources feed one slow worker: batches fill


def test_each_source_reports_the_time_it_ran_not_the_jobs(tmp_path: Path) -> None:
    """Issue 39: the summary's only rate was the job's frames over the job's time, idle time and
    other sources' time included. Each source's time runs from its first frame in to its last frame
    written: `slow` sleeps 50 ms before each of its frames after the first, so its 40 frames take
    at least 1.95 s; `quick` is done long before the job is."""
    plan = make_plan(tmp_path, {"quick": 5, "slow": 40}, source_kwargs={"slow": {"delay_s": 0.05}})
    report = Supervisor(plan).run()
    assert report.exit_code == 0, report.error
    assert report.frames == {"quick": 5, "slow": 40}
    assert set(report.active_s) == {"quick", "slow"}
    assert report.active_s["slow"] >= 39 * 0.05
    assert 0 < report.active_s["quick"] < report.active_s["slow"] <= report.elapsed_s


def test_a_stage_that_keeps_per_source_state_gets_each_source_in_order_on_one_worker(tmp_path: Path) -> None:
    # Two infer workers that sleep at random put frames out of order; the tracker-like stage after
    # them still sees each source's frames one after the other, each source on one of its workers.
    middle = (
        StageSpec("infer", 2, functools.partial(fakes.passthrough, "inf", 0.01),
                  sheds=True, skips_stale=True),
        StageSpec("composite", 2, functools.partial(fakes.ordered, "track", str(tmp_path)), ordered=True),
    )
    sources = {"a": 60, "b": 60, "c": 60}
    report = Supervisor(make_plan(tmp_path, sources, middle=middle)).run()
    assert report.exit_code == 0, report.error
    for source, frames in sources.items():
        assert_complete(tmp_path, source, frames, ["inf", "track"])
        seen = [r["meta"]["track"] for r in records(tmp_path, source)]
        assert all(s["in_order"] for s in seen)
        assert len({s["worker"] for s in seen}) == 1
        assert len(list(tmp_path.glob(f"{source}.flushed.*"))) == 1  # its worker let go of it at the end


def test_when_the_worker_of_a_source_dies_the_source_moves_on_in_order(tmp_path: Path) -> None:
    tracker = functools.partial(fakes.ordered, "track", str(tmp_path), 0.005)
    middle = (StageSpec("composite", 2, tracker, ordered=True),)
    progress, killed = kill_when(30, "composite[")
    supervisor = Supervisor(make_plan(tmp_path, {"a": 120}, middle=middle), progress)
    report = supervisor.run()
    assert killed and report.exit_code == 0, report.error
    assert report.restarts == {"composite": 1}
    assert_complete(tmp_path, "a", 120, ["track"])
    assert all(r["meta"]["track"]["in_order"] for r in records(tmp_path, "a"))
    assert supervisor.metrics.values("framewire_source_moves_total") == {(("stage", "composite"),): 1.0}


_KILLED_JOB = """
import sys
from pathlib import Path
from framewire.pipeline.run.supervisor import Supervisor
from tests.integration.test_supervisor import make_plan
Supervisor(make_plan(Path(sys.argv[1]), {"a": 5000}, source_kwargs={"a": {"delay_s": 0.01}})).run()
"""


def _segments(prefix: str) -> list[str]:
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(prefix))


def test_the_workers_of_a_killed_supervisor_remove_its_shared_memory(tmp_path: Path) -> None:
    """SIGKILL leaves the supervisor no chance to unlink its frame pool: the worker that notices it
    is gone does, and every worker exits."""
    root = Path(__file__).resolve().parents[2]
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:
        job = subprocess.Popen([sys.executable, "-c", _KILLED_JOB, str(tmp_path)], cwd=root,
                               stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip
    prefix = f"framewire-{job.pid}-"
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "a.jsonl").exists():  # frames flow: the pool exists, every worker is up
            assert job.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.05)
        assert _segments(prefix)
        processes = psutil.Process(job.pid).children(recursive=True)  # the fork server and the workers
        titles = sorted(t for t in (" ".join(p.cmdline()).strip() for p in processes) if t.startswith("framewire: "))
        assert {"framewire: decode[0]", "framewire: infer[0]", "framewire: output[0]"} <= set(titles), titles
        job.kill()
        job.wait()
        _, alive = psutil.wait_procs(processes, timeout=30)
        assert not alive, [p.cmdline() for p in alive]
        assert _segments(prefix) == []
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        for name in _segments(prefix):
            os.unlink(os.path.join("/dev/shm", name))


@pytest.mark.parametrize("where", ["outputs.0.endpoint", "http.port"])
def test_an_address_in_use_fails_the_supervisor_before_any_process_starts(tmp_path: Path, where: str) -> None:
    """Built whole: the constructor binds (or, for what a worker binds, checks) every address first."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        overrides: dict[str, Any] = {
            "outputs.0.endpoint": {"binds": (("outputs.0.endpoint", f"tcp://127.0.0.1:{port}"),)},
            "http.port": {"http": HttpSettings(port=port)},
        }[where]
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        started = time.monotonic()
        with pytest.raises(JobFailed, match=f"^{where}: cannot .*127.0.0.1:{port}") as failed:
            Supervisor(make_plan(tmp_path, {"a": 5}, **overrides))
        assert time.monotonic() - started < 2.0
    assert failed.value.exit_code == 1
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_the_hub_turns_in_its_own_thread_and_a_signal_to_the_main_thread_drains_it(
    tmp_path: Path,
) -> None:
    """`framewire.start`'s hub runs in the `framewire-hub` thread, where no signal handler can be
    installed, and leaves the handlers alone; the command line's, installed on the main thread
    (`stop_on_signals`), hands SIGTERM over: the job drains, every output closes, the handlers
    come back."""
    import threading

    from framewire.runner import Job, stop_on_signals

    seen: list[tuple[str, Any]] = []

    def progress(done: int, total: int | None) -> None:
        if done >= 10 and not seen:
            seen.append((threading.current_thread().name, signal.getsignal(signal.SIGTERM)))
            os.kill(os.getpid(), signal.SIGTERM)  # to this process: only the main thread's handler runs it

    before = signal.getsignal(signal.SIGTERM)
    job = Job(make_plan(tmp_path, {"a": 100000}, source_kwargs={"a": {"delay_s": 0.001}}), progress)
    with stop_on_signals(job):
        installed = signal.getsignal(signal.SIGTERM)
        report = job.wait(60)
    assert signal.getsignal(signal.SIGTERM) is before
    assert seen == [("framewire-hub", installed)] and installed is not before
    assert report.exit_code == 0, report.error
    assert report.stopped
    recs = records(tmp_path, "a")
    assert [r["seq"] for r in recs] == list(range(len(recs))) and len(recs) >= 10
    assert (tmp_path / "a.closed").exists()
