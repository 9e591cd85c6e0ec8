"""The daemon's HTTP side through the CLI: health, a Prometheus scrape, drain."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.helpers import VIDEOS, face_job, read_jsonl, start_cli

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
    time.sleep(1.0)
    status, text = get(url + "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    outputs = [s for s in families["framewire_frames"].samples if s.labels["stage"] == "output"]
    assert outputs and outputs[0].labels["source"] == "clip" and outputs[0].value > 0
    providers = [s.labels["provider"] for s in families["framewire_provider_info"].samples]
    assert providers and all(p == "CPUExecutionProvider" for p in providers)
    assert get(url + "/drain", "POST")[0] == 202
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    records = read_jsonl(tmp_path / "clip.jsonl")
    assert 0 < len(records) < 250 and [r["seq"] for r in records] == list(range(len(records)))
