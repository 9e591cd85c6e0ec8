"""The OpenAPI document of a running daemon is enough to drive it: a client generated from
GET /openapi.json by openapi-python-client (no Java, no hand-written code) lists the sources, adds
one, removes it (202 while it stops, then 200 once forgotten) and stops the daemon."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import face_job, start_cli
from tests.support import clips
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(240)

TOKEN = "c1ient"


def _generate(url: str, folder: Path) -> Any:
    """The client package generated from the daemon's document, imported."""
    pytest.importorskip("openapi_python_client")  # Python 3.11 and later (the test extra's marker)
    document = folder / "openapi.json"
    with urllib.request.urlopen(url + "/openapi.json", timeout=20) as resp:
        document.write_bytes(resp.read())
    bin_dir = str(Path(sys.executable).parent)  # its ruff runs after it writes the files
    generated = subprocess.run(
        [os.path.join(bin_dir, "openapi-python-client"), "generate", "--path", str(document),
         "--output-path", str(folder / "fwclient"), "--meta", "none"],
        capture_output=True, text=True, timeout=180,
        env={**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"]},
    )  # fmt: skip
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert "Unable to process schema" not in generated.stdout, generated.stdout
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module("fwclient")
    finally:
        sys.path.remove(str(folder))


def _until(predicate: Any, proc: subprocess.Popen[str], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)
    return value


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=5) as resp:
            return bool(json.loads(resp.read())["ready"])
    except OSError:
        return False


def test_a_generated_client_lists_adds_and_removes_a_source(tmp_path: Path) -> None:
    clip = clips.make_clip(tmp_path / "clip.mp4", width=160, height=120, frames=50, fps=25)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    http = ["--set", "http.enabled=true", "--set", f"http.port={port}", "--set", "http.keep_running=true",
            "--set", "http.token=${FW_TOKEN}"]  # fmt: skip
    proc = start_cli(*face_job(tmp_path / "out", clip, *http), env_extra={"FW_TOKEN": TOKEN})
    try:
        _until(lambda: _ready(url), proc)
        fw = _generate(url, tmp_path)
        calls = ("list_sources", "add_source", "remove_source", "stop")
        modules = {name: importlib.import_module(f"fwclient.api.default.{name}") for name in calls}
        from_api = type("Api", (), modules)
        models = importlib.import_module("fwclient.models")
        client = fw.AuthenticatedClient(base_url=url, token=TOKEN)

        def states() -> dict[str, str]:
            listed = from_api.list_sources.sync(client=client)
            assert isinstance(listed, models.SourceList), listed
            return {s.id: s.state for s in listed.sources}

        assert "clip" in states()
        refused = from_api.list_sources.sync(client=fw.Client(base_url=url))  # no token
        assert isinstance(refused, models.Error) and refused.error == "missing or wrong bearer token"

        new = models.SourceConfig(id="cam2", uri=str(clip), realtime=True)
        added = from_api.add_source.sync(client=client, body=new)
        assert isinstance(added, models.SourceState) and added.id == "cam2", added
        assert states()["cam2"] in ("opening", "running")
        wrong = models.SourceConfig(id="cam3", uri=str(clip), max_frames=-1)
        bad = from_api.add_source.sync(client=client, body=wrong)
        assert isinstance(bad, models.Error) and "max_frames" in bad.error, bad  # the config's rule, one line

        removing = from_api.remove_source.sync_detailed(client=client, source_id="cam2")
        assert removing.status_code == 202 and removing.parsed.removing == "cam2"
        _until(lambda: states()["cam2"] == "ended", proc)
        removed = from_api.remove_source.sync_detailed(client=client, source_id="cam2")
        assert removed.status_code == 200 and removed.parsed.removed == "cam2"
        assert "cam2" not in states()

        stopping = from_api.stop.sync_detailed(client=client)
        assert stopping.status_code == 202
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
