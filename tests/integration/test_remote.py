"""Workers on another host: a real daemon listening on tcp://127.0.0.1 with CurveZMQ, and its
infer stage run only by `run_pipeline.py worker` processes (started as a user would)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import zmq.auth

from tests.e2e.helpers import ROOT, run_cli, start_cli

pytestmark = pytest.mark.timeout(60)

CLIP = ROOT / "assets" / "videos" / "carphone_pristine.mp4"  # 120 frames, 176x144
FRAMES = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Keys:
    """A hub pair, a known worker pair (its public half in the hub's clients folder), and an
    unknown worker pair."""

    def __init__(self, folder: Path) -> None:
        clients = folder / "clients"
        clients.mkdir(parents=True)
        self.hub_public, self.hub_secret = zmq.auth.create_certificates(folder, "hub")
        self.clients = clients
        _, self.worker_secret = zmq.auth.create_certificates(clients, "worker")
        _, self.stranger_secret = zmq.auth.create_certificates(folder, "stranger")


def write_job(tmp: Path, port: int, keys: Keys, **transport: Any) -> Path:
    lines = [
        "version: 1",
        "sources:",
        f"  - {{id: clip, uri: '{CLIP}', realtime: {str(transport.pop('realtime', False)).lower()}}}",
        "model: {path: assets/models/yunet/face_detection_yunet_2023mar.onnx, task: face_detection,"
        " score_threshold: 0.7}",
        "engine: {threads: 1, processes_per_device: 1}",
        "composite: [{kind: blur}]",
        f"outputs: [{{kind: jsonl, path: '{tmp}/out/{{source_id}}.jsonl'}}"
        + (f", {{kind: video_file, path: '{tmp}/out/{{source_id}}.mp4'}}]" if transport.pop("video", False) else "]"),
        "transport:",
        f"  listen: tcp://127.0.0.1:{port}",
        f"  curve_secret_key: '{keys.hub_secret}'",
        f"  curve_clients: '{keys.clients}'",
        "  remote_stages: [infer]",
    ]
    stages = transport.pop("stages", None)
    lines += [f"  {key}: {value}" for key, value in transport.items()]
    if stages:
        lines.append(f"stages: {stages}")
    path = tmp / "job.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start_worker(config: Path, port: int, keys: Keys, client_key: Path) -> subprocess.Popen[str]:
    return start_cli(
        "worker", "-c", str(config), "--stage", "infer", "--connect", f"tcp://127.0.0.1:{port}",
        "--server-key", str(keys.hub_public), "--client-key", str(client_key),
    )  # fmt: skip


class Log:
    """Collects a process's stderr in a thread, so a test can wait for a line while it runs."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert process.stderr is not None
        self._thread = threading.Thread(target=self._read, args=(process.stderr,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return True
            time.sleep(0.05)
        return False

    @property
    def text(self) -> str:
        self._thread.join(5)
        return "".join(self.lines)


def stop(*processes: subprocess.Popen[str] | None) -> None:
    """Kill what still runs of these (with their workers); None is a process never started."""
    for process in processes:
        if process is None:
            continue
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def results(path: Path) -> list[Any]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["seq"] for r in records] == list(range(len(records)))
    return [r["results"] for r in records]


LOCAL = ("--set", "transport.listen=null", "--set", "transport.remote_stages=[]",
         "--set", "transport.curve_secret_key=null", "--set", "transport.curve_clients=null")  # fmt: skip
"""Overrides that run a job written for remote workers with every stage local."""


def run_with_one_worker(config: Path, port: int, keys: Keys) -> str:
    """The daemon and one `worker` command for its remote stage, both to the end; the hub's log."""
    hub = start_cli("run", "-c", str(config), "--no-progress")
    hub_log = Log(hub)
    worker = start_worker(config, port, keys, keys.worker_secret)
    try:
        assert hub.wait(45) == 0, hub_log.text
        assert worker.wait(15) == 0, worker.communicate()[1]  # the hub said STOP
    finally:
        stop(hub, worker)
    return hub_log.text


@pytest.fixture(scope="module")
def local_results(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """The same job with every stage local: what the remote runs must match exactly."""
    tmp = tmp_path_factory.mktemp("local")
    config = write_job(tmp, free_port(), Keys(tmp / "keys"))
    done = run_cli("run", "-c", str(config), "--no-progress", *LOCAL, timeout=60)
    assert done.returncode == 0, done.stderr
    found = results(tmp / "out" / "clip.jsonl")
    assert len(found) == FRAMES and any(r["detections"] for r in found)
    return found


def test_infer_runs_only_in_a_remote_worker_over_curve(tmp_path: Path, local_results: list[Any]) -> None:
    port = free_port()
    keys = Keys(tmp_path / "keys")
    config = write_job(tmp_path, port, keys)
    assert "remote infer worker infer@" in run_with_one_worker(config, port, keys)
    assert results(tmp_path / "out" / "clip.jsonl") == local_results


def decoded(path: Path) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="bgr24") for f in container.decode(video=0)]).astype(np.int16)


