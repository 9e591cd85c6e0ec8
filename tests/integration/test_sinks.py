"""Each broker output against its real broker, driven frame by frame in the test's process: the
MQTT output's drops while mosquitto is away, its reconnect, availability and retained state; the
Kafka output's keys and order; the webhook output's batches, retries on 5xx and timeouts, and no
retry on a 4xx. What reached the broker is read with paho, confluent_kafka or the server's own list."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from framewire.config.sinks import KafkaOutput, MqttOutput, WebhookOutput
from framewire.pipeline.frame import Frame, StageContext
from framewire.pipeline.stagespec import StageSpec
from framewire.stages.outputs.kafka import KafkaSink
from framewire.stages.outputs.mqtt import MqttSink
from framewire.stages.outputs.webhook import WebhookSink
from tests.support.brokers import HookServer, Mosquitto, Tansu, read_kafka

pytestmark = pytest.mark.timeout(90)


def frame(source: str, seq: int) -> Frame:
    return Frame(source, seq, seq, seq / 25, 4, 4, result={"detections": []})


def until(done: Callable[[], bool], timeout_s: float = 20.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Subscriber:
    """A paho client that keeps every message of `topics` (retained ones included)."""

    def __init__(self, port: int, topics: list[str]) -> None:
        import paho.mqtt.client as mqtt

        self.messages: list[tuple[str, bytes, bool]] = []
        subscribed = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        self.client.on_connect = lambda c, u, f, r, p: c.subscribe([(t, 1) for t in topics])
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.on_message = lambda c, u, m: self.messages.append((m.topic, m.payload, bool(m.retain)))
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert subscribed.wait(10)

    def on(self, topic: str) -> list[bytes]:
        return [payload for t, payload, _ in self.messages if t == topic]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture()
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    broker = Mosquitto(tmp_path / "mosquitto").start()
    try:
        yield broker
    finally:
        broker.stop()


def test_mqtt_counts_what_it_drops_while_the_broker_is_away_and_reconnects(mosquitto: Mosquitto) -> None:
    sink = MqttSink(MqttOutput(kind="mqtt", port=mosquitto.port, qos=0, queue_size=20, job="it",
                               reconnect_min_s=0.5, reconnect_max_s=1))  # fmt: skip
    sink.start(StageContext("output0.mqtt", 0))
    try:
        sink.process(frame("cam", 0))
        until(lambda: sink.counts["delivered"] == 2, what="the first record and the start event")
        mosquitto.stop()
        until(lambda: not sink._connected.is_set(), what="the output to see the broker go")
        for seq in range(1, 101):  # the broker is away: the queue keeps the latest 20
            sink.process(frame("cam", seq))
        # Each of the 100 is dropped, queued or held by the sender thread, which may have taken a
        # batch (up to 64) while the loop ran, and waits for the broker with it: none is sent.
        dropped = sink.counts["dropped"]
        assert dropped == 100 - sink.queue.pending() and 100 - 20 - MqttSink.batch_size <= dropped <= 80
        mosquitto.start()
        reader = Subscriber(mosquitto.port, ["framewire/cam/records"])
        until(lambda: sink.counts["reconnects"] == 1, what="the reconnect")
        until(lambda: sink.queue.pending() == 0, what="the queue to empty")
        for seq in range(101, 111):
            sink.process(frame("cam", seq))
        def seqs() -> list[int]:
            return [json.loads(p)["seq"] for p in reader.on("framewire/cam/records")]

        until(lambda: 110 in seqs(), what="the records after the reconnect")
        assert seqs()[-10:] == list(range(101, 111))
        reader.close()
    finally:
        list(sink.flush("cam"))
        sink.stop()
    counts = sink.counters()["output0.mqtt"]
    assert counts["queued"] == 111 + 2 and counts["dropped"] == dropped and counts["reconnects"] == 1
    assert counts["delivered"] == counts["sent"] == counts["queued"] - counts["dropped"]


def test_mqtt_says_online_and_offline_and_keeps_each_sources_state(mosquitto: Mosquitto) -> None:
    sink = MqttSink(MqttOutput(kind="mqtt", port=mosquitto.port, job="avail", send="events"))
    sink.start(StageContext("output0.mqtt", 0))
    sink.process(frame("door", 0))
    list(sink.flush("door"))
    sink.stop()
    # A client that connects afterwards reads the retained availability and state at once.
    late = Subscriber(mosquitto.port, ["framewire/avail/status", "framewire/door/state", "framewire/door/records"])
    try:
        until(lambda: len(late.messages) >= 2, what="the retained messages")
        assert late.on("framewire/avail/status") == [b"offline"]
        [state] = late.on("framewire/door/state")
        assert json.loads(state)["state"] == "ended"
        assert late.on("framewire/door/records") == []  # send: events
        assert all(retained for _, _, retained in late.messages)
    finally:
        late.close()


def test_kafka_keys_by_source_and_keeps_each_sources_order() -> None:
    broker = Tansu().start()
    try:
        sink = KafkaSink(KafkaOutput(kind="kafka", bootstrap_servers=broker.bootstrap, topic="it.records",
                                     events_topic="it.events"))  # fmt: skip
        sink.start(StageContext("output1.kafka", 0))
        for seq in range(40):
            for source in ("a", "b", "c"):
                sink.process(frame(source, seq))
        for source in ("a", "b", "c"):
            list(sink.flush(source))
        sink.stop()
        counts = sink.counters()["output1.kafka"]
        assert counts["delivered"] == counts["queued"] == 120 + 6 and counts["failed"] == counts["dropped"] == 0
        records = read_kafka(broker.bootstrap, "it.records", 120)
        events = read_kafka(broker.bootstrap, "it.events", 6)
    finally:
        broker.stop()
    assert all(key == record["source"] for key, record in records)
    for source in ("a", "b", "c"):
        assert [r["seq"] for key, r in records if key == source] == list(range(40))
    assert sorted((e["source"], e["state"]) for _, e in events) == [
        (s, state) for s in ("a", "b", "c") for state in ("ended", "started")]


@pytest.fixture()
def hook() -> Iterator[HookServer]:
    server = HookServer()
    try:
        yield server
    finally:
        server.close()


def webhook(url: str, **keys: Any) -> WebhookSink:
    sink = WebhookSink(WebhookOutput(kind="webhook", url=url, backoff_s=0.05, backoff_max_s=0.2, **keys))
    sink.start(StageContext("output2.webhook", 0))
    return sink


def test_webhook_batches_n_messages_or_what_came_within_t_ms(hook: HookServer) -> None:
    sink = webhook(hook.url, batch_records=10, batch_ms=300)
    for seq in range(25):  # 1 start event + 25 records: two full batches at once, 6 left waiting
        sink.process(frame("cam", seq))
    until(lambda: len(hook.requests) == 3, what="the batch that waited batch_ms")
    assert [size for _, size, _ in hook.requests] == [10, 10, 6]
    list(sink.flush("cam"))
    sink.stop()
    assert [size for _, size, _ in hook.requests] == [10, 10, 6, 1]  # the end event, sent at the end
    assert [item.get("seq") for item in hook.items[1:26]] == list(range(25))


def test_webhook_retries_5xx_with_backoff_but_not_a_4xx(hook: HookServer) -> None:
    sink = webhook(hook.url, batch_records=5, batch_ms=0, retries=3)
    hook.fail(2, 502)
    sink.process(frame("cam", 0))  # the start event and the record: one batch, refused twice, then taken
    until(lambda: sink.counts["delivered"] == 2, what="the retried batch")
    assert sink.counts["retries"] == 2
    hook.fail(1, 400)
    sink.process(frame("cam", 1))
    until(lambda: sink.counts["failed"] == 1, what="the refused batch")
    hook.fail(4, 503)  # one more than the retries: given up
    sink.process(frame("cam", 2))
    until(lambda: sink.counts["failed"] == 2, what="the batch given up")
    list(sink.flush("cam"))
    sink.stop()
    assert [status for status, _, _ in hook.requests] == [502, 502, 200, 400, 503, 503, 503, 503, 200]
    assert sink.counts["retries"] == 2 + 3 and sink.counts["reconnects"] == 2


def test_webhook_retries_a_request_that_times_out() -> None:
    slow: list[float] = []
    import http.server

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if not slow:
                slow.append(time.monotonic())
                time.sleep(1.0)  # past the output's timeout_s
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sink = webhook(f"http://127.0.0.1:{server.server_address[1]}/", batch_records=2, batch_ms=0, timeout_s=0.3)
        sink.process(frame("cam", 0))
        until(lambda: sink.counts["delivered"] == 2, what="the retry after the timeout")
        assert sink.counts["retries"] == 1 and sink.counts["failed"] == 0
        list(sink.flush("cam"))
        sink.stop()
    finally:
        server.shutdown()
        server.server_close()


def test_mqtt_last_will_says_offline_when_the_daemon_dies(mosquitto: Mosquitto) -> None:
    """The broker publishes the will when the connection ends without a goodbye (SIGKILL)."""
    import os
    import signal
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from framewire.config.sinks import MqttOutput\n"
        "from framewire.pipeline.frame import StageContext\n"
        "from framewire.stages.outputs.mqtt import MqttSink\n"
        f"sink = MqttSink(MqttOutput(kind='mqtt', port={mosquitto.port}, job='doomed'))\n"
        "sink.start(StageContext('output0.mqtt', 0))\n"
        "until = time.monotonic() + 10\n"
        "while not sink._connected.is_set() and time.monotonic() < until: time.sleep(0.01)\n"
        "print('connected', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    watcher = Subscriber(mosquitto.port, ["framewire/doomed/status"])
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "connected"
        until(lambda: watcher.on("framewire/doomed/status")[-1:] == [b"online"], what="online")
        os.kill(child.pid, signal.SIGKILL)
        until(lambda: watcher.on("framewire/doomed/status")[-1:] == [b"offline"], what="the last will")
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(10)
        watcher.close()


def test_webhook_does_not_follow_a_redirect(hook: HookServer) -> None:
    hook.fail(1, 302)  # to a page that answers a GET: followed, the batch would look delivered
    sink = webhook(hook.url, batch_records=5, batch_ms=0, retries=3)
    sink.process(frame("cam", 0))
    until(lambda: sink.counts["failed"] == 2, what="the redirected batch")
    list(sink.flush("cam"))
    sink.stop()
    assert [status for status, _, _ in hook.requests] == [302, 200] and sink.counts["retries"] == 0


def test_a_live_source_going_offline_and_back_reaches_the_sink_as_events(tmp_path: Path, hook: HookServer) -> None:
    """A real RTSP server killed and started again: the hub announces the source offline, then online;
    the webhook output sends both."""
    import functools

    from framewire.app.compose.sources import source_plan
    from framewire.config import SourceConfig
    from framewire.pipeline.plan import Plan
    from framewire.pipeline.run.supervisor import Supervisor
    from tests.support import fakes
    from tests.support.rtsp_server import free_port, spawn

    port = free_port()
    servers = [spawn(port)]
    cam = SourceConfig(id="cam", uri=f"rtsp://127.0.0.1:{port}/live", timeout_s=2, reconnect={"initial_s": 0.2, "max_s": 0.5})
    config = WebhookOutput(kind="webhook", url=hook.url, batch_records=10, batch_ms=50)
    model = StageSpec("infer", 1, functools.partial(fakes.passthrough, "inf"), sheds=True, skips_stale=True)
    plan = Plan(stages=(model,
                StageSpec("output0.webhook", 1, functools.partial(WebhookSink, config), writes_output=True)),
                sources=(source_plan(cam),), slot_layout=fakes.layout)  # fmt: skip
    supervisor = Supervisor(plan)

    def states() -> list[str]:
        return [i["state"] for i in hook.items if i.get("event") == "source"]

    def outage() -> None:
        try:
            until(lambda: len([i for i in hook.items if "seq" in i]) >= 10, 30, "the first records")
            servers[0].kill()
            servers[0].wait()
            until(lambda: "offline" in states(), 20, "the offline event")
            servers.append(spawn(port))
            until(lambda: "online" in states(), 30, "the online event")
            seen = len([i for i in hook.items if "seq" in i])
            until(lambda: len([i for i in hook.items if "seq" in i]) >= seen + 10, 30, "records after the reconnect")
        finally:
            supervisor.request_stop()

    side = threading.Thread(target=outage, daemon=True)
    side.start()
    try:
        report = supervisor.run()
    finally:
        side.join(10)
        for server in servers:
            server.kill()
            server.wait()
    assert report.exit_code == 0, report.error
    # (Where the offline event falls among the records is not checked: frames read before the drop
    # may still be on their way when the hub hears of it.)
    assert states() == ["started", "offline", "online", "ended"]
    seqs = [i["seq"] for i in hook.items if "seq" in i]
    assert seqs == sorted(seqs) and len(seqs) >= 20
    assert report.outputs["output0.webhook"]["delivered"] == len(hook.items)
