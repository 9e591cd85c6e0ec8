"""A fleet of replicas through the CLI, as a user runs one: sources shared out by a real Redis, a
replica SIGKILLed mid-job and its sources taken over; and static shards (`run --shard I/N`)."""

from __future__ import annotations

import json
import os
import signal
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.helpers import CLI, ROOT, YUNET, env, read_jsonl
from tests.support import clips
from tests.support.ports import free_port
from tests.support.redis_server import redis_server
from tests.support.rtsp_server import spawn

LEASE_S = 3.0
FILES = [f"file{i}" for i in range(9)]
FRAMES = 100
"""Per file, paced at 10 fps: ten seconds, so the kill lands mid-file."""


def write_config(tmp: Path, sources: list[dict[str, Any]]) -> Path:
    out = tmp / "out"
    config = {
        "sources": sources,
        "model": {"path": str(YUNET), "task": "face_detection"},
        "engine": {"backend": "onnxruntime", "providers": ["cpu"], "threads": 1, "processes_per_device": 1},
        "stages": {"fuse": True, "fuse_outputs": True},
        "outputs": [{"kind": "jsonl", "path": f"{out}/{{source_id}}.jsonl"},
                    {"kind": "video_file", "path": f"{out}/{{source_id}}.mp4", "container": "fmp4"}],  # fmt: skip
        "http": {"enabled": True, "port": 0},
    }
    path = tmp / "fleet.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