def test_a_fused_infer_stage_runs_remotely_and_sends_back_the_composited_image(
    tmp_path: Path, local_results: list[Any]
) -> None:
    # stages.fuse: one remote `infer` stage runs preprocess to composite; the image goes out, the
    # blurred image comes back into the hub's frame pool, and the local video output writes it.
    port = free_port()
    keys = Keys(tmp_path / "keys")
    config = write_job(tmp_path, port, keys, video=True, stages="{fuse: true}")
    local = run_cli(
        "run", "-c", str(config), "--no-progress", "--set", f"outputs.0.path={tmp_path}/local.jsonl",
        "--set", f"outputs.1.path={tmp_path}/local.mp4", *LOCAL, timeout=60,
    )  # fmt: skip
    assert local.returncode == 0, local.stderr
    assert "remote infer worker infer@" in run_with_one_worker(config, port, keys)
    assert results(tmp_path / "out" / "clip.jsonl") == local_results
    remote_video, local_video = decoded(tmp_path / "out" / "clip.mp4"), decoded(tmp_path / "local.mp4")
    assert remote_video.shape == local_video.shape == (FRAMES, 144, 176, 3)
    assert float(np.abs(remote_video - local_video).mean()) < 0.5  # the same blurred frames
    assert remote_video.mean() > 20  # pictures, not the zeroed region of a slot never written back


def test_a_killed_remote_worker_loses_no_frame(tmp_path: Path, local_results: list[Any]) -> None:
    port = free_port()
    keys = Keys(tmp_path / "keys")
    config = write_job(tmp_path, port, keys, realtime=True, remote_timeout_s=1.5)  # 120 frames: 4 s
    hub = start_cli("run", "-c", str(config), "--no-progress")
    hub_log = Log(hub)
    first = start_worker(config, port, keys, keys.worker_secret)
    second: subprocess.Popen[str] | None = None
    try:
        assert hub_log.wait_for("joined", 30), hub_log.text
        jsonl = tmp_path / "out" / "clip.jsonl"
        deadline = time.monotonic() + 60
        while not (jsonl.exists() and jsonl.read_text().count("\n") >= 30):  # some 30 frames in
            assert time.monotonic() < deadline and hub.poll() is None, hub_log.text
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)  # the command and its worker process, mid-job
        second = start_worker(config, port, keys, keys.worker_secret)
        assert hub.wait(45) == 0, hub_log.text
        assert second.wait(15) == 0
    finally:
        stop(hub, first, second)
    assert "lost (silent for" in hub_log.text
    assert results(tmp_path / "out" / "clip.jsonl") == local_results


def test_a_worker_with_an_unknown_key_is_refused(tmp_path: Path, local_results: list[Any]) -> None:
    port = free_port()
    keys = Keys(tmp_path / "keys")
    config = write_job(tmp_path, port, keys)
    hub = start_cli("run", "-c", str(config), "--no-progress")
    hub_log = Log(hub)
    stranger = start_worker(config, port, keys, keys.stranger_secret)
    good: subprocess.Popen[str] | None = None
    try:
        stranger_log = Log(stranger)
        try:
            stranger.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(stranger.pid, signal.SIGKILL)
            raise AssertionError(stranger_log.text + "\nHUB\n" + hub_log.text) from None
        assert stranger.returncode == 1, stranger_log.text
        assert "the hub refused this worker's key" in stranger_log.text
        assert "joined" not in hub_log.text and hub.poll() is None  # no frame went anywhere
        good = start_worker(config, port, keys, keys.worker_secret)
        assert hub.wait(45) == 0, hub_log.text
        assert good.wait(15) == 0
    finally:
        stop(hub, stranger, good)
    assert results(tmp_path / "out" / "clip.jsonl") == local_results


def test_no_remote_worker_times_out_clearly(tmp_path: Path) -> None:
    port = free_port()
    config = write_job(tmp_path, port, Keys(tmp_path / "keys"), remote_wait_s=2)
    done = run_cli("run", "-c", str(config), "--no-progress", timeout=45)
    assert done.returncode == 1
    assert (
        f"framewire: error: no infer worker connected to tcp://127.0.0.1:{port} for 2 s "
        "(start one with `run_pipeline.py worker --stage infer`; check its keys and the firewall)"
    ) in done.stderr
