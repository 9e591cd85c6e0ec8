"""How the broker outputs (mqtt, kafka, webhook) send without ever slowing the pipeline.

The output stage turns each frame into its record (and the events, stages.outputs.events), encodes
it as JSON and puts it on a bounded queue: that never waits. A sender thread of the output's own
takes messages off the queue and hands them to the broker's client. When the broker is slow or
away the queue fills and its oldest message is dropped, counted: the frame path, the other outputs
and their files lose nothing. At the end (the last source's end of stream, or stop) the output waits
at most `flush_timeout_s` for the queue to empty and the broker to acknowledge; what is left then is
counted as dropped. The counts (`Counts`) reach the job's report and metrics (`Stage.counters`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from framewire.config.sinks import SinkOutput
from framewire.pipeline.errors import one_line
from framewire.pipeline.frame import Frame, Stage, StageContext
from framewire.pipeline.stagespec import Facts
from framewire.stages.outputs.events import EventDetector
from framewire.stages.outputs.jsonl import _plain
from framewire.stages.outputs.record import frame_record

log = logging.getLogger(__name__)

STOP_WAIT_S = 2.0
"""The longest `stop` waits for the queue when sources were still open (a hard stop)."""
RECORD = "record"
EVENT = "event"
COUNTERS = (
    "queued",
    "sent",
    "delivered",
    "dropped",
    "failed",
    "events",
    "suppressed",
    "reconnects",
    "retries",
)
"""queued: messages put on the queue; sent: handed to the broker's client; delivered: acknowledged
(MQTT PUBACK or, at QoS 0, written; a Kafka delivery report; an HTTP 2xx); dropped: never sent (the
queue was full, or still held messages at the end); failed: sent and refused or given up on (a
Kafka delivery error, an HTTP 4xx, retries spent); events: events made; suppressed: events left
out by min_interval_s; reconnects: connections made again after one was lost; retries: HTTP tries
after a first one failed."""


@dataclass(frozen=True)
class Message:
    """One record or event on its way: its kind, its source and its JSON bytes."""

    kind: str
    source: str
    payload: bytes
    name: str = ""
    """An event's name (`source`, `track_started`...); empty for a record."""


