"""Changing a running job's lines and zones, as a user does it: a 3-source paced face job with
tracking, a zone added to one source over the API, a line moved on another by drawing it on the
preview in the console (a real Chromium), then SIGTERM and a restart. The records follow the new
geometry from the next frame each source's tracking stage sees after the change (and no earlier
than the `configured` event line), the line's counts carry on, the third source is untouched, no
frame is lost on any, and the restarted job starts with the changes (the state file)."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import av
import pytest

from tests.e2e.helpers import VIDEOS, YUNET, run_cli, start_cli
from tests.support.components import chromium
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(240)

OLD_LINE = [[75.0, 10.0], [75.0, 140.0]]
NEW_LINE = [[110.0, 10.0], [110.0, 140.0]]  # drawn in the console
ZONE = [[0, 0], [75, 0], [75, 143], [0, 143]]  # added over the API; the face moves in and out of it
IN_FLIGHT = 16  # transport.slots_per_source: frames of a source past its tracking stage at most


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium()), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def _pingpong(path: Path, frames: int) -> Path:
    """The shipped face clip (176x144) forwards and backwards until `frames` frames, at 25 fps: the
    face keeps crossing x=75 for as long as the job runs."""
    with av.open(str(VIDEOS / "carphone_pristine.mp4")) as clip:
        pictures = [f.to_ndarray(format="bgr24") for f in clip.decode(video=0)]
    order = pictures + pictures[-2:0:-1]
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 176, 144, "yuv420p"
        stream.options = {"preset": "ultrafast", "crf": "23"}
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(order[index % len(order)], format="bgr24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def _config(tmp: Path, clip: Path, port: int) -> Path:
    sources = "\n".join(f"  - {{id: {s}, uri: '{clip}', policy: block, realtime: true}}" for s in "abc")
    text = f"""version: 1
sources:
{sources}
model: {{path: '{YUNET}', task: face_detection, score_threshold: 0.7, nms_threshold: 0.3, input_size: auto}}
tracking: {{}}
analytics:
  b: {{lines: [{{name: door, start: [75, 10], end: [75, 140]}}]}}
engine: {{backend: onnxruntime, providers: [cpu], threads: 1, processes_per_device: 2}}
stages: {{fuse: true, fuse_outputs: true}}
outputs: [{{kind: jsonl, path: '{tmp}/out/{{source_id}}.jsonl'}}]
http: {{enabled: true, port: {port}, state_file: '{tmp}/state/sources.json'}}
"""
    path = tmp / "job.yaml"
    path.write_text(text)
    return path


def _call(url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")
    except OSError:
        return 0, None


def _until(predicate: Callable[[], Any], proc: subprocess.Popen[str], timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.1)
    return value


def _lines(path: Path) -> list[dict[str, Any]]:
    """A jsonl output's lines (records and event lines), those written in full so far."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _analytics(record: dict[str, Any]) -> dict[str, Any] | None:
    return record.get("results", {}).get("analytics")


def _door(record: dict[str, Any]) -> list[list[float]] | None:
    analytics = _analytics(record)
    return analytics["lines"]["door"]["points"] if analytics and "door" in analytics["lines"] else None


def _crossed(record: dict[str, Any]) -> int:
    """The door line's crossings so far, both ways, as the record counts them."""
    analytics = _analytics(record)
    if not analytics or "door" not in analytics["lines"]:
        return 0
    return sum(sum(analytics["lines"]["door"][d].values()) for d in ("in", "out"))


def _has_zone(record: dict[str, Any]) -> bool:
    analytics = _analytics(record)
    return bool(analytics and "left" in analytics["zones"])


def _in_zone(record: dict[str, Any]) -> int:
    """The tracked faces whose anchor (bottom-centre) is on the zone's mask, counted from the record's
    own boxes as stages.analytics rounds them: the zone's occupancy, recounted."""
    count = 0
    for d in record["results"]["detections"]:
        if d.get("track_id") is None:
            continue
        x, y, w, h = d["box"]
        ax, ay = math.ceil(min(max(x + w / 2, 0.0), 76.0)), math.ceil(min(max(y + h, 0.0), 144.0))
        count += ax <= 75 and ay <= 143
    return count


