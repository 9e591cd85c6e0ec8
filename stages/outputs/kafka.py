"""The `kafka` output: records and events produced to Kafka with confluent-kafka (librdkafka).

Each message's key is its source's id, so all of a source's messages land in one partition and keep
their order (one request in flight per connection unless `properties` say otherwise, so a retry
cannot overtake). librdkafka buffers, batches, retries and reconnects by itself; its delivery
reports count what the brokers acknowledged (`delivered`) or refused (`failed`), and the sender
thread polls for them. Its buffer is bounded like the queue in front of it (stages.outputs.delivery).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from framewire.config.sinks import KafkaOutput
from framewire.pipeline.errors import FramewireError
from framewire.stages.outputs.delivery import RECORD, BrokerSink, Message

log = logging.getLogger(__name__)


class KafkaSink(BrokerSink):
    """Produces every record (or only the events) of every source to Kafka, keyed by source."""

    Config = KafkaOutput
    batch_size = 256
    batch_wait_s = 0.0

    def __init__(self, config: KafkaOutput) -> None:
        super().__init__(config)
        self.config: KafkaOutput = config
        self._producer: Any = None
        self._down = False
        """The brokers were reported unreachable; the next delivery counts a reconnect."""

    def _open(self) -> None:
        try:
            from confluent_kafka import Producer
        except ImportError:
            raise FramewireError(f"{self.name}: the kafka output needs confluent-kafka: pip install 'framewire[kafka]'") from None
        c = self.config
        settings: dict[str, Any] = {
            "client.id": f"framewire-{self.name}",
            "max.in.flight.requests.per.connection": 1,
            "queue.buffering.max.messages": c.queue_size,
            **c.properties,
            "bootstrap.servers": c.bootstrap_servers,
            "acks": c.acks,
            "linger.ms": c.linger_ms,
            "compression.type": c.compression,
            "error_cb": self._on_error,
            "logger": _Debug(),  # librdkafka's own lines (each failed try) at debug level, not on stderr
        }
        try:
            self._producer = Producer(settings)
        except Exception as exc:  # KafkaException: a bad setting in `properties`
            raise FramewireError(f"{self.name}: cannot make a Kafka producer: {exc}") from None

    def _on_error(self, error: Any) -> None:
        """librdkafka's errors: a broker that cannot be reached is said once until it can again
        (librdkafka retries on its own and reports each try); the others each time."""
        from confluent_kafka import KafkaError

        if error.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE):
            if not self._down:
                log.warning("%s: no Kafka broker reachable at %s (%s); librdkafka keeps trying",
                            self.name, self.config.bootstrap_servers, error.str())  # fmt: skip
            self._down = True
        else:
            log.warning("%s: Kafka: %s", self.name, error.str())

    def _on_delivery(self, error: Any, message: Any) -> None:
        if error is not None:
            self.counts.add("failed")
            log.debug("%s: a message to %s was not delivered: %s", self.name, message.topic() if message else "?", error)
            return
        self.counts.add("delivered")
        if self._down:
            self._down = False
            self.counts.add("reconnects")
            log.warning("%s: the Kafka brokers are reachable again", self.name)

    def _send(self, batch: list[Message]) -> None:
        c = self.config
        for index, message in enumerate(batch):
            topic = c.topic if message.kind == RECORD else c.events_topic
            while True:
                try:
                    self._producer.produce(topic, message.payload, key=message.source.encode(), on_delivery=self._on_delivery)
                    self.counts.add("sent")
                    break
                except BufferError:  # librdkafka's buffer is full: the brokers are away or slow
                    self._producer.poll(0.1)
                    if self.interrupt.is_set():
                        self.counts.add("dropped", len(batch) - index)
                        return
        self._producer.poll(0)

    def _tick(self) -> None:
        if self._producer is not None:
            self._producer.poll(0)

    def _settled(self, timeout_s: float) -> bool:
        return int(self._producer.flush(min(timeout_s, 0.1))) == 0

    def _abandon(self) -> int:
        """What librdkafka still holds is purged: its delivery reports count it as failed."""
        before = self.counts["failed"]
        if len(self._producer):  # messages, and requests such as metadata: only messages get reports
            self._producer.purge()
            deadline = time.monotonic() + 1.0
            while len(self._producer) and time.monotonic() < deadline:
                self._producer.poll(0.05)
        return self.counts["failed"] - before

    def _close(self) -> None:
        if self._producer is None:
            return
        left = self._abandon()
        if left:
            log.warning("%s: %d message(s) not delivered at the end; purged", self.name, left)
        self._producer = None  # librdkafka's threads go with it


class _Debug:
    """What confluent-kafka calls for librdkafka's log lines (`logger.log(level, fmt, *args)`): debug here."""

    def log(self, level: int, fmt: str, *args: Any) -> None:
        log.debug(fmt, *args)
