"""/hls/<source>/<file> on the daemon's HTTP server (a real socket): the token as a bearer header,
`?token=` (then written into the playlist's segment lines) or the cookie; only an hls output's own
file names are served, from the folder its template names for that source."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from framewire.pipeline.ops.control import ControlServer
from framewire.pipeline.ops.hls import with_token
from framewire.pipeline.ops.metrics import Metrics

pytestmark = pytest.mark.timeout(60)

TOKEN = "t0k/+="
PLAYLIST = b"#EXTM3U\n#EXT-X-MEDIA-SEQUENCE:3\n#EXTINF:2.000000,\nseg00003.ts\n#EXTINF:2.000000,\nseg00004.ts\n"


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers.get("Content-Type", "")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    folder = tmp_path / "hls" / "cam"
    folder.mkdir(parents=True)
    (folder / "index.m3u8").write_bytes(PLAYLIST)
    (folder / "seg00003.ts").write_bytes(b"\x47" * 188)
    (folder / "secret.txt").write_text("not served")
    (tmp_path / "hls" / "other.ts").write_bytes(b"\x47" * 188)
    template = str(tmp_path / "hls" / "{source_id}")
    server = ControlServer("127.0.0.1", 0, TOKEN, Metrics(), lambda: {"live": True, "ready": True}, hls_folders=(template,))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def test_the_playlist_and_segments_are_served_with_a_bearer_header(served: str) -> None:
    status, body, kind = get(served + "/hls/cam/index.m3u8", {"Authorization": f"Bearer {TOKEN}"})
    assert (status, body, kind) == (200, PLAYLIST, "application/vnd.apple.mpegurl")
    status, body, kind = get(served + "/hls/cam/seg00003.ts", {"Authorization": f"Bearer {TOKEN}"})
    assert (status, len(body), kind) == (200, 188, "video/mp2t")


def test_a_query_token_is_carried_into_the_segment_lines(served: str) -> None:
    status, body, _ = get(served + "/hls/cam/index.m3u8?token=t0k%2F%2B%3D")
    assert status == 200
    lines = body.decode().splitlines()
    assert lines[3] == "seg00003.ts?token=t0k%2F%2B%3D" and lines[1] == "#EXT-X-MEDIA-SEQUENCE:3"
    assert get(served + "/hls/cam/" + lines[3])[0] == 200  # what the player asks next


def test_the_cookie_carries_the_token(served: str) -> None:
    assert get(served + "/hls/cam/index.m3u8", {"Cookie": 'a=b; framewire_token="t0k/+="'})[0] == 200


@pytest.mark.parametrize("headers, query", [({}, ""), ({"Authorization": "Bearer nope"}, ""), ({}, "?token=nope")])
def test_without_the_right_token_the_answer_is_401(served: str, headers: dict[str, str], query: str) -> None:
    status, body, kind = get(served + "/hls/cam/index.m3u8" + query, headers)
    assert status == 401 and kind == "application/json" and b"token" in body


@pytest.mark.parametrize(
    "path", ["/hls/cam/secret.txt", "/hls/cam/seg00009.ts", "/hls/nosuch/index.m3u8", "/hls/../other.ts",
             "/hls/cam/..%2Fother.ts", "/hls/%2E%2E/other.ts"],
)  # fmt: skip
def test_only_an_outputs_own_files_are_served(served: str, path: str) -> None:
    status, body, _ = get(served + path, {"Authorization": f"Bearer {TOKEN}"})
    assert status == 404, body


def test_routes(served: str) -> None:
    for path in ("/hls/cam", "/hls/a/b/c", "/hls/cam/"):
        assert get(served + path, {"Authorization": f"Bearer {TOKEN}"})[:2] == (404, b'{"error": "no such endpoint: %s"}' % path.encode())
    assert with_token(b"#EXTM3U\nseg00001.ts\n", "a b") == b"#EXTM3U\nseg00001.ts?token=a%20b\n"