def _switch(lines: list[dict[str, Any]], new: Callable[[dict[str, Any]], bool]) -> tuple[int, int, int]:
    """(index of the `configured` event line, seq of the first record with the new settings, records
    after the event line that still had the old ones); every record before that seq has the old
    ones, every record from it the new."""
    event = next(i for i, line in enumerate(lines) if line.get("event") == "configured")
    records = [line for line in lines if "seq" in line]
    first = next(r["seq"] for r in records if new(r))
    assert all(new(r) == (r["seq"] >= first) for r in records)
    assert all(not new(line) for line in lines[:event] if "seq" in line)  # none before the event
    seq_after_event = next(line["seq"] for line in lines[event:] if "seq" in line)
    assert first - seq_after_event <= IN_FLIGHT  # the next frames the tracking stage saw
    return event, first, first - seq_after_event


def _draw_line(page: Any, card: Any, points: list[list[float]]) -> None:
    """Draw the line `points` (frame pixels) on the card's preview and save it as `door`."""
    card.locator("button.draw-line").click()
    box = card.locator("canvas.overlay").bounding_box()
    natural = (176, 144)  # the preview of a 176x144 source is not shrunk (http.console.preview_width)
    scale = min(box["width"] / natural[0], box["height"] / natural[1])
    left = box["x"] + (box["width"] - natural[0] * scale) / 2
    top = box["y"] + (box["height"] - natural[1] * scale) / 2
    k = natural[0] * scale / 176
    for x, y in points:
        page.mouse.click(left + x * k, top + y * k)
    card.locator("input.shape-name").fill("door")
    card.locator("button.save-shape").click()
    card.locator(".draw-status", has_text="saved line door").wait_for(timeout=20000)


