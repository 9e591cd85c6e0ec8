"""The live layout with real processes: the infer workers read their share of the live sources themselves
(stages.layout: live). Each guarantee of the default layout, held here too: the drop policies and their
counts, per-source order, a failing source alone, a worker SIGKILLed (its sources back within 2 s, what
it held counted), a stop that drains, and a file source beside them with its own decode worker."""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from framewire.pipeline.plan import HttpSettings, Plan, Policy, Report, SourceOptions, SourcePlan
from framewire.pipeline.run.supervisor import Supervisor
from framewire.pipeline.stagespec import StageSpec
from framewire.stages.live_layout import live_layout, live_sources
from tests.support import fakes, live_fakes
from tests.support.live_fakes import records

pytestmark = pytest.mark.timeout(120)

TOKEN = "s3cret-token"


def plan(out: Path, sources: list[SourcePlan], *, workers: int = 1, infer_s: float = 0.0, **more: Any) -> Plan:
    middle = [
        StageSpec("preprocess", 1, functools.partial(fakes.passthrough, "pre"), skips_stale=True),
        StageSpec("infer", workers, functools.partial(live_fakes.slow, "inf", infer_s), sheds=True, skips_stale=True),
        StageSpec("postprocess", 1, functools.partial(fakes.passthrough, "post")),
        StageSpec("out", 1, functools.partial(live_fakes.timed_sink, str(out)), writes_output=True),
    ]
    stages = live_layout(middle, live_sources(sources))
    return Plan(stages=tuple(stages), sources=tuple(sources), slot_layout=fakes.layout, **more)


def live(source_id: str, frames: int, policy: str = "drop_oldest", **kwargs: Any) -> SourcePlan:
    factory = functools.partial(fakes.source, source_id, frames, delay_s=kwargs.pop("delay_s", 0.01), **kwargs)
    return SourcePlan(source_id, factory, SourceOptions(policy=Policy(policy)))


def test_the_model_stage_reads_the_live_sources_and_a_file_keeps_its_decode_worker(tmp_path: Path) -> None:
    sources = [live("cam", 60, delay_s=0.02), SourcePlan("file", functools.partial(fakes.source, "file", 40))]
    job = plan(tmp_path, sources)
    assert job.stages[0].decodes_sources and job.stages[0].members == ("preprocess", "infer", "postprocess")
    titles: set[str] = set()

    def watch(done: int, total: int | None) -> None:
        for child in psutil.Process().children(recursive=True):
            try:
                titles.add(" ".join(child.cmdline()))
            except psutil.Error:  # it ended meanwhile
                continue

    report = Supervisor(job, progress=watch).run()
    assert report.exit_code == 0, report.error
    assert report.frames["file"] == 40 and report.dropped["file"] == 0
    recs = records(tmp_path, "cam")
    assert len(recs) + report.dropped["cam"] == 60  # every frame read is output or counted
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    assert all(r["ts"]["preprocess"] and r["ts"]["postprocess"] for r in recs)  # the fused members ran on each
    assert any("framewire: decode" in t for t in titles)  # the file's
    assert sum("framewire: decode" in t for t in titles) == 1  # and only the file's
    assert (tmp_path / "cam.closed").exists() and (tmp_path / "file.closed").exists()


@pytest.mark.parametrize("policy", ["drop_oldest", "drop_newest"])
def test_a_slow_model_drops_at_the_source_by_its_policy_and_counts_every_drop(tmp_path: Path, policy: str) -> None:
    # 100 frames a second, 40 ms a frame for the model: most frames must go, in the worker.
    report = Supervisor(plan(tmp_path, [live("cam", 100, policy)], infer_s=0.04)).run()
    assert report.exit_code == 0, report.error
    recs = records(tmp_path, "cam")
    assert report.dropped["cam"] > 100 // 3
    assert len(recs) + report.dropped["cam"] == 100
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    pixels = [r["pixel"] for r in recs]
    assert all(b > a for a, b in zip(pixels, pixels[1:]))  # later frames only, in order
    waits = sorted(r["at"] - r["ts"]["decode"][0] for r in recs)
    assert waits[int(0.99 * (len(waits) - 1))] < 0.4  # one frame waits a source: a model run or two


def test_a_failing_source_leaves_the_other_sources_of_its_worker_reading(tmp_path: Path) -> None:
    sources = [live("bad", 100, fail_at=30), live("good", 70)]
    report = Supervisor(plan(tmp_path, sources)).run()
    assert report.exit_code == 1
    assert report.error == "RuntimeError: source bad: synthetic failure at frame 30"
    assert len(records(tmp_path, "bad")) + report.dropped["bad"] == 30
    good = records(tmp_path, "good")
    assert len(good) + report.dropped["good"] == 70 and good[-1]["pixel"] >= 60
    assert (tmp_path / "bad.closed").exists() and (tmp_path / "good.closed").exists()


def _kill_once(title: str, after_s: float) -> tuple[threading.Thread, list[float]]:
    killed: list[float] = []

    def kill() -> None:
        deadline = time.monotonic() + 60
        started: float | None = None
        while time.monotonic() < deadline and not killed:
            for child in psutil.Process().children(recursive=True):
                try:
                    if " ".join(child.cmdline()).strip() != f"framewire: {title}":
                        continue
                except psutil.Error:
                    continue
                started = started or time.monotonic()
                if time.monotonic() - started >= after_s:
                    os.kill(child.pid, signal.SIGKILL)
                    killed.append(time.time())
                    return
            time.sleep(0.05)

    return threading.Thread(target=kill, daemon=True), killed


