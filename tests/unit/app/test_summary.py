"""The lines `framewire run` ends with (issue 39): each source's own rate over the time it ran, and
where the outputs went."""

from __future__ import annotations

from pathlib import Path

import pytest
from framewire.pipeline.plan import Report

from framewire.app.summary import summarize
from framewire.config import load_config

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[3]


def test_a_daemon_kept_running_gives_each_source_its_own_rate_and_names_the_outputs() -> None:
    """A daemon up for 57.5 s that read two files: "470 frames in 57.5 s (8.2 fps)" averaged over the
    idle time; each source's line has its own time and rate instead."""
    config = load_config(ROOT / "configs" / "default.yaml", ["http.enabled=true", "http.keep_running=true"])
    report = Report(
        frames={"carphone": 120, "door": 350}, read={"carphone": 120, "door": 352}, dropped={"door": 2},
        active_s={"carphone": 1.2, "door": 14.0}, elapsed_s=57.5,
    )  # fmt: skip
    done = summarize(report, config)
    assert done.lines == [
        "carphone: 120 frames in 1.2 s, 100.0 fps",
        "door: 350 frames in 14.0 s, 25.0 fps (352 read, 2 dropped)",
    ]
    assert done.job == (
        "framewire: 470 frames from 2 sources in 57.5 s; outputs: out/carphone.mp4, out/door.mp4, "
        "out/carphone.jsonl, out/door.jsonl, zmq pub tcp://127.0.0.1:5560"
    )
    door = done.fields["sources"]["door"]
    assert door["fps"] == 25.0 and door["active_s"] == 14.0
    assert done.fields["destinations"][-1] == "zmq pub tcp://127.0.0.1:5560"


def test_every_kind_of_output_says_where_it_went_without_its_secrets() -> None:
    outputs = (
        "outputs=[{kind: video_file, path: 'out/{source_id}-{index:03d}.mp4', segment_s: 10},"
        " {kind: hls, path: 'out/hls/{source_id}'},"
        " {kind: push, url: 'rtsp://me:pw@cam.lan:8554/{source_id}'},"
        " {kind: mqtt, host: broker, topic: 'site/{source}/records'},"
        " {kind: kafka, bootstrap_servers: 'k1:9092'},"
        " {kind: webhook, url: 'https://hooks.example/in?token=s3cret'}]"
    )
    config = load_config(ROOT / "configs" / "default.yaml", [outputs, "http.enabled=true"])
    done = summarize(Report(frames={"cam": 0}, elapsed_s=1.0), config)
    assert done.lines == ["cam: 0 frames"]  # no frame written: no rate
    assert done.job == (
        "framewire: 0 frames in 1.0 s; outputs: out/cam-{index:03d}.mp4, out/hls/cam/, "
        "rtsp://***@cam.lan:8554/cam, mqtt broker:1883 site/cam/records, kafka k1:9092 framewire.records, "
        "webhook https://hooks.example/in"
    )


def test_a_long_list_of_outputs_is_cut_short() -> None:
    config = load_config(ROOT / "configs" / "default.yaml")
    sources = {f"cam{i}": 10 for i in range(5)}
    done = summarize(Report(frames=sources, active_s=dict.fromkeys(sources, 1.0), elapsed_s=2.0), config)
    assert done.job.endswith("out/cam0.jsonl, out/cam1.jsonl, out/cam2.jsonl (and 3 more)")


def test_an_output_that_is_no_sink_has_its_totals_as_they_are() -> None:
    outputs = {
        "output1.recording": {"packets_lost": 2, "packets_trimmed": 0},
        "output2.mqtt": {"queued": 3, "delivered": 3},
    }
    report = Report(frames={"cam": 10}, elapsed_s=1.0, outputs=outputs)
    lines = summarize(report, None).lines
    assert "output1.recording: 2 packets lost, 0 packets trimmed" in lines
    assert "output2.mqtt: 3 delivered of 3 queued, 0 dropped, 0 failed, 0 reconnect(s)" in lines
