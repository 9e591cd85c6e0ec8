"""The `mqtt` output: records and events published to an MQTT broker with paho-mqtt.

Records go to `topic` and events to `events_topic` (templates filled with the source's id and the
job's name), each source's state retained on `state_topic`, and the daemon's availability retained
on `status_topic`: `online` once connected, `offline` on a clean stop or, as the last will, when the
broker loses it. paho's network thread reconnects with a doubling delay; meanwhile the sender
thread waits and the queue in front of it holds what comes (stages.outputs.delivery), dropping the
oldest when full. With QoS 1 or 2 and a persistent session (clean_session false), what paho had in
flight when the connection dropped is sent again after it comes back.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from framewire.config.sinks import MqttOutput
from framewire.pipeline.errors import FramewireError
from framewire.stages.outputs.delivery import RECORD, BrokerSink, Message

log = logging.getLogger(__name__)

FIRST_CONNECT_S = 1.0
"""How long the output waits at start for its first connection before it says it has none yet and goes
on (what comes meanwhile waits in the queue): a broker that is away holds up the job this long at most."""


class MqttSink(BrokerSink):
    """Publishes every record (or only the events) of every source to an MQTT broker."""

    Config = MqttOutput
    batch_size = 64
    batch_wait_s = 0.0

    def __init__(self, config: MqttOutput) -> None:
        super().__init__(config)
        self.config: MqttOutput = config
        self._client: Any = None
        self._connected = threading.Event()
        self._connects = 0
        self._lock = threading.Lock()
        """Guards the mids below; never held while calling paho (it calls on_publish under its own lock)."""
        self._unacked: set[int] = set()
        self._early: set[int] = set()
        """Acknowledgements that came before `publish` returned their mid."""
        self._abandoned: set[int] = set()
        """Mids given up on at the end (counted as failed): a late acknowledgement is not counted again."""
        self._control: set[int] = set()
        """Mids of the status and state messages (not records or events: not counted)."""

    def _topic(self, template: str, source: str) -> str:
        return template.format(source=source, job=self.config.job)

    def _open(self) -> None:
        try:
            import paho.mqtt.client as mqtt
        except ImportError:
            raise FramewireError(f"{self.name}: the mqtt output needs paho-mqtt: pip install 'framewire[mqtt]'") from None
        c = self.config
        client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=c.client_id or f"framewire-{c.job}-{self.name}",
            clean_session=c.clean_session, protocol=mqtt.MQTTv311,
        )  # fmt: skip
        client.max_queued_messages_set(c.queue_size)  # paho's own buffer is bounded too
        # Typed int by paho, used as seconds in float arithmetic: fractions work (0.5 s is tested).
        client.reconnect_delay_set(c.reconnect_min_s, c.reconnect_max_s)  # type: ignore[arg-type]
        if c.username is not None:
            client.username_pw_set(c.username, c.password.get_secret_value() if c.password is not None else None)
        if c.tls is not None:
            client.tls_set(ca_certs=c.tls.ca_file, certfile=c.tls.cert_file, keyfile=c.tls.key_file)
            client.tls_insecure_set(c.tls.insecure)
        if c.status_topic is not None:
            client.will_set(self._topic(c.status_topic, ""), b"offline", qos=1, retain=True)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        self._client = client
        try:
            client.connect_async(c.host, c.port, keepalive=c.keepalive_s)
        except (OSError, ValueError) as exc:
            raise FramewireError(f"{self.name}: cannot connect to {c.host}:{c.port}: {exc}") from None
        client.loop_start()
        if not self._connected.wait(FIRST_CONNECT_S):
            log.warning("%s: no connection to the MQTT broker at %s:%d yet; queueing, and retrying every %.0f-%.0f s",
                        self.name, c.host, c.port, c.reconnect_min_s, c.reconnect_max_s)  # fmt: skip

    # --- paho's network thread ---------------------------------------------------------------------

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        c = self.config
        if reason.is_failure:
            log.error("%s: the MQTT broker at %s:%d refused the connection: %s", self.name, c.host, c.port, reason)
            return
        self._connects += 1
        if self._connects > 1:
            self.counts.add("reconnects")
            log.warning("%s: reconnected to the MQTT broker at %s:%d", self.name, c.host, c.port)
        else:
            log.info("%s: connected to the MQTT broker at %s:%d", self.name, c.host, c.port)
        if c.status_topic is not None:
            self._publish_control(self._topic(c.status_topic, ""), b"online")
        self._connected.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        was = self._connected.is_set()
        self._connected.clear()
        if was and not self.closing.is_set():
            log.warning("%s: lost the MQTT broker (%s); reconnecting", self.name, reason)

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any, properties: Any) -> None:
        with self._lock:
            if mid in self._control or mid in self._abandoned:
                self._control.discard(mid)
                self._abandoned.discard(mid)
            elif mid in self._unacked:
                self._unacked.discard(mid)
                self.counts.add("delivered")
            else:
                self._early.add(mid)

    # --- the sender thread -------------------------------------------------------------------------

    def _send(self, batch: list[Message]) -> None:
        import paho.mqtt.client as mqtt

        c = self.config
        for index, message in enumerate(batch):
            while not self._connected.wait(0.2):
                if self.interrupt.is_set():
                    self.counts.add("dropped", len(batch) - index)
                    return
            topic = self._topic(c.topic if message.kind == RECORD else c.events_topic, message.source)
            # Not under our lock: paho calls on_publish holding its own, which would be the other order.
            info = self._client.publish(topic, message.payload, qos=c.qos, retain=c.retain)
            queued = info.rc == mqtt.MQTT_ERR_SUCCESS or (info.rc == mqtt.MQTT_ERR_NO_CONN and c.qos > 0)
            if not queued:  # QoS 0 without a connection, or paho's queue full
                self.counts.add("dropped")
                continue
            self.counts.add("sent")
            self._expect(info.mid, self._unacked)
            if message.name == "source" and c.state_topic is not None:
                self._state(message)

    def _state(self, message: Message) -> None:
        """A source's state, retained on its state topic (not counted: it is not a record or event)."""
        event = json.loads(message.payload)
        shown = {"started": "streaming", "online": "streaming", "offline": "offline"}.get(str(event.get("state")), "ended")
        state = {"v": event.get("v"), "source": message.source, "state": shown, "wall": event.get("wall")}
        assert self.config.state_topic is not None
        self._publish_control(self._topic(self.config.state_topic, message.source), json.dumps(state).encode())

    def _publish_control(self, topic: str, payload: bytes) -> Any:
        """A retained QoS 1 message of the output's own (status, state), kept out of the counts."""
        info = self._client.publish(topic, payload, qos=1, retain=True)
        self._expect(info.mid, self._control)
        return info

    def _expect(self, mid: int, waiting: set[int]) -> None:
        """Wait for `mid`'s acknowledgement in `waiting`, unless it came already (then it counts now)."""
        with self._lock:
            if mid in self._early:
                self._early.discard(mid)
                if waiting is self._unacked:
                    self.counts.add("delivered")
            else:
                waiting.add(mid)

    def _settled(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                if not self._unacked:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def _abandon(self) -> int:
        with self._lock:
            unacked = len(self._unacked)
            self._abandoned |= self._unacked
            self._unacked.clear()
        self.counts.add("failed", unacked)
        return unacked

    def _close(self) -> None:
        client, c = self._client, self.config
        if client is None:
            return
        unacked = self._abandon()
        if unacked:
            log.warning("%s: %d message(s) sent but not acknowledged by the broker at the end", self.name, unacked)
        if c.status_topic is not None and self._connected.is_set():
            try:
                self._publish_control(self._topic(c.status_topic, ""), b"offline").wait_for_publish(1.0)
            except (RuntimeError, ValueError) as exc:  # the connection went meanwhile: the will says it
                log.debug("%s: offline status not sent: %s", self.name, exc)
        client.disconnect()
        client.loop_stop()
