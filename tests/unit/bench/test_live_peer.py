"""`bench budget --peer`: the plain loop a stream that runs beside framewire on the same streams.
Its newest-frame hand-off, its statistics over a window of wall time, its shares, and the loop
itself as a real process on a real clip: every decoded frame is put out, replaced or stale."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bench import budget_live, harness, live_peer
from framewire import cli
from framewire.config import load_config

pytestmark = pytest.mark.timeout(60)


def test_the_newest_frame_replaces_one_not_taken_and_counts_it() -> None:
    newest = live_peer.Newest(2)
    assert newest.take(0.01) == []  # nothing yet: it waits, then gives up
    newest.put(0, "a", 1.0)
    newest.put(0, "b", 2.0)
    newest.put(1, "c", 3.0)
    assert newest.dropped == [1, 0]
    assert newest.take(0.01) == [(0, "b", 2.0), (1, "c", 3.0)]  # every stream's newest, in turn
    assert newest.take(0.01) == []


def test_a_model_thread_of_the_pool_takes_the_stream_served_longest_ago_that_no_other_holds() -> None:
    newest, busy = live_peer.Newest(3), set()
    assert newest.take_one(0.01, busy) is None  # nothing yet: it waits, then gives up
    newest.put(0, "a", 3.0)
    newest.put(2, "c", 2.0)
    assert newest.take_one(0.01, busy) == (0, "a", 3.0) and busy == {0}  # none served yet: in order
    newest.put(1, "b", 4.0)
    newest.put(0, "d", 5.0)  # stream 0's next, while a thread still has its last one
    assert newest.take_one(0.01, busy) == (1, "b", 4.0)  # never served; not stream 0: its lines stay in order
    assert newest.take_one(0.01, busy) == (2, "c", 2.0) and busy == {0, 1, 2}
    assert newest.take_one(0.01, busy) is None
    threading.Timer(0.05, newest.release, args=(0, busy)).start()  # the release wakes a waiting thread
    assert newest.take_one(5.0, busy) == (0, "d", 5.0)
    for index in (1, 2, 0):
        newest.release(index, busy)
    newest.put(0, "e", 6.0)
    newest.put(2, "f", 6.5)
    newest.put(2, "g", 7.0)  # replaced: a fresh frame, yet stream 2 was served before stream 0
    assert newest.take_one(0.01, busy) == (2, "g", 7.0)
    assert newest.dropped == [0, 0, 1]


def test_the_end_of_every_stream_wakes_a_waiting_take() -> None:
    newest = live_peer.Newest(2)
    newest.end(0)
    threading.Timer(0.05, newest.end, args=(1, "OSError: gone")).start()
    started = time.monotonic()
    assert newest.take(5.0) == []
    assert time.monotonic() - started < 4.0 and newest.ended == [True, True]
    assert newest.errors == [None, "OSError: gone"]


def _line(stream_s: float, at: float, total_ms: float = 10.0) -> dict[str, Any]:
    return {"time": stream_s, "at": at, "latency_ms": {"total": total_ms}}


def test_peer_stats_read_each_stream_inside_the_window_only() -> None:
    # Stream 0: 25 fps throughout; stream 1: every other frame inside the window (12.5 fps), a slow
    # latency only before it. Lines outside [100, 110] of wall time are left out.
    full = [_line(i / 25, 95 + i / 25) for i in range(25 * 20)]
    half = [_line(i / 25, 95 + i / 25, 900.0 if 95 + i / 25 < 100 else 20.0) for i in range(0, 25 * 20, 2)]
    stats = live_peer.peer_stats([full, half], (100.0, 110.0), 25.0)
    assert stats["per_stream"]["peer0"]["fps"] == pytest.approx(25.0)
    assert stats["per_stream"]["peer1"]["fps"] == pytest.approx(12.5)
    assert stats["fps_min"] == pytest.approx(12.5) and stats["fps_max"] == pytest.approx(25.0)
    assert stats["kept"] == pytest.approx(0.75)
    assert stats["latency_p99_ms_max"] == pytest.approx(20.0)  # the 900 ms ones came before the window
    assert stats["frames_in_window"] == round(37.5 * 10)


def test_a_stream_without_frames_in_the_window_fails_the_slowest_and_the_share_kept() -> None:
    stats = live_peer.peer_stats([[_line(i / 25, 100 + i / 25) for i in range(100)], []], (100.0, 104.0), 25.0)
    assert stats["fps_min"] == 0.0 and stats["kept"] is None
    assert stats["per_stream"]["peer1"]["records"] == 0


def test_the_peer_s_share_sets_it_against_the_work_and_framewire() -> None:
    share = budget_live.peer_share({"work_ms_per_frame": 4.0, "framewire_ms_per_frame_out": 6.0}, {"ms_per_frame_out": 5.0})
    assert share == pytest.approx({"peer_ms_per_frame_out": 5.0, "peer_frame_ratio": 1.25, "framewire_vs_peer": 1.2})
    assert budget_live.peer_share({"work_ms_per_frame": 4.0}, {"ms_per_frame_out": None})["framewire_vs_peer"] is None


def _config_json(tiny_job: Path, folder: Path) -> Path:
    config = load_config(str(tiny_job))
    path = folder / "config.json"
    path.write_text(json.dumps(config.model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    return path


def _peer(
    config: Path, uri: str, outs: list[Path], staleness_ms: float = 0.0, model_threads: int = 1
) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "bench.live_peer", "--config", str(config), "--uri", uri,
            "--staleness-ms", str(staleness_ms), "--model-threads", str(model_threads)]  # fmt: skip
    for index, out in enumerate(outs):
        args += ["--out", str(out), "--id", f"cam{index}"]
    return subprocess.run(args, cwd=harness.ROOT, capture_output=True, text=True, timeout=45)


@pytest.mark.parametrize(("streams", "model_threads"), [(1, 1), (2, 1), (3, 2)])
def test_the_plain_loop_puts_out_replaces_or_drops_as_stale_every_decoded_frame(
    tiny_job: Path, tmp_path: Path, streams: int, model_threads: int
) -> None:
    outs = [tmp_path / f"peer{i}.jsonl" for i in range(streams)]
    done = _peer(_config_json(tiny_job, tmp_path), str(tiny_job.parent / "face.mp4"), outs, model_threads=model_threads)
    assert done.returncode == 0, done.stderr
    for index, out in enumerate(outs):
        records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        summary = json.loads(live_peer.summary_path(out).read_text(encoding="utf-8"))
        assert summary["error"] is None and summary["source"] == f"cam{index}"
        assert summary["frames"] == len(records) >= 1  # a file is read faster than the model runs
        assert summary["frames"] + summary["dropped"] + summary["stale"] == 12  # the clip's frames, each once
        assert [r["seq"] for r in records] == list(range(len(records)))
        assert {r["source"] for r in records} == {f"cam{index}"}
        times = [r["time"] for r in records]
        assert times == sorted(times) and len(set(times)) == len(times)  # in order, none twice
        assert all(r["latency_ms"]["total"] >= 0 and r["at"] > 0 for r in records)
        assert all("detections" in r for r in records)


def test_a_stream_that_cannot_be_read_ends_the_loop_with_its_error(tiny_job: Path, tmp_path: Path) -> None:
    done = _peer(_config_json(tiny_job, tmp_path), str(tmp_path / "missing.mp4"), [tmp_path / "peer.jsonl"])
    assert done.returncode == 1
    (said,) = done.stderr.strip().splitlines()
    assert said.startswith("bench budget peer cam0: ") and "missing.mp4" in said


def test_the_pool_needs_a_model_thread(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.live_peer", "--config", "c.json", "--uri", "u", "--out", "a", "--model-threads", "0"],
        cwd=harness.ROOT, capture_output=True, text=True, timeout=45,
    )  # fmt: skip
    assert done.returncode == 2 and "--model-threads 0: at least 1" in done.stderr


def test_each_out_needs_its_id(tiny_job: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.live_peer", "--config", "c.json", "--uri", "u", "--out", "a", "--out", "b",
         "--id", "one"], cwd=harness.ROOT, capture_output=True, text=True, timeout=45,
    )  # fmt: skip
    assert done.returncode == 2 and "2 --out but 1 --id" in done.stderr


def test_run_peer_fails_with_the_message_of_a_stream_that_ended_before_its_first_frame(
    tiny_job: Path, tmp_path: Path
) -> None:
    config = load_config(str(tiny_job))
    with pytest.raises(RuntimeError, match=r"ended \(1\) before every stream had put out a frame: .*missing\.mp4"):
        live_peer.run_peer(config, str(tmp_path / "missing.mp4"), 3, 1.0, 500.0, tmp_path / "peer", 25.0, "core", 2)
    assert len(list((tmp_path / "peer").glob("peer-process*.err"))) == 2  # 3 streams over 2 processes


def test_the_pool_runs_every_stream_in_one_process(tiny_job: Path, tmp_path: Path) -> None:
    config = load_config(str(tiny_job))
    with pytest.raises(RuntimeError, match=r"ended \(1\) before every stream had put out a frame: .*missing\.mp4"):
        live_peer.run_peer(config, str(tmp_path / "missing.mp4"), 3, 1.0, 500.0, tmp_path / "peer", 25.0, "pool", 2)
    assert len(list((tmp_path / "peer").glob("peer-process*.err"))) == 1


class _Failing:
    def run(self, frame: Any) -> Any:
        raise ValueError(f"no model for {frame}")


def test_a_model_thread_that_fails_stops_the_others_and_hands_its_error_to_the_main_thread(tmp_path: Path) -> None:
    newest, busy, failed, stop = live_peer.Newest(1), set(), [], threading.Event()
    newest.put(0, ("frame0", 0.0), time.time())
    lines = live_peer.Lines([str(tmp_path / "out.jsonl")], ["cam0"], 0.0)
    live_peer._pooled(_Failing(), newest, lines, stop, busy, failed)  # type: ignore[arg-type]
    lines.close()
    (error,) = failed
    assert isinstance(error, ValueError) and "no model for frame0" in str(error)
    assert stop.is_set() and busy == set()  # the stream is let go: nothing waits on it


def test_a_layout_the_peer_does_not_know_is_refused(tiny_job: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="layout 'thread' is not one of stream, core, pool"):
        live_peer.run_peer(load_config(str(tiny_job)), "u", 1, 1.0, 500.0, tmp_path, 25.0, "thread")
