"""/metrics, /healthz and the control API of a running supervisor (real processes, fake stages)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from framewire.config import JsonlOutput, VideoFileOutput
from framewire.pipeline.plan import HttpSettings, Plan, Report, SourcePlan
from framewire.pipeline.stagespec import StageSpec
from framewire.pipeline.run.supervisor import Supervisor
from framewire.stages.outputs.sinks import JsonlSink, VideoFileSink
from tests.support import clips, fakes

pytestmark = pytest.mark.timeout(180)

TOKEN = "s3cret-token"


def request(url: str, method: str = "GET", body: Any = None, token: str | None = TOKEN) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            raw = resp.read()
            status = resp.status
            kind = resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        raw, status, kind = err.read(), err.code, err.headers.get("Content-Type", "")
    return status, (json.loads(raw) if "json" in kind and raw else raw.decode())


class Running:
    """A supervisor in a background thread (signals are the main thread's: stop it over HTTP)."""

    def __init__(self, plan: Plan) -> None:
        self.supervisor = Supervisor(plan)
        self.report: Report | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.report = self.supervisor.run()

    def __enter__(self) -> Running:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not hasattr(self.supervisor, "http_url"):
            assert time.monotonic() < deadline and self.thread.is_alive()
            time.sleep(0.05)
        self.url = self.supervisor.http_url
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while request(self.url + "/healthz")[0] != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        if self.thread.is_alive():
            request(self.url + "/stop", "POST")
        self.thread.join(30)


def plan(tmp: Path, sources: dict[str, int], keep_running: bool = True) -> Plan:
    return Plan(
        stages=(
            StageSpec("preprocess", 1, functools.partial(fakes.passthrough, "pre"), skips_stale=True),
            StageSpec("infer", 1, functools.partial(fakes.passthrough, "inf"), sheds=True, skips_stale=True),
            StageSpec("out", 1, functools.partial(fakes.sink, str(tmp)), writes_output=True),
        ),
        sources=tuple(SourcePlan(s, functools.partial(fakes.source, s, n)) for s, n in sources.items()),
        slot_layout=fakes.layout,
        http=HttpSettings(port=0, token=TOKEN, keep_running=keep_running),
        make_source=fakes.make_source_plan,
    )


def wait_for(predicate: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_metrics_health_and_a_source_added_then_drained(tmp_path: Path) -> None:
    with Running(plan(tmp_path, {"a": 40})) as job:
        job.wait_ready()
        wait_for(lambda: (tmp_path / "a.closed").exists())
        status, text = request(job.url + "/metrics", token=None)
        assert status == 200
        families = {f.name: f for f in text_string_to_metric_families(text)}
        frames = {(s.labels["source"], s.labels["stage"]): s.value for s in families["framewire_frames"].samples}
        assert frames[("a", "output")] == 40 and frames[("a", "infer")] == 40
        assert families["framewire_stage_latency_seconds"].samples
        assert families["framewire_end_to_end_latency_seconds"].samples
        for name in ("framewire_queue_depth", "framewire_workers", "framewire_fps", "framewire_worker_restarts"):
            assert name in families

        assert request(job.url + "/sources", token=None)[0] == 401
        assert request(job.url + "/sources", token="wrong")[0] == 401
        status, body = request(job.url + "/sources", "POST", {"id": "b", "frames": 25})
        assert status == 201 and body["id"] == "b"
        assert request(job.url + "/sources", "POST", {"id": "b", "frames": 5})[0] == 409
        status, body = request(job.url + "/sources", "POST", {"frames": "many"})
        assert status == 400 and "source" in body["error"]
        wait_for(lambda: (tmp_path / "b.closed").exists())
        assert len((tmp_path / "b.jsonl").read_text().splitlines()) == 25
        # Ended sources stay listed, with their counts, and keep their metric series, until removed.
        wait_for(lambda: [s["state"] for s in request(job.url + "/sources")[1]["sources"]] == ["ended", "ended"])
        listed = {s["id"]: s for s in request(job.url + "/sources")[1]["sources"]}
        assert (listed["a"]["frames"], listed["a"]["read"], listed["b"]["frames"]) == (40, 40, 25)
        assert (listed["a"]["online"], listed["b"]["online"]) == (False, False)
        families = {f.name: f for f in text_string_to_metric_families(request(job.url + "/metrics", token=None)[1])}
        up = {s.labels["source"]: s.value for s in families["framewire_source_up"].samples}
        dropped = {(s.labels["source"], s.labels["reason"]) for s in families["framewire_dropped_frames"].samples}
        assert up == {"a": 0.0, "b": 0.0} and ("a", "policy") in dropped
        assert request(job.url + "/sources", "POST", {"id": "b", "frames": 5})[1]["error"].endswith(
            "DELETE /sources/b forgets it"
        )
        assert request(job.url + "/sources/b", "DELETE") == (200, {"removed": "b"})
        assert [s["id"] for s in request(job.url + "/sources")[1]["sources"]] == ["a"]
        assert 'source="b"' not in request(job.url + "/metrics", token=None)[1]
        assert request(job.url + "/drain", "POST")[0] == 202
        job.thread.join(30)
        assert not job.thread.is_alive()
    assert job.report is not None and job.report.exit_code == 0
    assert job.report.frames == {"a": 40, "b": 25}


def test_removing_a_live_source_closes_its_outputs_and_others_go_on(tmp_path: Path) -> None:
    with Running(plan(tmp_path, {})) as job:
        job.wait_ready()
        request(job.url + "/sources", "POST", {"id": "endless", "frames": 10**6, "delay_s": 0.005})
        request(job.url + "/sources", "POST", {"id": "other", "frames": 10**6, "delay_s": 0.005})
        wait_for(lambda: (tmp_path / "endless.jsonl").exists() and (tmp_path / "endless.jsonl").stat().st_size > 0)
        status, _ = request(job.url + "/sources/endless", "DELETE")
        assert status == 202
        wait_for(lambda: (tmp_path / "endless.closed").exists())
        states = lambda: {s["id"]: s["state"] for s in request(job.url + "/sources")[1]["sources"]}  # noqa: E731
        wait_for(lambda: states() == {"other": "running", "endless": "ended"})
        online = {s["id"]: s["online"] for s in request(job.url + "/sources")[1]["sources"]}
        assert online == {"other": True, "endless": False}  # an ended source is read no more
        assert request(job.url + "/sources/endless", "DELETE")[0] == 200  # an ended source: forgotten
        assert states() == {"other": "running"}
        wait_for(lambda: (tmp_path / "other.jsonl").exists())  # its decode worker may start later
        before = len((tmp_path / "other.jsonl").read_text().splitlines())
        wait_for(lambda: len((tmp_path / "other.jsonl").read_text().splitlines()) > before)  # it goes on
        assert request(job.url + "/sources/nope", "DELETE")[0] == 404
    lines = [json.loads(x) for x in (tmp_path / "endless.jsonl").read_text().splitlines()]
    assert [r["seq"] for r in lines] == list(range(len(lines)))


def test_a_source_id_added_again_keeps_its_earlier_files(tmp_path: Path) -> None:
    """The real file outputs: a source id re-added after it ended writes `b.2.jsonl` and `b.2.mp4`
    beside its first run's files, which keep every frame they had."""
    jsonl = JsonlOutput(kind="jsonl", path=f"{tmp_path}/{{source_id}}.jsonl")
    video = VideoFileOutput(kind="video_file", path=f"{tmp_path}/{{source_id}}.mp4")
    outputs = (
        StageSpec("jsonl", 1, functools.partial(JsonlSink, jsonl), writes_output=True),
        StageSpec("video", 1, functools.partial(VideoFileSink, video), writes_output=True),
    )
    base = plan(tmp_path, {})
    job_plan = dataclasses.replace(base, stages=(*base.middle, *outputs))
    (tmp_path / "b.3.jsonl").write_text("from another job\n")  # a name taken on disk is skipped too
    with Running(job_plan) as job:
        job.wait_ready()
        for frames in (25, 10, 5):
            assert request(job.url + "/sources", "POST", {"id": "b", "frames": frames})[0] == 201
            wait_for(lambda: [s["state"] for s in request(job.url + "/sources")[1]["sources"]] == ["ended"])
            assert request(job.url + "/sources/b", "DELETE")[0] == 200
        assert request(job.url + "/drain", "POST")[0] == 202
        job.thread.join(30)
    assert job.report is not None and job.report.exit_code == 0
    for name, frames in (("b", 25), ("b.2", 10), ("b.4", 5)):
        assert [json.loads(x)["seq"] for x in (tmp_path / f"{name}.jsonl").read_text().splitlines()] == list(range(frames))
    assert (tmp_path / "b.3.jsonl").read_text() == "from another job\n"
    assert sorted(p.name for p in tmp_path.glob("b*.mp4")) == ["b.2.mp4", "b.3.mp4", "b.mp4"]
    assert [clips.count_frames(tmp_path / f"{name}.mp4") for name in ("b", "b.2", "b.3")] == [25, 10, 5]


def open_fds(pids: list[int]) -> int:
    return sum(len(os.listdir(f"/proc/{p}/fd")) for p in pids if os.path.exists(f"/proc/{p}/fd"))


def test_add_remove_cycles_leak_no_descriptors_or_shared_memory(tmp_path: Path) -> None:
    ours = f"framewire-{os.getpid()}-"  # other jobs may run beside this test
    shm_before = {n for n in os.listdir("/dev/shm") if n.startswith(ours)}
    with Running(plan(tmp_path, {})) as job:
        job.wait_ready()
        me = psutil.Process()

        def workers() -> list[int]:
            found = []
            for child in me.children(recursive=True):
                try:  # a worker that just exited is a zombie until the daemon reaps it: not a worker
                    if "framewire: " in " ".join(child.cmdline()):
                        found.append(child.pid)
                except (psutil.ZombieProcess, psutil.NoSuchProcess):
                    continue
            return found

        def cycle(i: int) -> None:
            assert request(job.url + "/sources", "POST", {"id": f"s{i % 3}", "frames": 10**6})[0] == 201
            wait_for(lambda: (tmp_path / f"s{i % 3}.jsonl").exists())
            assert request(job.url + f"/sources/s{i % 3}", "DELETE")[0] == 202
            wait_for(lambda: [s["state"] for s in request(job.url + "/sources")[1]["sources"]] == ["ended"])
            assert request(job.url + f"/sources/s{i % 3}", "DELETE")[0] == 200
            assert request(job.url + "/sources")[1]["sources"] == []

        for i in range(5):  # warm-up
            cycle(i)
        pids = sorted(set(workers()))
        fds = open_fds([os.getpid(), *pids])
        for i in range(5, 45):
            cycle(i)
        assert sorted(set(workers())) == pids  # no worker restarted or left behind
        assert open_fds([os.getpid(), *pids]) <= fds + 2
        assert {n for n in os.listdir("/dev/shm") if n.startswith(ours)} - shm_before == set()


def test_probes_head_and_query_strings(tmp_path: Path) -> None:
    with Running(plan(tmp_path, {}, keep_running=True)) as job:
        job.wait_ready()
        assert request(job.url + "/livez", token=None) == (200, {"live": True})
        assert request(job.url + "/readyz?cache=1", token=None) == (200, {"ready": True})
        assert request(job.url + "/healthz", token=None) == (200, {"live": True, "ready": True})
        assert request(job.url + "/metrics?name[]=x", "HEAD", token=None) == (200, "")
        assert request(job.url + "/readyz", "HEAD", token=None) == (200, "")
        assert request(job.url + "/nowhere", "HEAD", token=None)[0] == 404
        status, text = request(job.url + "/metrics", token=None)
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"process_cpu_seconds", "process_resident_memory_bytes", "framewire_build_info",
                "framewire_worker_cpu_seconds"} <= names  # fmt: skip
        assert request(job.url + "/drain", "POST")[0] == 202
        job.thread.join(30)
