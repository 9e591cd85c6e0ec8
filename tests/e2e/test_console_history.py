"""The console's events page in a real Chromium (Debian's, driven by playwright), against the daemon
started through the CLI with a line, tracking and a `recording` output that cuts clips (issue 36):
the page shows every crossing with its snapshot, filters them, and plays a clip (its `currentTime`
advances); the clips' announcements carry their URL, which serves the clip with Range requests."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from framewire.client import ClipClosed, Client
from tests.e2e.helpers import VIDEOS, read_jsonl, start_cli
from tests.support.components import chromium
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(300)

LINE = "analytics={door: {lines: [{name: door, start: [75, 10], end: [75, 140]}]}}"  # the face crosses x=75
TOKEN = "s3cret"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(chromium()),
            args=["--no-sandbox", "--autoplay-policy=no-user-gesture-required"],
        )
        try:
            yield launched
        finally:
            launched.close()


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, Any]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers
    except OSError:
        return 0, b"", {}


def _json(url: str) -> Any:
    status, body, _ = _get(url)
    return json.loads(body) if status == 200 else None


def _until(predicate: Callable[[], Any], proc: subprocess.Popen[str], timeout: float = 200) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)
    return value


def _ended(url: str) -> bool:
    listed = _json(url + "/sources")
    clips = _json(url + "/clips")
    if not (listed and clips and clips["clips"]):
        return False
    ended = [s["state"] for s in listed["sources"]] == ["ended"]
    return ended and all(c["state"] == "done" for c in clips["clips"])


def _local(wall: float) -> str:
    """A wall time as a datetime-local input takes it (the browser's time zone is the machine's)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(wall))


