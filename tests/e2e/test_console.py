"""The web console in a real Chromium (Debian's, driven by playwright), against the daemon started
through the CLI: the sources listed with a live rate (server-sent events), previews that move, a
source added (with more keys) and removed from the page, a clean browser console, and a clean
daemon log once the tab closes; nothing encoded before anyone watches; with a token set, the page
says it waits for it and asks for it."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.helpers import VIDEOS, face_job, start_cli
from tests.support import clips
from tests.support.components import chromium
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium()), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError:
        return 0, b""


def _until(predicate: Callable[[], Any], proc: subprocess.Popen[str], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.1)
    return value


def _encoded(url: str) -> dict[str, float]:
    text = _get(url + "/metrics")[1].decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    family = families.get("framewire_preview_frames")
    return {s.labels["source"]: s.value for s in family.samples if s.name.endswith("_total")} if family else {}


def _encoding_stopped(url: str, source: str) -> bool:
    """No preview of `source` encoded for a second (at 10 a second while watched)."""
    before = _encoded(url).get(source)
    time.sleep(1.0)
    return before == _encoded(url).get(source)


def _daemon(tmp: Path, port: int, clip: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return start_cli(*face_job(tmp, clip, "--set", "sources.0.realtime=true", "--set", "http.enabled=true",
                               "--set", f"http.port={port}", "--set", "http.keep_running=true",
                               "--set", "composite=[{kind: boxes}]", *extra, source_id="cam1"),
                     env_extra=env)  # fmt: skip


def _stop(proc: subprocess.Popen[str], url: str, token: str | None = None) -> str:
    """Stop the daemon; its log (stderr)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        urllib.request.urlopen(urllib.request.Request(url + "/stop", method="POST", headers=headers), timeout=10)
    except OSError:
        pass
    try:
        return proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_the_console_lists_sources_plays_previews_and_adds_one(tmp_path: Path, browser: Any) -> None:
    # 60 s paced: the previews still move however slow the machine is to get there; /stop ends it.
    clip = clips.make_clip(tmp_path / "moving.mp4", width=320, height=240, frames=1500, fps=25)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _daemon(tmp_path / "out", port, clip)
    try:
        stats = lambda: json.loads(_get(url + "/console/stats")[1] or b"{}")  # noqa: E731
        _until(lambda: any(s["frames"] > 10 for s in stats().get("sources", [])), proc)
        assert _encoded(url) == {}  # frames went through, nobody watched: nothing encoded
        page = browser.new_page(viewport={"width": 1000, "height": 900})
        problems: list[str] = []
        page.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
        page.goto(url + "/")
        card = page.locator("article[data-source=cam1]")
        card.wait_for()
        page.wait_for_function(
            "() => Number(document.querySelector('article[data-source=cam1] [data-field=fps]').textContent) > 1")
        assert card.locator(".state").text_content() == "running"
        preview = card.locator("img.preview")
        page.wait_for_function("() => document.querySelector('article[data-source=cam1] img.preview').naturalWidth > 0")
        first = preview.screenshot()
        shown = preview.get_attribute("src")  # the first shot shows this frame or an earlier one
        img = "document.querySelector('article[data-source=cam1] img.preview')"
        page.wait_for_function(f"() => {img}.src !== {json.dumps(shown)} && {img}.complete && {img}.naturalWidth > 0")
        assert preview.screenshot() != first  # the square moved
        assert _encoded(url).get("cam1", 0) >= 2
        # A source added from the page appears, runs, and is removed from it.
        page.fill("#add-id", "cam2")
        page.fill("#add-uri", str(clip))
        page.click("#add-form button[type=submit]")
        added = page.locator("article[data-source=cam2]")
        added.wait_for(timeout=20000)
        page.wait_for_function(
            "() => Number(document.querySelector('article[data-source=cam2] [data-field=frames]').textContent) > 0")
        assert page.locator("#add-error").text_content() == ""
        page.wait_for_function("() => document.querySelector('article[data-source=cam2] img.preview').naturalWidth > 0")
        added.locator("button.remove").click()
        # Removed: its card shows it draining or ended, or, once the daemon no longer lists it, is gone
        # (which of the two the page catches depends on how fast the daemon ends it).
        page.wait_for_function("() => { const state = document.querySelector('article[data-source=cam2] .state');"
                               " return state === null || ['draining', 'ended'].includes(state.textContent); }")
        _until(lambda: {s["id"]: s["state"] for s in stats()["sources"]}.get("cam2", "ended") in ("draining", "ended"),
               proc, timeout=20)
        page.wait_for_function("() => document.querySelector('article[data-source=cam1] canvas.chart-fps').width > 0")
        _add_with_more_keys(page, clip)
        page.close()  # the tab closes while its preview request and its event stream are open
        refused = "error: Failed to load resource: the server responded with a status of 400 (Bad Request)"
        assert [p for p in problems if p != refused] == [] and problems.count(refused) == 1  # the wrong key
        # The page gone, its lease lapses (3 s) and the encoding stops while cam1 still runs.
        _until(lambda: _encoding_stopped(url, "cam1"), proc, timeout=20)
        assert {s["id"]: s["state"] for s in stats()["sources"]}["cam1"] == "running"
    finally:
        log = _stop(proc, url)
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]  # a viewer leaving is no error


