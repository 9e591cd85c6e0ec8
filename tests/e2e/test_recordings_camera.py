"""Issue 36's acceptance as a new user tries it: a street camera served by a real RTSP server
(GStreamer's, tests.support.gst_rtsp_server) carrying the shipped street clip's own packets, the
showcase's COCO detector (NanoDet-m 416), ByteTrack and line, and a `recording` output with the
passthrough recording, event clips (pre-roll 3 s, post-roll 5 s) and snapshots:

- every crossing is in one clip, which a decoder reads from its first picture to its last; the clip
  starts at the key frame at or before 3 s before its first crossing (so within one key-frame
  interval of it) and ends 5 s after its last;
- the passthrough recording holds the camera's packets unchanged (the same H.264 NAL units, the same
  times, the same pictures);
- the HTTP API lists every crossing with its snapshot, and a time range returns exactly those in it.

The camera is read with `live: false` so that every picture reaches the model and the crossings are
the showcase's, whatever the load on the machine; the recording is the same either way (the packets
are taken before the frames are dropped or not: framewire/sources/packets.py).
"""

from __future__ import annotations

import itertools
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from tests.e2e.helpers import ROOT, VIDEOS, read_jsonl, start_cli
from tests.support import clips, gst_rtsp_server
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(600)

PRE_S, POST_S = 3.0, 5.0
PIECES = [(3.04, 7.48), (0.0, 10.0), (3.04, 7.48)]
"""bikes.mp4 (10 s, key frames at 0, 1.2, 3.04, 5.48, 7.48 and 9.68 s, B-frames) with a stretch of
its middle, where nobody crosses, before and after it: so the first crossing has its whole pre-roll
and the last its whole post-roll. Its packets are copied, not re-encoded (clips.splice_gops)."""
PARAMETER_SETS = (7, 8, 9)
"""SPS, PPS and access unit delimiters: the RTSP stream carries them in-band (GStreamer's
config-interval), the file in its header; the pictures' NAL units are the packets' content."""


def served_clip(tmp: Path) -> Path:
    return clips.splice_gops(VIDEOS / "bikes.mp4", tmp / "street.mp4", PIECES)


