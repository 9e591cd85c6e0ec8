"""The event history over HTTP (pipeline.ops.recordings, app.history_http) on a real socket, against a
real store (media.history) written as a recording output writes it: a time-range query returns exactly
the events in it, the filters and pages, the clip served with Range requests, the snapshot, the token."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framewire.app.history_http import HistoryStore
from framewire.media.history import DB, History
from framewire.pipeline.ops.control import ControlServer
from framewire.pipeline.ops.metrics import Metrics

pytestmark = pytest.mark.timeout(60)

TOKEN = "s3cret"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
T0 = 1_760_000_000.0
CLIP = bytes(range(256)) * 40  # 10240 bytes: the ranges below are checked byte for byte
JPEG = b"\xff\xd8\xff\xe0" + b"j" * 500 + b"\xff\xd9"


def get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, bytes, Any]:
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers


def listing(url: str) -> dict[str, Any]:
    status, body, headers = get(url, BEARER)
    assert status == 200 and headers["Content-Type"] == "application/json", body
    return dict(json.loads(body))


def _store(folder: Path) -> tuple[list[int], int]:
    """Ten events a second apart on two sources (one line, one zone), the first four in one clip."""
    history = History.open(str(folder / DB))
    clip_path = folder / "cam" / "clips" / "a.mp4"
    clip_path.parent.mkdir(parents=True)
    clip_path.write_bytes(CLIP)
    clip = history.start_clip("cam", str(clip_path), T0 - 3, 0.0)
    ids = []
    for n in range(10):
        place = {"line": "kerb"} if n % 2 == 0 else {"zone": "door"}
        kind = "crossed" if n % 2 == 0 else "entered"
        event = {"source": "cam" if n < 7 else "gate", "event": kind, "label": "person" if n % 3 else "car",
                 "wall": T0 + n, "time": float(n), **place}  # fmt: skip
        ids.append(history.add_event(event, clip if n < 4 else None))
    shot = folder / "cam" / "snapshots" / f"{ids[1]}.jpg"
    shot.parent.mkdir(parents=True)
    shot.write_bytes(JPEG)
    history.put_snapshot(ids[1], "cam", str(shot))
    history.finish_clip(clip, T0 + 8, 11.0, 330, len(CLIP))
    history.close()
    return ids, clip


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, list[int], int]]:
    ids, clip = _store(tmp_path)
    stores = (HistoryStore("output1.recording", str(tmp_path / DB)),
              HistoryStore("output2.recording", str(tmp_path / "none-yet" / DB)))  # fmt: skip
    server = ControlServer("127.0.0.1", 0, TOKEN, Metrics(), lambda: {"live": True}, stores=stores)
    server.start()
    try:
        yield server.url, ids, clip
    finally:
        server.stop()


def test_a_time_range_query_returns_exactly_the_events_in_it(served: tuple[str, list[int], int]) -> None:
    url, ids, _ = served
    page = listing(f"{url}/events?since={T0 + 3}&until={T0 + 7}")
    assert [e["id"] for e in page["events"]] == [ids[6], ids[5], ids[4], ids[3]]  # since in, until out
    assert [e["wall"] for e in page["events"]] == [T0 + 6, T0 + 5, T0 + 4, T0 + 3]
    assert page["next"] is None and page["output"] == "output1.recording"
    assert listing(f"{url}/events?since={T0 + 20}")["events"] == []


def test_pages_follow_the_cursor_to_the_end(served: tuple[str, list[int], int]) -> None:
    url, ids, _ = served
    seen, before = [], ""
    while True:
        page = listing(f"{url}/events?limit=3{before}")
        seen += [e["id"] for e in page["events"]]
        if page["next"] is None:
            break
        before = f"&before={page['next']}"
    assert seen == ids[::-1]


@pytest.mark.parametrize(
    "query, wanted",
    [("source=gate", [9, 8, 7]), ("label=car", [9, 6, 3, 0]), ("place=door", [9, 7, 5, 3, 1]),
     ("line=kerb", [8, 6, 4, 2, 0]), ("zone=door&source=cam&label=person", [5, 1]),
     ("event=crossed&until=1760000003", [2, 0])],
)  # fmt: skip
def test_events_are_filtered_by_source_label_line_or_zone(
    served: tuple[str, list[int], int], query: str, wanted: list[int]
) -> None:
    url, ids, _ = served
    assert [e["id"] for e in listing(f"{url}/events?{query}")["events"]] == [ids[n] for n in wanted]


def test_an_event_carries_the_urls_of_its_clip_and_snapshot(served: tuple[str, list[int], int]) -> None:
    url, ids, clip = served
    events = {e["id"]: e for e in listing(f"{url}/events")["events"]}
    assert events[ids[1]]["clip_url"] == f"/clips/{clip}?output=output1.recording"
    assert events[ids[1]]["snapshot_url"] == f"/snapshots/{ids[1]}?output=output1.recording"
    assert events[ids[2]]["snapshot_url"] is None and events[ids[5]]["clip_url"] is None
    status, body, headers = get(url + events[ids[1]]["snapshot_url"] + f"&token={TOKEN}")
    assert (status, body, headers["Content-Type"]) == (200, JPEG, "image/jpeg")


def test_the_clips_list_their_events_and_url(served: tuple[str, list[int], int]) -> None:
    url, ids, clip = served
    (found,) = listing(f"{url}/clips?source=cam")["clips"]
    assert (found["id"], found["state"], found["events"]) == (clip, "done", ids[:4])
    assert found["url"] == f"/clips/{clip}?output=output1.recording"
    assert listing(f"{url}/clips?since={T0}")["clips"] == []  # it started at T0 - 3


def test_a_clip_is_served_as_mp4_with_range_requests(served: tuple[str, list[int], int]) -> None:
    url, _, clip = served
    status, body, headers = get(f"{url}/clips/{clip}", BEARER)
    assert (status, body, headers["Content-Type"]) == (200, CLIP, "video/mp4")
    assert headers["Accept-Ranges"] == "bytes"
    status, body, headers = get(f"{url}/clips/{clip}?token={TOKEN}", {"Range": "bytes=1000-1999"})
    assert (status, body) == (206, CLIP[1000:2000])
    assert headers["Content-Range"] == f"bytes 1000-1999/{len(CLIP)}"
    status, body, _ = get(f"{url}/clips/{clip}", {"Cookie": f"framewire_token={TOKEN}", "Range": "bytes=-24"})
    assert (status, body) == (206, CLIP[-24:])
    status, body, headers = get(f"{url}/clips/{clip}", BEARER, method="HEAD")
    assert (status, body, headers["Content-Length"]) == (200, b"", str(len(CLIP)))


@pytest.mark.parametrize(
    "path, headers",
    [("/events", {}), ("/clips", {"Authorization": "Bearer nope"}), ("/clips/1", {}),
     ("/clips/1?token=nope", {}), ("/snapshots/2", {})],
)  # fmt: skip
def test_without_the_token_the_answer_is_401(
    served: tuple[str, list[int], int], path: str, headers: dict[str, str]
) -> None:
    status, body, _ = get(served[0] + path, headers)
    assert status == 401 and "token" in json.loads(body)["error"]


@pytest.mark.parametrize(
    "path, status, words",
    [("/events?since=yesterday", 400, "since: 'yesterday' is not a time"),
     ("/events?limit=0", 400, "limit: '0' is not a whole number"),
     ("/events?colour=red", 400, "colour: not a filter"),
     ("/clips?label=car", 400, "label: not a filter here (takes source, state, since"),
     ("/events?output=output9.recording", 404, "output: no recording output 'output9.recording'"),
     ("/clips/999", 404, "no clip 999 in output1.recording"), ("/clips/x", 404, "no clip 'x'"),
     ("/snapshots/1", 404, "no snapshot of event 1")],
)  # fmt: skip
def test_a_question_it_cannot_answer_gets_one_line(
    served: tuple[str, list[int], int], path: str, status: int, words: str
) -> None:
    got, body, _ = get(served[0] + path, BEARER)
    assert got == status and words in json.loads(body)["error"]


def test_a_store_not_made_yet_answers_empty_pages(served: tuple[str, list[int], int]) -> None:
    page = listing(f"{served[0]}/events?output=output2.recording")
    assert page == {"output": "output2.recording", "events": [], "next": None,
                    "outputs": ["output1.recording", "output2.recording"]}  # every one reachable


def test_a_job_without_a_history_says_so(tmp_path: Path) -> None:
    server = ControlServer("127.0.0.1", 0, None, Metrics(), lambda: {"live": True})
    server.start()
    try:
        status, body, _ = get(server.url + "/events")
    finally:
        server.stop()
    assert status == 404 and json.loads(body)["error"] == "no recording output with clips in this job"