@dataclass
class Replica:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as resp:
            return json.loads(resp.read())

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def fleet(self) -> dict[str, dict[str, Any]]:
        """`GET /sources`: every source of the fleet by id (empty while the replica is not up)."""
        try:
            return {s["id"]: s for s in self.get("/sources")["sources"]}
        except OSError:
            return {}

    def outputs(self) -> set[str]:
        """The sources this replica's own outputs have written frames of (its /metrics)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        frames = families.get("framewire_frames")
        samples = frames.samples if frames else []
        return {s.labels["source"] for s in samples if s.labels.get("stage") == "output" and s.value > 0}

    def stop(self, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log.exists() else ""


def start_replica(tmp: Path, config: Path, *args: str, name: str) -> Replica:
    port = free_port()
    log = tmp / f"{name}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(CLI), "-v", "run", "--no-progress", "-c", str(config), "--set", f"http.port={port}", *args],
            cwd=ROOT, env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )  # fmt: skip
    return Replica(name, proc, f"http://127.0.0.1:{port}", log)


def jsonl_seqs(path: Path) -> list[int]:
    """The seqs of the complete records of a JSONL file being written ([] before it exists)."""
    if not path.exists():
        return []
    return [json.loads(line)["seq"] for line in path.read_text().split("\n")[:-1]]


def wait_until(what: str, predicate: Callable[[], bool], replicas: list[Replica], timeout: float = 60) -> float:
    """Seconds it took; fails naming `what` (and a replica that died, with its log) after `timeout`."""
    started = time.monotonic()
    while not predicate():
        for replica in replicas:
            assert replica.proc.poll() is None, f"{replica.name} exited {replica.proc.returncode}: {replica.tail()}"
        assert time.monotonic() - started < timeout, f"still waiting for {what} after {timeout} s"
        time.sleep(0.1)
    return time.monotonic() - started


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


@pytest.mark.timeout(240)
def test_three_replicas_share_the_sources_and_take_over_a_killed_ones(tmp_path: Path, stack: ExitStack) -> None:
    store = stack.enter_context(redis_server(tmp_path / "redis"))
    cameras = []
    for _ in range(2):
        port = free_port()
        server = spawn(port, width=160, height=120, frames=50, fps=10)
        stack.callback(server.wait, 10)
        stack.callback(server.kill)
        cameras.append(f"rtsp://127.0.0.1:{port}/live")
    clip = clips.make_clip(tmp_path / "clip.mp4", width=176, height=144, frames=FRAMES, fps=10)
    sources = [{"id": sid, "uri": str(clip), "realtime": True} for sid in FILES]
    config = write_config(tmp_path, [*sources, {"id": "live0", "uri": cameras[0]}])
    fleet_args = ["--set", f"fleet.store={store}", "--set", f"fleet.lease_s={LEASE_S}"]
    replicas = [start_replica(tmp_path, config, *fleet_args, "--set", f"fleet.replica=r{i}", name=f"r{i}") for i in range(3)]
    for replica in replicas:
        stack.callback(replica.stop)
    r0, r1, r2 = replicas
    wait_until("every replica up", lambda: all(r.fleet() for r in replicas), replicas)

    # A source added through any replica joins the fleet once; a second add anywhere is refused.
    added = {"id": "live1", "uri": cameras[1]}
    assert r2.call("POST", "/sources", added) == (201, {"id": "live1", "state": "waiting", "replica": None})
    assert r0.call("POST", "/sources", added) == (409, {"error": "source 'live1' already exists in the fleet"})
    ids = [*FILES, "live0", "live1"]

    def placed() -> dict[str, str]:
        listed = r0.fleet()
        return {sid: s["replica"] for sid, s in listed.items() if s["state"] == "running" and s["frames"] > 0}

    wait_until("every source running", lambda: sorted(placed()) == sorted(ids), replicas)
    assert r0.get("/sources")["replicas"] == ["r0", "r1", "r2"]
    runner = placed()
    assert [{sid: s["replica"] for sid, s in r.fleet().items() if sid in runner} for r in (r1, r2)] == [runner, runner]
    # Each source runs on exactly one replica: each replica's own outputs write only its own sources.
    written = {r.name: r.outputs() for r in replicas}
    assert written == {r.name: {sid for sid, name in runner.items() if name == r.name} for r in replicas}

    # SIGKILL the replica (and its workers, as a node that dies) that runs the most: live ones first.
    victim = max(replicas, key=lambda r: (sum(sid.startswith("live") for sid, n in runner.items() if n == r.name),
                                          sum(n == r.name for n in runner.values())))  # fmt: skip
    moved = sorted(sid for sid, name in runner.items() if name == victim.name)
    assert any(sid.startswith("file") for sid in moved), runner
    survivors = [r for r in replicas if r is not victim]
    held = {sid: s["frames"] for sid, s in survivors[0].fleet().items() if sid in moved}
    assert all(0 < frames < FRAMES for sid, frames in held.items() if sid.startswith("file")), held
    victim.stop(signal.SIGKILL)
    killed = time.monotonic()
    taken: dict[str, float] = {}

    def all_taken() -> bool:
        for sid, entry in survivors[0].fleet().items():
            if sid in moved and sid not in taken and entry.get("replica") not in (None, victim.name):
                taken[sid] = time.monotonic() - killed
        return sorted(taken) == moved

    wait_until("the killed replica's sources taken over", all_taken, survivors, timeout=LEASE_S + 20)
    print(f"\ntakeover after the kill (lease {LEASE_S} s): " + ", ".join(f"{k} {v:.2f} s" for k, v in taken.items()))
    assert max(taken.values()) < LEASE_S + 3.0  # the lease runs out, then a survivor claims it at once

    # Every file ends complete: each frame once, in order, in the JSONL and in the recording.
    wait_until("every file ended", lambda: all(survivors[0].fleet()[sid]["state"] == "ended" for sid in FILES),
               survivors, timeout=FRAMES / 10 + 40)  # fmt: skip
    final = survivors[0].fleet()
    for sid in FILES:
        seqs = [record["seq"] for record in read_jsonl(tmp_path / "out" / f"{sid}.jsonl")]
        assert seqs == list(range(FRAMES)), (sid, seqs[:5], len(seqs))
        assert clips.count_frames(tmp_path / "out" / f"{sid}.mp4") == FRAMES, sid
        if sid in moved:  # resumed where the dead replica's outputs stopped, not started over
            assert final[sid]["replica"] != victim.name and final[sid]["frames"] < FRAMES, final[sid]

    # The live ones run again on a survivor, and new frames come; a moved one's files are written beside
    # those of its run on the dead replica, which keep what they had.
    for sid in ("live0", "live1"):
        seen = final[sid]["frames"] if final[sid]["replica"] != victim.name else 0
        wait_until(f"{sid} running on a survivor",
                   lambda sid=sid, seen=seen: (lambda e: e["replica"] != victim.name and e["state"] == "running"
                                                         and e["frames"] > seen)(survivors[0].fleet()[sid]),
                   survivors)  # fmt: skip
        if sid in moved:
            lines = (tmp_path / "out" / f"{sid}.jsonl").read_text().splitlines()
            before = [json.loads(line)["seq"] for line in lines[:-1]]  # the last may be torn by the kill
            # In order, each once: a live source's frames dropped in the hub past max_waiting (at
            # its start, while the model warms up, too) leave gaps in its seqs.
            assert len(before) > 5 and before == sorted(set(before)), before[:10]
            wait_until(f"{sid}'s new run in its own file", lambda sid=sid: len(jsonl_seqs(tmp_path / "out" / f"{sid}.2.jsonl")) > 2,
                       survivors)  # fmt: skip
            after = jsonl_seqs(tmp_path / "out" / f"{sid}.2.jsonl")
            # A run of its own: its seqs start again, they do not go on from the dead run's.
            assert after == sorted(set(after)) and after[0] < before[-1], (before[-3:], after[:10])

    # DELETE through any replica stops a live source wherever it runs; then the survivors drain and exit 0.
    for sid in ("live0", "live1"):
        assert survivors[1].call("DELETE", f"/sources/{sid}") == (202, {"removing": sid})
    wait_until("the live sources ended", lambda: all(survivors[0].fleet()[s]["state"] == "ended" for s in ("live0", "live1")),
               survivors)  # fmt: skip
    for replica in survivors:
        replica.proc.send_signal(signal.SIGTERM)
    for replica in survivors:
        assert replica.proc.wait(30) == 0, replica.tail()
    assert victim.proc.wait(10) == -signal.SIGKILL


@pytest.mark.timeout(180)
def test_static_shards_run_each_source_once_and_open_no_other(tmp_path: Path) -> None:
    from framewire.pipeline.ops.rendezvous import shard_of

    clip = clips.make_clip(tmp_path / "clip.mp4", width=176, height=144, frames=10, fps=10)
    ids = [f"cam{i}" for i in range(6)]
    missing = tmp_path / "not-mine.mp4"  # a source listed but absent: only the shard it falls to may open it
    owner = next(i for i in range(2) if shard_of("gone", i, 2))
    sources = [{"id": sid, "uri": str(clip)} for sid in ids] + [{"id": "gone", "uri": str(missing)}]
    config = write_config(tmp_path, sources)
    procs = [subprocess.Popen([sys.executable, str(CLI), "run", "--no-progress", "-c", str(config), "--shard", f"{i}/2",
                               "--set", "http.enabled=false"],
                              cwd=ROOT, env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)  # fmt: skip
             for i in range(2)]
    results = [proc.communicate(timeout=150) for proc in procs]
    for i, (proc, (_, err)) in enumerate(zip(procs, results)):
        mine = [sid for sid in ids if shard_of(sid, i, 2)]
        if i == owner:  # refused before anything starts, naming the source it owns
            assert proc.returncode == 2 and f"source gone: file not found: {missing}" in err, err
            continue
        assert proc.returncode == 0, err
        summed = [line.split(":")[0] for line in err.splitlines() if re.match(r"[\w-]+: \d+ frames in ", line)]
        assert sorted(summed) == sorted(mine)
        for sid in mine:
            assert [r["seq"] for r in read_jsonl(tmp_path / "out" / f"{sid}.jsonl")] == list(range(10))
    written = sorted(p.stem for p in (tmp_path / "out").glob("*.jsonl"))
    assert written == sorted(sid for sid in ids if not shard_of(sid, owner, 2))


@pytest.mark.timeout(120)
def test_a_replica_whose_store_does_not_answer_fails_in_one_line(tmp_path: Path) -> None:
    clip = clips.make_clip(tmp_path / "clip.mp4", width=176, height=144, frames=5, fps=10)
    config = write_config(tmp_path, [{"id": "cam", "uri": str(clip)}])
    port = free_port()  # nothing listens there
    done = subprocess.run([sys.executable, str(CLI), "run", "--no-progress", "-c", str(config),
                           "--set", f"fleet.store=redis://:secret@127.0.0.1:{port}/0", "--set", "fleet.lease_s=1"],
                          cwd=ROOT, env=env(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=100)  # fmt: skip
    errors = [line for line in done.stderr.splitlines() if line.startswith("framewire: error:")]
    assert done.returncode == 1 and len(errors) == 1, done.stderr
    assert errors[0].startswith(f"framewire: error: fleet store redis://***@127.0.0.1:{port}/0: ConnectionError: "), errors
    assert "secret" not in done.stderr


@pytest.mark.timeout(180)
def test_a_replica_that_drains_hands_its_sources_over_without_waiting_for_the_lease(
    tmp_path: Path, stack: ExitStack
) -> None:
    lease_s = 9.0  # a takeover by expiry would come at least 6 s (lease - renewal period) after it stops
    store = stack.enter_context(redis_server(tmp_path / "redis"))
    frames = 80
    clip = clips.make_clip(tmp_path / "clip.mp4", width=176, height=144, frames=frames, fps=10)
    config = write_config(tmp_path, [{"id": "cam", "uri": str(clip), "realtime": True}])
    replicas = [start_replica(tmp_path, config, "--set", f"fleet.store={store}", "--set", f"fleet.lease_s={lease_s}",
                              "--set", f"fleet.replica=r{i}", name=f"r{i}") for i in range(2)]  # fmt: skip
    for replica in replicas:
        stack.callback(replica.stop)
    wait_until("cam running", lambda: replicas[0].fleet().get("cam", {}).get("frames", 0) > 10, replicas,
               timeout=lease_s + 60)  # fmt: skip
    holder = next(r for r in replicas if r.name == replicas[0].fleet()["cam"]["replica"])
    other = next(r for r in replicas if r is not holder)
    holder.proc.send_signal(signal.SIGTERM)  # a rolling update: drain, hand over
    assert holder.proc.wait(30) == 0, holder.tail()
    took = wait_until("cam taken over", lambda: other.fleet()["cam"]["replica"] == other.name, [other], timeout=30)
    print(f"\nhanded over {took:.2f} s after the drained replica exited (lease {lease_s} s)")
    assert took < 5.0
    wait_until("cam ended", lambda: other.fleet()["cam"]["state"] == "ended", [other], timeout=60)
    assert [r["seq"] for r in read_jsonl(tmp_path / "out" / "cam.jsonl")] == list(range(frames))
    assert clips.count_frames(tmp_path / "out" / "cam.mp4") == frames
    assert 0 < other.fleet()["cam"]["frames"] < frames  # resumed, not started over
    other.proc.send_signal(signal.SIGTERM)
    assert other.proc.wait(30) == 0, other.tail()