def _add_with_more_keys(page: Any, clip: Path) -> None:
    """The add form's keys (realtime, policy) and more keys as JSON reach POST /sources, whose rules
    refuse a wrong key in one line; a source that ended shows its last frame or an "ended" panel."""
    page.fill("#add-id", "cam3")
    page.fill("#add-uri", str(clip))
    page.fill("#add-more", '{"nope": 1}')
    page.click("#add-form button[type=submit]")
    page.wait_for_function("() => document.querySelector('#add-error').textContent.includes('nope')")
    page.check("#add-realtime")
    page.select_option("#add-policy", "block")
    page.fill("#add-more", '{"max_frames": 5}')
    with page.expect_request(lambda r: r.url.endswith("/sources") and r.method == "POST") as sent:
        page.click("#add-form button[type=submit]")
    assert json.loads(sent.value.post_data) == {"id": "cam3", "uri": str(clip), "realtime": True, "policy": "block",
                                                "max_frames": 5}  # fmt: skip
    page.wait_for_function("() => document.querySelector('article[data-source=cam3] .state')?.textContent === 'ended'")
    assert page.locator("article[data-source=cam3] [data-field=frames]").text_content() == "5"
    page.wait_for_function("() => { const c = document.querySelector('article[data-source=cam3]');"
                           " const img = c.querySelector('img.preview'), panel = c.querySelector('.panel');"
                           " return (!img.hidden && img.naturalWidth > 0 && panel.hidden)"
                           " || (img.hidden && !panel.hidden && panel.textContent === 'ended'); }")  # fmt: skip


def test_with_a_token_the_page_asks_for_it(tmp_path: Path, browser: Any) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _daemon(tmp_path / "out", port, VIDEOS / "carphone_pristine.mp4", "--set", "http.token=${FW_TOKEN}",
                   env={"FW_TOKEN": "s3cret"})  # fmt: skip
    try:
        _until(lambda: _get(url + "/readyz")[0] == 200, proc)
        assert _get(url + "/console/stats")[0] == 401 and _get(url + "/console/stats", "s3cret")[0] == 200
        page = browser.new_page()
        page.goto(url + "/")
        page.locator("#token-form").wait_for()
        assert page.locator("#console").is_hidden() and page.locator("article").count() == 0
        assert page.locator("#status").text_content() == "waiting for the token (http.token)"
        page.fill("#token", "wrong")
        page.click("#token-form button[type=submit]")
        page.wait_for_function("() => document.querySelector('#token-error').textContent.includes('refused')")
        page.fill("#token", "s3cret")
        page.click("#token-form button[type=submit]")
        page.locator("article[data-source=cam1]").wait_for()
        page.locator("#token-form").wait_for(state="hidden")
        page.close()
    finally:
        _stop(proc, url, "s3cret")
