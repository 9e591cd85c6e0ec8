"""The MQTT, Kafka and webhook outputs on a real job, read by consumers that know nothing of framewire.

One paced job, two sources of 250 frames each (a face clip with a faceless gap, so faces leave and
come back), with tracking, and all three sinks beside the jsonl and video outputs. A paho subscriber
(QoS 1, persistent session), a confluent_kafka reader of every partition, and a stdlib HTTP server
get every record of each source in order, and the events. Mid-job the MQTT broker is stopped for
10 s and started again on the same port: the video and JSONL outputs do not notice, the output
reconnects, and with QoS 1 and a persistent session what it published meanwhile arrives after.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import yaml

from tests.e2e.helpers import CLI, ROOT, VIDEOS, env, read_jsonl
from tests.support.brokers import HookServer, Mosquitto, Tansu, read_kafka
from tests.support.clips import count_frames

pytestmark = pytest.mark.timeout(240)

FRAMES = 250
FPS = 20
SOURCES = ("cam1", "cam2")


def gap_clip(path: Path) -> Path:
    """250 frames at 20 fps: 110 of a face, 30 grey ones, 110 of the face again (a face leaves, comes back)."""
    faces: list[np.ndarray] = []
    with av.open(str(VIDEOS / "carphone_pristine.mp4")) as container:
        for frame in container.decode(video=0):
            faces.append(frame.to_ndarray(format="bgr24"))
            if len(faces) == 110:
                break
    grey = np.full_like(faces[0], 128)
    pictures = faces + [grey] * (FRAMES - 2 * len(faces)) + faces
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=Fraction(FPS))
        stream.width, stream.height, stream.pix_fmt = faces[0].shape[1], faces[0].shape[0], "yuv444p"
        stream.options = {"preset": "ultrafast", "crf": "23"}
        for index, picture in enumerate(pictures):
            frame = av.VideoFrame.from_ndarray(picture, format="bgr24")
            frame.pts = index
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


class MqttReader:
    """A paho subscriber with a persistent session (QoS 1): it keeps what the broker stored for it
    across the broker's restart."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt

        self.messages: list[tuple[str, dict[str, Any]]] = []
        self.subscribed = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="sink-test-reader", clean_session=False)
        self.client.reconnect_delay_set(1, 1)
        self.client.on_connect = lambda c, u, f, r, p: c.subscribe([("framewire/+/records", 1), ("framewire/+/events", 1)])
        self.client.on_subscribe = lambda *_: self.subscribed.set()
        self.client.on_message = lambda c, u, m: self.messages.append((m.topic, json.loads(m.payload)))
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.subscribed.wait(10), "the subscriber never subscribed"

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def job_config(tmp: Path, clip: Path, mqtt_port: int, kafka: str, hook: str) -> Path:
    config = {
        "version": 1,
        "sources": [{"id": sid, "uri": str(clip), "realtime": True} for sid in SOURCES],
        "model": {"path": str(ROOT / "assets/models/yunet/face_detection_yunet_2023mar.onnx"),
                  "task": "face_detection", "score_threshold": 0.7},
        "tracking": {},
        "engine": {"providers": ["cpu"], "threads": 1, "processes_per_device": 1},
        "stages": {"fuse": True},
        "composite": [{"kind": "blur"}],
        "outputs": [
            {"kind": "video_file", "path": f"{tmp}/{{source_id}}.mp4"},
            {"kind": "jsonl", "path": f"{tmp}/{{source_id}}.jsonl"},
            {"kind": "mqtt", "port": mqtt_port, "job": "sinktest", "gone_after_frames": 10, "reconnect_min_s": 0.5,
             "reconnect_max_s": 1},
            {"kind": "kafka", "bootstrap_servers": kafka, "gone_after_frames": 10},
            {"kind": "webhook", "url": hook, "headers": {"Authorization": "Bearer ${SINK_TEST_TOKEN}"},
             "batch_records": 20, "batch_ms": 200, "gone_after_frames": 10, "backoff_s": 0.05},
        ],
    }  # fmt: skip
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def by_source(items: list[dict[str, Any]]) -> tuple[dict[str, list[int]], list[dict[str, Any]]]:
    """The seqs of the records per source and the events, in arrival order, repeats removed (QoS 1
    delivers at least once: a message whose acknowledgement was lost in the restart comes again)."""
    seqs: dict[str, list[int]] = {}
    events: list[dict[str, Any]] = []
    for item in items:
        if "event" in item:
            if item not in events:
                events.append(item)
        elif item["seq"] not in seqs.setdefault(item["source"], []):
            seqs[item["source"]].append(item["seq"])
    return seqs, events


