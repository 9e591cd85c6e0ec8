"""Recordings as a new user tries them (issue 36): the default face job with tracking and a line, a
`recording` output with the passthrough recording, event clips and snapshots; a file, then a real
RTSP camera (tests.support.rtsp_server), then a SIGKILL while a clip is being written."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import av
import pytest

from framewire.media.history import CUT, History
from tests.e2e.helpers import VIDEOS, error_lines, read_jsonl, start_cli
from tests.support import clips, rtsp_server

pytestmark = pytest.mark.timeout(300)

LINE = "analytics={%s: {lines: [{name: door, start: [75, 10], end: [75, 140]}]}}"  # the face crosses x=75


def job(tmp: Path, uri: str, source: str, recording: str, *extra: str) -> list[str]:
    return [
        "run", "--no-progress", "--set", f"sources=[{{id: {source}, uri: '{uri}'{extra_source(extra)}}}]",
        "--set", f"outputs=[{{kind: jsonl, path: '{tmp}/{{source_id}}.jsonl'}}, {recording}]",
        "--set", "tracking={}", "--set", LINE % source, *(e for e in extra if not e.startswith("source:")),
    ]  # fmt: skip


def extra_source(extra: tuple[str, ...]) -> str:
    return "".join(", " + e.removeprefix("source:") for e in extra if e.startswith("source:"))


def crossings(records: list[dict[str, Any]]) -> list[float]:
    return [
        r["time"]
        for r in records
        if "seq" in r
        for e in r["results"]["analytics"]["events"]
        if e["event"] == "crossed"
    ]


def packet_hashes(path: Path) -> list[bytes]:
    with av.open(str(path)) as container:
        return [hashlib.sha1(bytes(p)).digest() for p in container.demux(video=0) if p.size]


def key_times(path: Path) -> list[float]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return [float(p.pts * stream.time_base) for p in container.demux(stream) if p.size and p.is_keyframe]


def test_a_file_gives_one_clip_per_run_of_crossings_with_snapshots_and_history(tmp_path: Path) -> None:
    source = VIDEOS / "carphone_pristine.mp4"
    folder = tmp_path / "rec"
    recording = (
        f"{{kind: recording, folder: '{folder}', passthrough: {{segment_s: 60}}, "
        "clips: {pre_s: 1, post_s: 1, annotated: true, events: [{event: crossed, line: door}]}, "
        "snapshots: {pick: best}}"
    )
    proc = start_cli(*job(tmp_path, str(source), "clip", recording, "--set", "composite=[{kind: boxes}]"))
    _, err = proc.communicate(timeout=200)
    assert proc.returncode == 0, err
    records = read_jsonl(tmp_path / "clip.jsonl")
    crossed = crossings(records)
    assert len(crossed) >= 2, "the clip is worth testing"
    announced = [r for r in records if r.get("event") == "clip" and not r.get("annotated")]
    assert announced, "each clip is announced on the sinks"
    annotated = [r for r in records if r.get("event") == "clip" and r.get("annotated")]
    assert len(annotated) == len(announced) and all(
        clips.count_frames(r["path"]) == r["frames"] > 0 for r in annotated
    )
    keys = key_times(source)
    for clip in announced:
        mine = [t for t in crossed if clip["first_event_s"] <= t <= clip["last_event_s"]]
        assert mine, clip
        start_key = max(k for k in keys if k <= max(mine[0] - 1.0, keys[0]))
        assert abs(clip["start_s"] - start_key) < 0.05, "it starts at the key frame at or before its pre-roll"
        assert clips.count_frames(clip["path"]) == clip["frames"] > 0, "a decoder reads it from start to end"
        end = min(mine[-1] + 1.0, [r for r in records if "seq" in r][-1]["time"])
        assert end - 0.05 <= clip["end_s"] <= end + 0.1, "it ends a post-roll after its last event"
    assert (
        sorted(t for c in announced for t in crossed if c["first_event_s"] <= t <= c["last_event_s"])
        == crossed
    )
    # The passthrough recording: the file's own packets, not re-encoded.
    assert packet_hashes(folder / "clip" / "rec-000000.mp4") == packet_hashes(source)
    history = History.open(str(folder / "events.db"), readonly=True)
    events = history.events(limit=500).items
    assert len(events) == len(crossed) and all(
        e["clip"] and os.path.getsize(e["snapshot"]) > 0 for e in events
    )
    walls = sorted(e["wall"] for e in events)
    middle = history.events(since=walls[1], until=walls[-1], limit=500).items
    assert sorted(e["wall"] for e in middle) == walls[1:-1], "a time range returns exactly those in it"
    history.close()


def test_an_rtsp_camera_is_recorded_as_it_sends_and_a_sigkill_keeps_the_clip_up_to_it(tmp_path: Path) -> None:
    port = rtsp_server.free_port()
    server = rtsp_server.spawn(port, clip=str(VIDEOS / "carphone_pristine.mp4"))
    folder = tmp_path / "rec"
    recording = (
        f"{{kind: recording, folder: '{folder}', passthrough: {{segment_s: 2}}, "
        "clips: {pre_s: 1, post_s: 30, events: [{event: track_started}]}}"
    )
    uri = f"rtsp://127.0.0.1:{port}/live"
    try:
        proc = start_cli(*job(tmp_path, uri, "cam", recording))
        db = folder / "events.db"
        deadline = time.monotonic() + 120
        while not _writing(db):  # a clip is being written: its post-roll runs for 30 s
            assert time.monotonic() < deadline and proc.poll() is None, "no clip was being written"
            time.sleep(0.2)
        time.sleep(3.0)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        # The passthrough segments play and hold the camera's own pictures.
        segments = sorted((folder / "cam").glob("rec-*.mp4"))
        assert len(segments) >= 2 and all(clips.count_frames(s) > 0 for s in segments), (
            "every named one plays"
        )
        served = _served_frames()
        recorded = [f.to_ndarray(format="gray") for f in av.open(str(segments[0])).decode(video=0)]
        assert all((recorded[i] == served[i % len(served)]).all() for i in range(len(recorded)))
        times = [t for s in segments for t in clips.video_times(s)]
        assert times == sorted(times) and len(set(times)) == len(times), "one timeline across the segments"
        # After a restart the cut clip plays up to the kill, the store is whole, nothing earlier is lost.
        proc = start_cli(*job(tmp_path, uri, "cam", recording, "source:max_frames: 25"))
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert not list((folder / "cam").glob("*.part")), (
            "what the killed run left without a fragment is gone"
        )
        history = History.open(str(db), readonly=True)
        cut = history.clips(state=CUT).items
        assert len(cut) == 1 and clips.count_frames(cut[0]["path"]) >= 50  # 3 s at 25 fps, less a fragment
        assert history.events(limit=500).items[-1]["clip"] == cut[0]["path"], "the first event is still there"
        assert history.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        history.close()
    finally:
        server.kill()
        server.wait(timeout=10)


def _writing(db: Path) -> bool:
    if not db.exists():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT count(*) FROM clips WHERE state = 'writing'").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def _served_frames() -> list[Any]:
    """What the test server sends, decoded: its own encoding of the clip (tests.support.rtsp_server)."""
    images, fps = rtsp_server.read_video(str(VIDEOS / "carphone_pristine.mp4"))
    units = rtsp_server.encode_frames(images, images[0].shape[1], images[0].shape[0], fps)
    codec = av.CodecContext.create("h264", "r")
    return [f.to_ndarray(format="gray") for unit in units for f in codec.decode(av.Packet(unit))]


def test_bad_recording_config_gets_one_line_naming_the_key(tmp_path: Path) -> None:
    source = VIDEOS / "carphone_pristine.mp4"
    cases = {
        "clips: {pre_s: 12, events: [{event: crossed}]}": "outputs.1.clips.pre_s",
        "clips: {events: [{event: crossed, line: kerb}]}": "outputs.1.clips.events.0.line",
        "clips: {events: [{event: track_started, labels: [car]}]}": "outputs.1.clips.events.0.labels",
    }
    (tmp_path / "file").write_text("")
    cases_folder = {"clips: {events: [{event: crossed}]}": ("outputs.1.folder", tmp_path / "file" / "rec")}
    for body, key in [*cases.items(), *((b, k) for b, (k, _) in cases_folder.items())]:
        folder = cases_folder[body][1] if body in cases_folder else tmp_path / "rec"
        proc = start_cli(
            *job(tmp_path, str(source), "clip", f"{{kind: recording, folder: '{folder}', {body}}}")
        )
        _, err = proc.communicate(timeout=120)
        lines = error_lines(err)
        assert proc.returncode == 2 and len(lines) == 1 and key in lines[0], (body, err)


def test_a_camera_that_reconnects_is_recorded_on_one_timeline_with_its_outage_as_a_gap(
    tmp_path: Path,
) -> None:
    port = rtsp_server.free_port()
    servers = [rtsp_server.spawn(port, clip=str(VIDEOS / "carphone_pristine.mp4"))]
    folder = tmp_path / "rec"
    recording = f"{{kind: recording, folder: '{folder}', passthrough: {{segment_s: 60}}}}"
    uri = f"rtsp://127.0.0.1:{port}/live"
    gap_s = 2.0
    try:
        reconnect = ("source:reconnect: {initial_s: 0.2, max_s: 0.5}", "source:timeout_s: 2")
        proc = start_cli(*job(tmp_path, uri, "cam", recording, *reconnect))
        _wait_for(lambda: len(_frames_recorded(tmp_path)) >= 50, proc)
        servers[0].kill()
        servers[0].wait(timeout=10)
        time.sleep(gap_s)
        servers.append(rtsp_server.spawn(port, clip=str(VIDEOS / "carphone_pristine.mp4")))
        segments_then = lambda: len(list((folder / "cam").glob("rec-*.mp4")))  # noqa: E731
        _wait_for(lambda: segments_then() >= 2 and len(_frames_recorded(tmp_path)) >= 150, proc)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        for server in servers:
            server.kill()
            server.wait(timeout=10)
    segments = sorted((folder / "cam").glob("rec-*.mp4"))
    assert len(segments) >= 2, "a reconnect starts a segment"
    assert all(key_times(s) and key_times(s)[0] == clips.video_times(s)[0] for s in segments), (
        "each at a key frame"
    )
    times = [t for s in segments for t in clips.video_times(s)]
    steps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert min(steps) > 0, "one timeline: every picture after the one before"
    assert gap_s * 0.8 <= max(steps) <= gap_s + 10, "the outage is a gap in it"


def _frames_recorded(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "cam.jsonl"
    return read_jsonl(path) if path.exists() else []


def _wait_for(condition: Any, proc: Any, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except ValueError:  # a JSON line half written
            pass
        assert time.monotonic() < deadline and proc.poll() is None, "the daemon did not get there"
        time.sleep(0.2)


def test_retention_prunes_the_oldest_clips_first_and_never_the_one_being_written(tmp_path: Path) -> None:
    """The street clip's track starts (NanoDet and ByteTrack, as configs/showcase.yaml) cut into clips
    of at most 2 s, with room for about two: as each closes, the oldest go, never one not yet closed."""
    folder = tmp_path / "rec"
    limit = 250_000
    recording = (
        f"{{kind: recording, folder: '{folder}', retention: {{bytes: {limit}}}, "
        "clips: {pre_s: 0.5, post_s: 0.5, max_s: 2, events: [{event: track_started}]}}"
    )
    proc = start_cli(
        "run", "-c", "configs/showcase.yaml", "--no-progress", "--set", "composite=[]",
        "--set", f"outputs=[{{kind: jsonl, path: '{tmp_path}/{{source_id}}.jsonl'}}, {recording}]",
    )  # fmt: skip
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    announced = [r for r in read_jsonl(tmp_path / "bikes.jsonl") if r.get("event") == "clip"]
    assert len(announced) >= 4, "the clip is worth testing"
    closed: list[str] = []
    deleted: list[str] = []
    for clip in announced:
        closed.append(clip["path"])
        assert all(path in closed for path in clip["deleted"]), "only clips already closed are pruned"
        deleted += clip["deleted"]
    assert deleted == closed[: len(deleted)], "the oldest first"
    kept = [p for p in closed if p not in deleted]
    assert kept == closed[len(deleted) :] and all(os.path.exists(p) for p in kept)
    assert not any(os.path.exists(p) for p in deleted)
    assert sum(os.path.getsize(p) for p in kept) <= limit
    assert deleted, "retention had something to do"
