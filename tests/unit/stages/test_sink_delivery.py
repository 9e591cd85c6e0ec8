"""What every broker output shares (stages.outputs.delivery): the bounded queue that drops its oldest,
batches of N messages or T ms, doubling backoff, and a sender thread that never holds up the frames."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from framewire.config.sinks import WebhookOutput
from framewire.pipeline.frame import Frame, StageContext
from framewire.stages.outputs.delivery import Batcher, BrokerSink, Counts, Message, SendQueue

pytestmark = pytest.mark.timeout(30)


def message(n: int, source: str = "cam") -> Message:
    return Message("record", source, str(n).encode())


def test_a_full_queue_drops_its_oldest_and_counts_it() -> None:
    counts = Counts()
    queue = SendQueue(3, counts)
    for n in range(5):
        queue.put(message(n))
    assert [m.payload for m in queue.get(10, 0)] == [b"2", b"3", b"4"]
    assert (counts["queued"], counts["dropped"], queue.pending()) == (5, 2, 3)  # three held by the sender
    queue.done(3)
    queue.put(message(5))
    assert queue.close() == 1 and counts["dropped"] == 3 and queue.pending() == 0


def test_get_waits_for_a_first_message_at_most_its_timeout() -> None:
    queue = SendQueue(10, Counts())
    started = time.monotonic()
    assert queue.get(5, 0.1) == []
    assert 0.09 <= time.monotonic() - started < 2
    threading.Timer(0.05, lambda: queue.put(message(1))).start()
    assert [m.payload for m in queue.get(5, 5)] == [b"1"]


def test_a_batch_is_due_when_full_or_when_its_first_message_waited_long_enough() -> None:
    batcher = Batcher(3, 0.5)
    assert not batcher.due(0.0) and batcher.remaining_s(0.0) == 0.5
    batcher.add([message(0)], now=10.0)
    batcher.add([message(1)], now=10.3)
    assert not batcher.due(10.4) and batcher.remaining_s(10.4) == pytest.approx(0.1)
    assert batcher.due(10.5)
    batcher.add([message(2), message(3)], now=10.5)
    assert batcher.due(10.5)  # full
    assert [m.payload for m in batcher.take()] == [b"0", b"1", b"2"]
    assert [m.payload for m in batcher.items] == [b"3"]


class SlowBroker(BrokerSink):
    """A broker output whose broker takes `delay_s` a message, and acknowledges each."""

    def __init__(self, config: Any, delay_s: float) -> None:
        super().__init__(config)
        self.delay_s = delay_s
        self.got: list[bytes] = []

    def _open(self) -> None:
        return None

    def _send(self, batch: list[Message]) -> None:
        for m in batch:
            if self.closing.wait(self.delay_s):
                self.counts.add("dropped")
                continue
            self.got.append(m.payload)
            self.counts.add("sent")
            self.counts.add("delivered")

    def _close(self) -> None:
        return None


def frame(seq: int) -> Frame:
    return Frame("cam", seq, seq, seq / 25, 4, 4, result={"detections": []})


def config(**keys: Any) -> WebhookOutput:
    return WebhookOutput(kind="webhook", url="http://127.0.0.1:1/", **keys)


def test_a_slow_broker_never_holds_up_the_frames_and_what_does_not_fit_is_dropped() -> None:
    sink = SlowBroker(config(queue_size=10, flush_timeout_s=0.3), delay_s=0.2)
    sink.start(StageContext("output2.slow", 0))
    started = time.monotonic()
    for seq in range(100):
        assert list(sink.process(frame(seq))) == []
    assert time.monotonic() - started < 5.0  # 100 frames; a queue that waited would take 18 s or more
    list(sink.flush("cam"))  # the last source ended: a bounded wait
    sink.stop()
    counts = sink.counters()["output2.slow"]
    # 100 records and 2 events (source started, ended): each one either reached the broker or was counted.
    assert counts["queued"] == 102 and counts["events"] == 2
    assert counts["delivered"] + counts["dropped"] == 102 and counts["dropped"] >= 80
    assert len(sink.got) == counts["delivered"]
    seqs = [seq_of(p) for p in sink.got if b'"seq"' in p]
    assert seqs == sorted(seqs)  # what got through kept its order


def seq_of(payload: bytes) -> int:
    return int(payload.split(b'"seq":')[1].split(b",")[0])


def test_the_end_waits_for_a_working_broker_to_get_everything() -> None:
    sink = SlowBroker(config(send="records", flush_timeout_s=5), delay_s=0.001)
    sink.start(StageContext("output2.slow", 0))
    for seq in range(50):
        sink.process(frame(seq))
    list(sink.flush("cam"))
    counts = sink.counters()["output2.slow"]
    sink.stop()
    assert counts["delivered"] == 52 and counts["dropped"] == 0
    records = [p for p in sink.got if p.startswith(b'{"v":2,"source"')]
    assert [seq_of(p) for p in records] == list(range(50))


def test_only_events_leave_the_records_out() -> None:
    sink = SlowBroker(config(send="events"), delay_s=0.0)
    sink.start(StageContext("output2.slow", 0))
    for seq in range(5):
        sink.process(frame(seq))
    list(sink.flush("cam"))
    sink.stop()
    assert [b'"event":"source"' in p for p in sink.got] == [True, True]