def test_a_zone_added_and_a_line_drawn_count_from_the_next_frame_and_stay(tmp_path: Path, browser: Any) -> None:
    clip = _pingpong(tmp_path / "faces.mp4", 1500)  # 60 s paced: SIGTERM ends it once the changes are in
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = _config(tmp_path, clip, port)
    out = tmp_path / "out"
    proc = start_cli("run", "-c", str(config), "--no-progress")
    try:
        running = lambda: (s := _call(url + "/sources"))[0] == 200 and all(  # noqa: E731
            x["frames"] > 10 for x in s[1]["sources"])
        _until(running, proc)
        # Refused in one line naming the key; the source is untouched.
        bad = {"zones": [{"name": "left", "polygon": [[0, 0], [75, 0]]}]}
        assert _call(url + "/sources/a", "PATCH", bad) == (400, {"error": "zones.0.polygon: a polygon needs at "
                                                                 "least 3 points, this one has 2 (got [[0, 0], [75, 0]])"})
        assert _call(url + "/sources/c", "PATCH", {"lines": [{"name": "x", "start": [0, 0], "end": [500, 0]}]}) == (
            400, {"error": "lines.0: 'x' has the point [500, 0] outside the 176x144 frame"})
        status, answer = _call(url + "/sources/a", "PATCH", {"zones": [{"name": "left", "polygon": ZONE}]})
        assert status == 200 and answer["settings"]["zones"][0]["name"] == "left", answer

        page = browser.new_page(viewport={"width": 1200, "height": 900})
        problems: list[str] = []
        page.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
        page.goto(url + "/")
        card_a, card_b = page.locator("article[data-source=a]"), page.locator("article[data-source=b]")
        # The live counts, from the event stream: the zone added over the API and the config's line.
        card_a.locator("li[data-shape='zone:left']").wait_for(timeout=30000)
        card_b.locator("li[data-shape='line:door']").wait_for(timeout=30000)
        page.wait_for_function("() => document.querySelector('article[data-source=b] img.preview').naturalWidth > 0")
        # The config's line counts a crossing first (the face crosses x=75 every few seconds), however
        # fast the job got here: the count the move must carry over.
        _until(lambda: any(_crossed(r) > 0 for r in _lines(out / "b.jsonl")), proc)
        _draw_line(page, card_b, NEW_LINE)
        status, shown = _call(url + "/sources/b")
        drawn = shown["settings"]["lines"][0]
        ends = [v for point in (drawn["start"], drawn["end"]) for v in point]
        assert drawn["name"] == "door", drawn
        assert ends == pytest.approx([v for point in NEW_LINE for v in point], abs=1.5), drawn
        # The console draws the moved line with its counts once a frame has it.
        page.wait_for_function(
            "() => document.querySelector('article[data-source=b] li[data-shape=\"line:door\"]') !== null")
        assert problems == []
        page.close()
        _until(lambda: any(_door(r) not in (None, OLD_LINE) for r in _lines(out / "b.jsonl")), proc)
        _until(lambda: any(_has_zone(r) for r in _lines(out / "a.jsonl")), proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err

    lines = {s: _lines(out / f"{s}.jsonl") for s in "abc"}
    for source, got in lines.items():  # no frame lost: every seq once, as many as the summary says
        seqs = [r["seq"] for r in got if "seq" in r]
        assert seqs == list(range(len(seqs))), source
        assert f"{source}: {len(seqs)} frames" in err, err
    event, first, lag_a = _switch(lines["a"], _has_zone)
    records_a = [r for r in lines["a"] if "seq" in r]
    assert all(_analytics(r) is None for r in records_a[:first])  # it had no lines or zones before
    occupancy = [sum(_analytics(r)["zones"]["left"]["occupancy"].values()) for r in records_a[first:]]
    assert occupancy == [_in_zone(r) for r in records_a[first:]] and 0 in occupancy and 1 in occupancy
    event, moved, lag_b = _switch(lines["b"], lambda r: _door(r) != OLD_LINE)
    records_b = [r for r in lines["b"] if "seq" in r]
    totals = [sum(sum(_analytics(r)["lines"]["door"][d].values()) for d in ("in", "out")) for r in records_b]
    assert totals == sorted(totals) and totals[-1] > 0  # carried over the move, never reset
    assert lines["b"][event]["settings"]["lines"][0]["name"] == "door"
    assert all(_analytics(r) is None for r in lines["c"]) and not any("event" in r for r in lines["c"])
    print(f"a: zone from seq {first} ({lag_a} records after the event still old); b: line moved from seq "
          f"{moved} ({lag_b} after the event); crossings {totals[moved - 1]} -> {totals[-1]}")

    # Restarted: the state file's changes apply before the first frame.
    out.rename(tmp_path / "first-run")
    paced_off = [a for s in range(3) for a in ("--set", f"sources.{s}.max_frames=20", "--set", f"sources.{s}.realtime=false")]
    again = run_cli("run", "-c", str(config), "--no-progress", *paced_off)
    assert again.returncode == 0, again.stderr
    restarted = {s: [r for r in _lines(out / f"{s}.jsonl") if "seq" in r] for s in "abc"}
    assert [len(r) for r in restarted.values()] == [20, 20, 20]
    assert all(_has_zone(r) for r in restarted["a"])
    assert all(_door(r) == _door(records_b[-1]) for r in restarted["b"])
    assert all(_analytics(r) is None for r in restarted["c"])


def test_a_corrupt_state_file_stops_the_start_in_one_line_naming_it(tmp_path: Path) -> None:
    state = tmp_path / "sources.json"
    state.write_text('{"version": 1, "sources": {')
    done = run_cli("run", "--no-progress", "--set", "http.enabled=true", "--set", "http.port=0",
                   "--set", f"http.state_file={state}", "--set", f"outputs=[{{kind: jsonl, path: '{tmp_path}/x.jsonl'}}]")
    lines = [line for line in done.stderr.splitlines() if line.startswith("framewire: error:")]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"framewire: error: http.state_file: {state} is not JSON (") and "Traceback" not in done.stderr
    assert not (tmp_path / "x.jsonl").exists() and state.read_text() == '{"version": 1, "sources": {'  # left as it was