def test_the_events_page_shows_the_crossings_with_snapshots_and_plays_a_clip(
    tmp_path: Path, browser: Any
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    folder = tmp_path / "rec"
    recording = (f"{{kind: recording, folder: '{folder}', clips: {{pre_s: 1, post_s: 1, "
                 "events: [{event: crossed, line: door}]}, snapshots: {pick: first}}")  # fmt: skip
    endpoint = f"ipc://{tmp_path}/out.sock"
    client, heard, done = Client(endpoint, mode="pull"), [], threading.Event()
    listener = threading.Thread(target=_listen, args=(client, heard, done), daemon=True)
    listener.start()
    second = f"{{kind: recording, folder: '{tmp_path}/rec2', clips: {{events: [{{event: track_started}}]}}}}"
    outputs = f"[{{kind: jsonl, path: '{tmp_path}/{{source_id}}.jsonl'}}, {recording}, " \
              f"{{kind: zmq, endpoint: '{endpoint}', mode: push}}, {second}]"
    proc = start_cli(
        "run", "--no-progress", "--set", f"sources=[{{id: door, uri: '{VIDEOS / 'carphone_pristine.mp4'}'}}]",
        "--set", f"outputs={outputs}",
        "--set", "tracking={}", "--set", LINE, "--set", "http.enabled=true", "--set", f"http.port={port}",
        "--set", "http.keep_running=true", "--set", "http.token=${FW_TOKEN}", env_extra={"FW_TOKEN": TOKEN},
    )  # fmt: skip
    try:
        _until(lambda: _ended(url), proc)
        events = _json(url + "/events?limit=500")["events"]
        assert len(events) >= 2
        assert all(e["event"] == "crossed" and e["snapshot_url"] and e["clip_url"] for e in events)
        # The clips' announcements carry their URL, which serves the clip (a <video> asks for ranges).
        clips_of = [r for r in read_jsonl(tmp_path / "door.jsonl") if r.get("event") == "clip"]
        announced = [r for r in clips_of if r["output"] == "output1.recording"]
        started = _json(url + "/events?limit=500&output=output3.recording")
        assert started["outputs"] == ["output1.recording", "output3.recording"]
        assert started["events"] and all(e["event"] == "track_started" for e in started["events"])
        assert announced
        assert all(r["url"] == f"{url}/clips/{r['id']}?output=output1.recording" for r in announced)
        first = lambda: [m for m in heard if (m.url or "").endswith("output=output1.recording")]
        _until(lambda: len(first()) == len(announced), proc, timeout=30)  # on the zmq output too
        assert sorted(m.url or "" for m in first()) == sorted(r["url"] for r in announced)
        assert sorted(m.path for m in first()) == sorted(r["path"] for r in announced)
        status, body, headers = _get(announced[0]["url"], {"Range": "bytes=0-99"})
        assert (status, len(body), headers["Content-Type"]) == (206, 100, "video/mp4")

        page = browser.new_page(viewport={"width": 1100, "height": 900})
        problems: list[str] = []
        page.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning")
                else None)  # fmt: skip
        page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
        page.goto(url + "/history")
        page.locator("#token-form").wait_for()
        page.fill("#token", TOKEN)
        page.click("#token-form button[type=submit]")
        rows = page.locator("#events tbody tr")
        all_rows = f"() => document.querySelectorAll('#events tbody tr').length === {len(events)}"
        page.wait_for_function(all_rows)
        shown = rows.evaluate_all("rows => rows.map(r => Number(r.dataset.event))")
        assert shown == [e["id"] for e in events]
        page.wait_for_function("() => [...document.querySelectorAll('#events img.snapshot')]"
                               ".every(img => img.complete && img.naturalWidth > 0)")  # fmt: skip
        assert page.locator("#events img.snapshot").count() == len(events)
        assert rows.first.locator("td").nth(3).text_content() == "crossed"

        _filter(page, {"#f-source": "nosuch"})
        page.locator("#none").wait_for()
        walls = [e["wall"] for e in events]
        _filter(page, {"#f-source": "door", "#f-place": "door", "#f-since": _local(int(min(walls)))})
        page.wait_for_function(all_rows)
        _filter(page, {"#f-since": _local(int(max(walls)) + 1)})
        page.locator("#none").wait_for()
        _filter(page, {"#f-since": ""})
        page.wait_for_function(all_rows)

        rows.first.locator("button.play").click()
        page.wait_for_function("() => document.querySelector('#player').currentTime > 0.5", timeout=30000)
        played = page.evaluate("() => { const v = document.querySelector('#player'); return "
                               "{clip: v.dataset.clip, error: v.error, duration: v.duration}; }")  # fmt: skip
        assert played["error"] is None and played["duration"] > 0.5
        assert int(played["clip"]) == events[0]["clip_id"]

        # The second recording output: chosen beside the filters, its own events listed.
        page.fill("#f-place", "")  # a track start is on no line
        with page.expect_response(lambda r: "output=output3.recording" in r.url):
            page.select_option("#f-output", "output3.recording")
        page.wait_for_function(f"() => document.querySelectorAll('#events tbody tr').length === {len(started['events'])}")
        shown = rows.evaluate_all("rows => rows.map(r => r.children[3].textContent)")
        assert shown == ["track_started"] * len(started["events"])
        page.close()
        refused = "error: Failed to load resource: the server responded with a status of 401 (Unauthorized)"
        assert problems == [refused]  # the first question, before the page had the token
    finally:
        done.set()
        listener.join(timeout=10)
        client.close()
        try:
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            stop = urllib.request.Request(url + "/stop", method="POST", headers=bearer)
            urllib.request.urlopen(stop, timeout=10)
        except OSError:
            pass
        try:
            _, log = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]


def _listen(client: Client, heard: list[ClipClosed], done: threading.Event) -> None:
    """The zmq output's clip announcements, read as framewire.Client reads them."""
    while not done.is_set():
        message = client.receive(timeout=0.2)
        if isinstance(message, ClipClosed):
            heard.append(message)


def _filter(page: Any, values: dict[str, str]) -> None:
    for selector, value in values.items():
        page.fill(selector, value)
    with page.expect_response(lambda r: "/events?" in r.url):
        page.click("#filters button[type=submit]")