def demuxed(path: Path) -> list[tuple[float, bool, list[bytes]]]:
    """(time, key, the NAL units but parameter sets) of every video packet, in decode order."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.time_base is not None
        return [
            (round(float(p.pts * stream.time_base), 4), p.is_keyframe, nal_units(bytes(p)))
            for p in container.demux(stream)
            if p.size
        ]


def nal_units(data: bytes) -> list[bytes]:
    """The NAL units of an MP4 sample (4-byte lengths), without SPS, PPS and delimiters."""
    units, at = [], 0
    while at + 4 <= len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        unit = data[at + 4 : at + 4 + size]
        if unit and unit[0] & 0x1F not in PARAMETER_SETS:
            units.append(unit)
        at += 4 + size
    return units


def pictures(path: Path) -> dict[float, np.ndarray]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.time_base is not None
        return {
            round(float(f.pts * stream.time_base), 4): f.to_ndarray(format="gray")
            for f in container.decode(stream)
        }


def _get(url: str) -> tuple[int, bytes, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers
    except OSError:  # not listening yet
        return 0, b"", {}


def _events(url: str, query: str = "") -> list[dict[str, Any]]:
    status, body, _ = _get(f"{url}/events?limit=500{query}")
    assert status == 200, body
    return list(json.loads(body)["events"])


def _ended(url: str) -> bool:
    status, body, _ = _get(url + "/sources")
    return status == 200 and [s["state"] for s in json.loads(body)["sources"]] == ["ended"]


def test_a_street_camera_over_rtsp_gives_clips_with_pre_and_post_roll_a_passthrough_and_history(
    tmp_path: Path,
) -> None:
    served = served_clip(tmp_path)
    server, port = gst_rtsp_server.spawn(served)
    http_port = free_port()
    url = f"http://127.0.0.1:{http_port}"
    folder = tmp_path / "rec"
    recording = (
        f"{{kind: recording, folder: '{folder}', passthrough: {{segment_s: 60}}, "
        f"clips: {{pre_s: {PRE_S}, post_s: {POST_S}, events: [{{event: crossed, line: crossing}}]}}, "
        "snapshots: {pick: best}}"
    )
    proc = start_cli(
        "run", "-c", str(ROOT / "configs" / "showcase.yaml"), "--no-progress",
        "--set", f"sources=[{{id: bikes, uri: 'rtsp://127.0.0.1:{port}/live', live: false}}]",
        "--set", f"outputs=[{{kind: jsonl, path: '{tmp_path}/{{source_id}}.jsonl'}}, {recording}]",
        "--set", "composite=[]", "--set", "http.enabled=true", "--set", f"http.port={http_port}",
        "--set", "http.keep_running=true", cwd=ROOT,
    )  # fmt: skip
    try:
        _wait(lambda: _ended(url), proc)
        events = _events(url)
        api = _ask_the_api(url, events)
        stop = urllib.request.Request(url + "/stop", method="POST")
        urllib.request.urlopen(stop, timeout=10)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        server.kill()
        server.wait(timeout=10)

    records = read_jsonl(tmp_path / "bikes.jsonl")
    frames = [r for r in records if "seq" in r]
    assert len(frames) == 472, "every picture the camera sent reached the model"
    crossed = [
        r["time"] for r in frames for e in r["results"]["analytics"]["events"] if e["event"] == "crossed"
    ]
    assert len(crossed) >= 2, "the showcase's two people cross the line"

    source_packets = demuxed(served)
    keys = [t for t, key, _ in source_packets if key]
    interval = max(b - a for a, b in itertools.pairwise(keys))
    reorder = 3 / 25  # a picture shown up to three after it is decoded (B-frames): the clip's last packet
    announced = [r for r in records if r.get("event") == "clip"]
    assert announced, "each clip is announced on the sinks"
    in_clips: list[float] = []
    served_pictures = pictures(served)
    for clip in announced:
        mine = [t for t in crossed if clip["first_event_s"] <= t <= clip["last_event_s"]]
        assert mine and mine[0] == clip["first_event_s"] and mine[-1] == clip["last_event_s"], clip
        in_clips += mine
        path = Path(clip["path"])
        shown = pictures(path)
        assert len(shown) == clip["frames"] > 0, "a decoder reads the clip from start to end"
        assert all(np.array_equal(image, served_pictures[t]) for t, image in shown.items()), (
            "the clip holds the camera's pictures"
        )
        first_packet = demuxed(path)[0]
        assert first_packet[1] and first_packet[0] == clip["start_s"], "it starts at a key frame"
        assert clip["start_s"] == max(k for k in keys if k <= mine[0] - PRE_S + 1e-6)
        assert 0 <= mine[0] - PRE_S - clip["start_s"] < interval, (
            "within one key-frame interval of its pre-roll"
        )
        assert mine[-1] + POST_S - 0.01 <= max(shown) <= mine[-1] + POST_S + reorder, (
            "it ends a post-roll after"
        )
        assert clip["end_s"] <= mine[-1] + POST_S + reorder + 0.05
    assert sorted(in_clips) == sorted(crossed), "every crossing is in one clip"

    # The passthrough recording: the camera's own packets, in order, at their times, not re-encoded.
    segments = sorted((folder / "bikes").glob("rec-*.mp4"))
    recorded = [p for s in segments for p in demuxed(s)]
    assert recorded == source_packets
    assert all(np.array_equal(served_pictures[t], image) for t, image in pictures(segments[0]).items())

    # The API: every crossing with its snapshot and its clip; a time range returns exactly those in it.
    assert [e["event"] for e in events] == ["crossed"] * len(crossed)
    assert sorted(e["time_s"] for e in events) == sorted(crossed)
    assert {url + e["clip_url"] for e in events} == {r["url"] for r in announced}
    assert api["snapshots"] == [(200, "image/jpeg", True)] * len(events)
    assert api["clips"] == [(200, "video/mp4", True)] * len(events)
    family = "framewire_output_messages_total"
    dropped = [
        f'{family}{{counter="packets_{what}",output="output1.recording"}} 0.0' for what in ("lost", "trimmed")
    ]
    assert api["metrics"] == dropped, "no packet was dropped on the way to the clips, and the metrics say so"
    walls = sorted(e["wall"] for e in events)
    for i, wall in enumerate(walls):
        assert api["until"][i] == walls[:i] and api["since"][i] == walls[i:], "exactly those in the range"


def _ask_the_api(url: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    """What the API serves while the daemon runs: each event's snapshot and clip (status, type,
    whether the body is one), and the events since and until each event's time."""
    answers: dict[str, Any] = {"snapshots": [], "clips": [], "since": [], "until": []}
    _, body, _ = _get(url + "/metrics")
    answers["metrics"] = sorted(
        line for line in body.decode().splitlines() if line.startswith("framewire_output_messages_total")
    )
    for event in events:
        status, body, headers = _get(url + event["snapshot_url"])
        answers["snapshots"].append((status, headers.get("Content-Type"), body[:3] == b"\xff\xd8\xff"))
        status, body, headers = _get(url + event["clip_url"])
        answers["clips"].append((status, headers.get("Content-Type"), body[4:8] == b"ftyp"))
    walls = sorted(e["wall"] for e in events)
    first = walls[0]
    for wall in walls:
        answers["until"].append(sorted(e["wall"] for e in _events(url, f"&since={first!r}&until={wall!r}")))
        answers["since"].append(sorted(e["wall"] for e in _events(url, f"&since={wall!r}")))
    return answers


def _wait(condition: Any, proc: Any, timeout_s: float = 480) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "the daemon exited"
        assert time.monotonic() < deadline, "the camera's stream did not end in time"
        time.sleep(0.5)