def test_a_sigkilled_worker_loses_only_what_it_held_and_its_sources_are_back_within_two_seconds(
    tmp_path: Path,
) -> None:
    # Four cameras of 4 s at 50 fps on two workers; worker 0 (cam0 and cam2) is killed 1.5 s in.
    sources = [live(f"cam{i}", 200, delay_s=0.02) for i in range(4)]
    job = plan(tmp_path, sources, workers=2, restart_backoff_s=(0.1, 1.0))
    assert job.stages[0].shares == (("cam0", "cam2"), ("cam1", "cam3"))
    killer, killed = _kill_once("infer[0]", 1.5)
    killer.start()
    report: Report = Supervisor(job).run()
    killer.join(10)
    assert killed, "infer[0] was not found"
    assert report.exit_code == 0, report.error
    assert report.restarts == {"infer": 1}
    for sid in ("cam0", "cam2"):  # read again from the start by the restarted worker: seqs go on
        recs = records(tmp_path, sid)
        assert [r["seq"] for r in recs] == list(range(len(recs)))
        at = [r["at"] for r in recs]
        gap = max(b - a for a, b in zip(at, at[1:]))
        assert gap < 2.0, f"{sid} was gone {gap:.2f} s"
        assert any(t > killed[0] for t in at)
    for sid in ("cam1", "cam3"):  # the other worker's: untouched
        recs = records(tmp_path, sid)
        pixels = [r["pixel"] for r in recs]
        assert all(b > a for a, b in zip(pixels, pixels[1:]))
        assert len(recs) + report.dropped[sid] == 200


def test_a_stop_drains_the_live_sources_and_closes_them(tmp_path: Path) -> None:
    supervisor = Supervisor(plan(tmp_path, [live("cam0", 5000), live("cam1", 5000)], workers=2))

    def stop_soon() -> None:
        deadline = time.monotonic() + 60
        while len(records(tmp_path, "cam1")) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        supervisor.request_stop()

    threading.Thread(target=stop_soon, daemon=True).start()
    report = supervisor.run()
    assert report.exit_code == 0, report.error
    assert report.stopped
    for sid in ("cam0", "cam1"):
        recs = records(tmp_path, sid)
        assert [r["seq"] for r in recs] == list(range(len(recs))) and len(recs) == report.frames[sid]
        assert (tmp_path / f"{sid}.closed").exists()


def test_sources_added_at_run_time_are_shared_out_and_one_moves_when_the_shares_grow_uneven(
    tmp_path: Path,
) -> None:
    from tests.integration.test_control import Running, request, wait_for

    job = plan(tmp_path, [], workers=2, http=HttpSettings(port=0, token=TOKEN, keep_running=True),
               make_source=fakes.make_source_plan)
    lines = lambda sid: len(records(tmp_path, sid))  # noqa: E731
    with Running(job) as running:
        running.wait_ready()
        for sid in ("a", "b", "c", "d"):
            body = {"id": sid, "frames": 10**6, "delay_s": 0.01, "policy": "drop_oldest"}
            assert request(running.url + "/sources", "POST", body)[0] == 201
        live = running.supervisor._hub.live
        assert live is not None and live.shares == (("a", "c"), ("b", "d"))
        wait_for(lambda: all(lines(sid) > 5 for sid in "abcd"))
        for sid in ("b", "d"):  # worker 1 empties: c moves there
            assert request(running.url + f"/sources/{sid}", "DELETE")[0] == 202
        wait_for(lambda: live.shares == (("a",), ("c",)) and not live.moving)
        assert live.moves == 1
        moved_at = lines("c")
        wait_for(lambda: lines("c") > moved_at + 20)  # it goes on, on worker 1
        sources = {s["id"]: s for s in request(running.url + "/sources")[1]["sources"]}
        assert sources["c"]["state"] == "running" and sources["a"]["state"] == "running"
    for sid in ("a", "c"):
        recs = records(tmp_path, sid)
        assert [r["seq"] for r in recs] == list(range(len(recs)))  # in order across the move


def test_a_hung_worker_is_killed_and_restarted_with_its_sources(tmp_path: Path) -> None:
    # Its frames never pass through the hub's hands: it is known to live by its beat, once a second.
    sources = [live("cam", 300, delay_s=0.01)]
    middle = [
        StageSpec("infer", 1, functools.partial(fakes.HangsOnce, "inf", 30, str(tmp_path / "hung")),
                  sheds=True, skips_stale=True),
        StageSpec("out", 1, functools.partial(live_fakes.timed_sink, str(tmp_path)), writes_output=True),
    ]
    job = Plan(stages=tuple(live_layout(middle, live_sources(sources))), sources=tuple(sources),
               slot_layout=fakes.layout, stall_timeout_s=1.5, restart_backoff_s=(0.1, 1.0))
    supervisor = Supervisor(job)
    report = supervisor.run()
    assert (tmp_path / "hung").exists()  # it did hang
    assert report.exit_code == 0, report.error
    assert report.restarts == {"infer": 1}
    assert list(supervisor.metrics.values("framewire_worker_stalls_total").values()) == [1.0]
    recs = records(tmp_path, "cam")
    assert [r["seq"] for r in recs] == list(range(len(recs))) and len(recs) > 40  # it went on after