class Counts:
    """Running totals, written by the stage and the sender threads (a lock each update)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(COUNTERS, 0)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._values[name] += amount

    def __getitem__(self, name: str) -> int:
        return self._values[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


class SendQueue:
    """A bounded queue that never blocks the producer: when full, the oldest message goes (counted).
    It also knows how many messages the sender holds (taken, not yet `done`): `pending()`."""

    def __init__(self, size: int, counts: Counts) -> None:
        self._items: deque[Message] = deque()
        self._size = size
        self._counts = counts
        self._cond = threading.Condition()
        self._closed = False
        self._held = 0

    def put(self, message: Message) -> None:
        with self._cond:
            if len(self._items) >= self._size:
                self._items.popleft()
                self._counts.add("dropped")
            self._items.append(message)
            self._counts.add("queued")
            self._cond.notify()

    def get(self, limit: int, timeout_s: float) -> list[Message]:
        """Up to `limit` messages, waiting at most `timeout_s` for a first one; [] when closed or quiet.
        They count as held until `done`."""
        with self._cond:
            if not self._items and not self._closed and timeout_s > 0:
                self._cond.wait(timeout_s)
            taken: list[Message] = []
            while self._items and len(taken) < limit:
                taken.append(self._items.popleft())
            self._held += len(taken)
            return taken

    def done(self, count: int) -> None:
        """The sender is through with `count` messages it held (sent, or counted as lost)."""
        with self._cond:
            self._held -= count

    def pending(self) -> int:
        """Messages queued or held by the sender."""
        with self._cond:
            return len(self._items) + self._held

    def clear(self) -> int:
        """Drop what is queued (not what the sender holds), counted; how many."""
        with self._cond:
            left = len(self._items)
            self._items.clear()
        if left:
            self._counts.add("dropped", left)
        return left

    def close(self) -> int:
        """No more sending: the messages still queued or held are dropped (their count returned)."""
        with self._cond:
            self._closed = True
            left = len(self._items) + self._held
            self._items.clear()
            self._held = 0
            self._cond.notify_all()
        if left:
            self._counts.add("dropped", left)
        return left


class Batcher:
    """Gathers messages into batches of at most `size`, sent once full or `wait_s` after their first."""

    def __init__(self, size: int, wait_s: float) -> None:
        self.size, self.wait_s = size, wait_s
        self.items: list[Message] = []
        self.started = 0.0

    def add(self, messages: Iterable[Message], now: float) -> None:
        for message in messages:
            if not self.items:
                self.started = now
            self.items.append(message)

    def due(self, now: float) -> bool:
        return len(self.items) >= self.size or (bool(self.items) and now - self.started >= self.wait_s)

    def remaining_s(self, now: float) -> float:
        """How long until the batch held is due (the wait for more); `wait_s` when empty."""
        return max(0.0, self.started + self.wait_s - now) if self.items else self.wait_s

    def take_all(self) -> list[Message]:
        batch, self.items, self.started = self.items, [], 0.0
        return batch

    def take(self) -> list[Message]:
        batch, self.items = self.items[: self.size], self.items[self.size :]
        self.started = time.monotonic() if self.items else 0.0
        return batch


def encode(item: dict[str, Any]) -> bytes:
    """A record or event as the jsonl output writes it (numpy values made plain), in UTF-8."""
    return json.dumps(
        item, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_plain
    ).encode()


class BrokerSink(Stage):
    """An output that sends records and events through a sender thread: the frame path only encodes
    and queues. A broker output implements `_open` (its client, in the worker), `_send` (one batch, on
    the sender thread), `_settled` (nothing left unacknowledged) and `_close`."""

    facts = Facts(writes_output=True)

    reads: tuple[str, ...] = ()
    batch_size = 1
    """Messages `_send` takes at once (the webhook's batches); `batch_wait_s` how long it waits for them."""
    batch_wait_s = 0.2

    def __init__(self, config: SinkOutput) -> None:
        self.config = config
        self.counts = Counts()
        self.queue = SendQueue(config.queue_size, self.counts)
        self.detector = EventDetector(config.classes, config.min_interval_s, config.gone_after_frames)
        self.name = config.kind
        self.streaming: set[str] = set()
        self.closing = threading.Event()
        """Set by `stop`: the sender thread ends."""
        self.interrupt = threading.Event()
        """Set when the end's bounded wait is over: the sender stops waiting for the broker (for a
        connection, between retries) and drops what it holds, counted."""
        self.draining = threading.Event()
        """Set while the end waits: a partial batch goes at once."""
        self._thread: threading.Thread | None = None

    # --- the frame path (the worker's thread) ---------------------------------------------------

    def start(self, ctx: StageContext) -> None:
        self.name = ctx.stage
        self._open()
        self._thread = threading.Thread(target=self._sender, name=f"{self.name}-sender", daemon=True)
        self._thread.start()

    def process(self, frame: Frame) -> Iterable[Frame]:
        record = frame_record(frame)
        self.streaming.add(frame.source_id)
        events = self.detector.record(record)
        if self.config.send == "records":
            first = [e for e in events if e.get("event") == "source"]  # `started` comes before the record
            self._events(first)
            self.queue.put(Message(RECORD, frame.source_id, encode(record)))
            events = [e for e in events if e.get("event") != "source"]
        self._events(events)
        return ()

    def event(self, event: dict[str, Any]) -> None:
        """Another output's announcement (a closed segment): sent as an event."""
        self._events(self.detector.announced(event))

    def flush(self, source_id: str) -> Iterable[Frame]:
        """The source ended: its classes leave, its tracks end, `source` ended; when it was the last
        source streaming here, wait (bounded) for everything to be sent, so the report's counts are final."""
        self._events(self.detector.ended(source_id))
        self.streaming.discard(source_id)
        if not self.streaming and not self.drain(self.config.flush_timeout_s):
            self.give_up()
        return ()

    def stop(self) -> None:
        # Every source's end already waited (flush); a job stopped with sources still open waits a
        # little, within the bound the supervisor gives a worker to stop (pipeline.hub.lifecycle).
        if self.streaming and self.queue.pending():
            self.drain(min(self.config.flush_timeout_s, STOP_WAIT_S))
        self.interrupt.set()
        self.closing.set()
        if self._thread is not None:
            self._thread.join(2.0)
        left = self.queue.close()
        try:
            self._close()
        except Exception as exc:  # the counts below are still worth logging
            log.warning("%s: closing the connection failed: %s", self.name, one_line(exc))
        c = self.counts.snapshot()
        log.info(
            "%s: %d queued, %d sent, %d delivered, %d dropped (%d left at the end), %d failed, %d reconnects",
            self.name,
            c["queued"],
            c["sent"],
            c["delivered"],
            c["dropped"],
            left,
            c["failed"],
            c["reconnects"],
        )

    def counters(self) -> dict[str, dict[str, int]]:
        return {self.name: self.counts.snapshot()}

    def drain(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` until the queue is empty, the sender idle and the broker has
        acknowledged what was sent; False when time ran out (the messages still queued stay)."""
        deadline = time.monotonic() + timeout_s
        self.draining.set()
        try:
            while True:
                if not self.queue.pending() and self._settled(max(0.0, deadline - time.monotonic())):
                    return True
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.01)
        finally:
            self.draining.clear()
        return False

    def give_up(self) -> None:
        """The end's wait is over and the broker has not taken everything: what is queued or held
        is dropped, what waits for an acknowledgement counts as failed, all before the counts go to
        the hub. The output goes on working for a source that comes later."""
        waiting = self.queue.pending()
        self.interrupt.set()
        try:
            dropped = self.queue.clear()
            deadline = time.monotonic() + 2.0
            while self.queue.pending() and time.monotonic() < deadline:
                time.sleep(0.01)
            failed = self._abandon()
        finally:
            self.interrupt.clear()
        log.warning(
            "%s: the broker did not take everything within flush_timeout_s %.1f s: %d message(s) dropped "
            "unsent, %d unacknowledged",
            self.name,
            self.config.flush_timeout_s,
            max(dropped, waiting),
            failed,
        )

    def _events(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.counts.add("events")
            self.queue.put(Message(EVENT, str(event.get("source")), encode(event), str(event.get("event"))))
        suppressed = self.detector.suppressed - self.counts["suppressed"]
        if suppressed:
            self.counts.add("suppressed", suppressed)

    # --- the sender thread -----------------------------------------------------------------------

    def _sender(self) -> None:
        batcher = Batcher(self.batch_size, self.batch_wait_s)
        while not self.closing.is_set():
            self._tick()
            wait = batcher.remaining_s(time.monotonic()) if batcher.items else 0.2
            batcher.add(self.queue.get(self.batch_size - len(batcher.items), wait), time.monotonic())
            if batcher.items and self.interrupt.is_set():
                self.counts.add("dropped", len(batcher.items))
                self.queue.done(len(batcher.take_all()))
                continue
            if not batcher.items or not (batcher.due(time.monotonic()) or self.draining.is_set()):
                continue
            batch = batcher.take()
            try:
                self._send(batch)
            except (
                Exception
            ) as exc:  # a client's surprise must not end the thread: the batch is lost, counted
                self.counts.add("failed", len(batch))
                log.error("%s: sending %d message(s) failed: %s", self.name, len(batch), one_line(exc))
            finally:
                self.queue.done(len(batch))

    # --- what each broker output implements ------------------------------------------------------

    def _open(self) -> None:
        raise NotImplementedError

    def _send(self, batch: list[Message]) -> None:
        raise NotImplementedError

    def _tick(self) -> None:
        """On the sender thread, between batches (a client that needs polling polls here)."""
        return None

    def _settled(self, timeout_s: float) -> bool:
        """Nothing sent is waiting for the broker's acknowledgement (waiting up to `timeout_s`)."""
        return True

    def _abandon(self) -> int:
        """Stop waiting for the acknowledgements still due: count them as failed; how many."""
        return 0

    def _close(self) -> None:
        raise NotImplementedError