def check_events(events: list[dict[str, Any]], where: str) -> None:
    for sid in SOURCES:
        mine = [e for e in events if e["source"] == sid]
        names = [e["event"] for e in mine]
        assert names[0] == "source" and mine[0]["state"] == "started", (where, names[:3])
        assert names[-1] == "source" and mine[-1]["state"] == "ended" and mine[-1]["frames"] == FRAMES, (where, names[-3:])
        # The face leaves in the grey gap and comes back: appeared, left, appeared, left (at the end).
        faces = [e["event"] for e in mine if e["event"].startswith("class_")]
        assert faces == ["class_appeared", "class_left", "class_appeared", "class_left"], (where, faces)
        assert names.count("track_started") >= 2 and names.count("track_started") == names.count("track_ended"), where
        left = next(e for e in mine if e["event"] == "class_left")
        assert 110 <= left["frame"] < 140, (where, left)  # in the gap


def test_three_sinks_get_every_record_and_the_events_through_a_broker_restart(tmp_path: Path) -> None:
    clip = gap_clip(tmp_path / "gap.mp4")
    broker = Mosquitto(tmp_path / "mosquitto").start()
    kafka = Tansu().start()
    hook = HookServer()
    hook.fail(3, 503)  # the first POSTs are refused: the webhook output retries them
    reader = MqttReader(broker.port)
    job: subprocess.Popen[str] | None = None
    try:
        config = job_config(tmp_path, clip, broker.port, kafka.bootstrap, hook.url)
        job = subprocess.Popen(
            [sys.executable, str(CLI), "run", "--no-progress",
             "--log-format", "json", "-c", str(config)],
            cwd=tmp_path, env={**env(), "SINK_TEST_TOKEN": "s3cret"}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while not any(t.endswith("/records") for t, _ in reader.messages):  # the job is under way
            if job.poll() is not None or time.monotonic() > deadline:
                job.kill()
                pytest.fail(f"no record reached the MQTT broker: {job.communicate()[1][-3000:]}")
            time.sleep(0.05)
        broker.stop()
        time.sleep(10)
        assert job.poll() is None  # still running (or, at its end, waiting for the broker) when it comes back
        broker.start()
        _, err = job.communicate(timeout=150)
        assert job.returncode == 0, err
        summary = json.loads([line for line in err.splitlines() if '"event": "summary"' in line][-1])
        outputs = summary["outputs"]
        deadline = time.monotonic() + 30
        while len(by_source([m for t, m in reader.messages])[0].get("cam2", [])) < FRAMES and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.communicate()
        reader.close()
        broker.stop()
        hook.close()

    try:
        kafka_records = read_kafka(kafka.bootstrap, "framewire.records", 2 * FRAMES)
        kafka_events = read_kafka(kafka.bootstrap, "framewire.events", 1000, timeout_s=5)
    finally:
        kafka.stop()

    # The files do not notice the broker going away: every frame in the JSONL and the video.
    for sid in SOURCES:
        assert [r["seq"] for r in read_jsonl(tmp_path / f"{sid}.jsonl") if "seq" in r] == list(range(FRAMES))
        assert count_frames(tmp_path / f"{sid}.mp4") == FRAMES

    expected = {sid: list(range(FRAMES)) for sid in SOURCES}
    # MQTT: every record of each source, in order, the ones published while the broker was away too.
    mqtt_seqs, mqtt_events = by_source([m for _, m in reader.messages])
    assert mqtt_seqs == expected
    check_events(mqtt_events, "mqtt")
    mqtt = outputs["output2.mqtt"]
    assert mqtt["reconnects"] >= 1 and mqtt["dropped"] == 0, mqtt
    assert mqtt["queued"] == 2 * FRAMES + mqtt["events"]

    # Kafka: keyed by source, so each source's records are in one partition, in order.
    assert all(key == record["source"] for key, record in kafka_records)
    assert by_source([r for _, r in kafka_records])[0] == expected
    check_events([e for _, e in kafka_events], "kafka")
    assert outputs["output3.kafka"]["delivered"] == outputs["output3.kafka"]["queued"], outputs["output3.kafka"]

    # Webhook: the refused batches were retried; the header came from ${SINK_TEST_TOKEN}.
    hook_seqs, hook_events = by_source(hook.items)
    assert hook_seqs == expected
    check_events(hook_events, "webhook")
    assert [status for status, _, _ in hook.requests[:4]] == [503, 503, 503, 200]
    assert all(headers["Authorization"] == "Bearer s3cret" for _, _, headers in hook.requests)
    assert max(size for _, size, _ in hook.requests) <= 20
    webhook = outputs["output4.webhook"]
    assert webhook["retries"] == 3 and webhook["failed"] == 0 and webhook["delivered"] == webhook["queued"], webhook
