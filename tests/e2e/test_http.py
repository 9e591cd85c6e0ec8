"""The daemon's HTTP side through the CLI: health, a Prometheus scrape, drain."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.helpers import VIDEOS, face_job, read_jsonl, start_cli
from tests.support import clips

pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, method: str = "GET") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


def test_health_metrics_and_drain_through_the_cli(tmp_path: Path) -> None:
    port = free_port()
    proc = start_cli(*face_job(tmp_path, VIDEOS / "bikes.mp4", "--set", "sources.0.realtime=true",
                               "--set", "http.enabled=true", "--set", f"http.port={port}"))  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while get(url + "/healthz")[0] != 200:
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.1)

    def metrics() -> dict[str, Any]:
        status, text = get(url + "/metrics")
        assert status == 200
        return {f.name: f for f in text_string_to_metric_families(text)}

    def output_frames(families: dict[str, Any]) -> list[Any]:
        frames = families.get("framewire_frames")
        return [s for s in frames.samples if s.labels["stage"] == "output"] if frames else []

    wait_until(lambda: any(s.value > 0 for s in output_frames(metrics())), proc)  # however slow the start
    families = metrics()
    outputs = output_frames(families)
    assert outputs and outputs[0].labels["source"] == "clip" and outputs[0].value > 0
    providers = [s.labels["provider"] for s in families["framewire_provider_info"].samples]
    assert providers and all(p == "CPUExecutionProvider" for p in providers)
    assert get(url + "/drain", "POST")[0] == 202
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    records = read_jsonl(tmp_path / "clip.jsonl")
    assert 0 < len(records) < 250 and [r["seq"] for r in records] == list(range(len(records)))


def call(url: str, method: str = "GET", body: dict | None = None, token: str = "t0k") -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def wait_until(predicate: Any, proc: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() is not None else ""
        time.sleep(0.1)


def test_sources_that_cannot_be_read_are_refused_or_failed_and_ended_ones_stay(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_cli(*face_job(tmp_path, VIDEOS / "carphone_pristine.mp4", "--set", "http.enabled=true",
                               "--set", f"http.port={port}", "--set", "http.keep_running=true",
                               "--set", "http.token=${FW_TOKEN}"), env_extra={"FW_TOKEN": "t0k"})  # fmt: skip
    try:
        wait_until(lambda: get(url + "/readyz")[0] == 200, proc)
        assert json.loads(get(url + "/livez")[1]) == {"live": True}
        status, body = call(url + "/sources", "POST", {"id": "gone", "uri": str(tmp_path / "missing.mp4")})
        assert (status, body) == (400, {"error": f"source.uri: file not found: {tmp_path / 'missing.mp4'}"})
        assert call(url + "/sources", "POST", {"id": "x", "urii": "clip.mp4"}) == (
            400, {"error": "source.urii: unknown key (did you mean uri?)"})  # fmt: skip
        assert call(url + "/sources", "PUT", {"id": "x"}) == (
            405, {"error": "PUT is not allowed on /sources: it takes GET, HEAD, POST"})  # fmt: skip
        (tmp_path / "notes.mp4").write_text("not a video\n" * 50)
        status, body = call(url + "/sources", "POST", {"id": "notes", "uri": str(tmp_path / "notes.mp4")})
        assert status == 400 and body["error"].startswith("source.uri: source notes: ") and "notes.mp4" in body["error"]
        full = clips.make_clip(tmp_path / "full.avi", codec="mpeg4", frames=60, from_clip=VIDEOS / "carphone_pristine.mp4",
                               width=176, height=144)  # fmt: skip
        cut = clips.make_truncated_copy(full, tmp_path / "cut.avi", fraction=0.5)  # opens, then fails midway
        assert call(url + "/sources", "POST", {"id": "junk", "uri": str(cut)})[0] == 201
        states = lambda: {s["id"]: s for s in call(url + "/sources")[1]["sources"]}  # noqa: E731
        wait_until(lambda: {k: s["state"] for k, s in states().items()} == {"clip": "ended", "junk": "failed"}, proc)
        listed = states()
        assert (listed["clip"]["frames"], listed["clip"]["read"], listed["clip"]["error"]) == (120, 120, None)
        decoded = int(listed["junk"]["error"].removeprefix("source junk: truncated: decoded ").split(" of 60 frames")[0])
        assert (listed["clip"]["online"], listed["junk"]["online"]) == (False, False)
        status, text = get(url + "/metrics?format=text")
        families = {f.name: f for f in text_string_to_metric_families(text)}
        outputs = {s.labels["source"]: s.value for s in families["framewire_frames"].samples if s.labels["stage"] == "output"}
        assert outputs == {"clip": 120, "junk": decoded} and 0 < decoded < 60  # ended and failed ones keep their counts
        assert families["process_resident_memory_bytes"].samples[0].value > 0
        assert families["framewire_build_info"].samples[0].labels["version"]
        assert call(url + "/drain", "POST")[0] == 202
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1 and "framewire: error: " in err and "junk" in err  # a source failed: exit 1

