"""`outputs:` items that send results to the brokers people already run: MQTT, Kafka, HTTP webhooks.

Each one hands records to a bounded queue that a sender thread of its own empties (stages.outputs.
delivery), so a slow or dead broker never slows the pipeline: what does not fit is dropped and
counted. Secrets (a password, an auth header) come from the environment with `${VAR}`
(config.env), like every other string of the config. docs/guides/sinks.md shows them at work.
"""

from __future__ import annotations

import string
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from framewire.config.base import _Model
from framewire.config.outputs import OutputConfig
from framewire.pipeline import uris


def _template(value: str, allowed: set[str]) -> str:
    """`value` if its `{...}` fields are all in `allowed`; ValueError naming the first other one."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
    except ValueError as err:
        raise ValueError(f"{value!r} is not a template: {err}") from None
    unknown = sorted(names - allowed)
    if unknown:
        raise ValueError(f"{{{unknown[0]}}} is not filled in (only {', '.join(sorted(allowed))})")
    return value


class SinkOutput(OutputConfig):
    """What the broker outputs share: what they send, which events, and the queue in front of the broker."""

    send: Literal["records", "events"] = Field(
        default="records",
        description="records: every frame's record (the jsonl output's lines) and the events; events: "
        "only the events (a class appears or leaves, a track starts or ends, a line crossed, a zone "
        "entered or left, a segment closed, a source started or ended).",
    )
    classes: tuple[str, ...] = Field(
        default=(),
        description="Only events about these labels (e.g. [person, car]); empty: every label. Records "
        "are sent whole.",
    )
    min_interval_s: float = Field(
        default=0.0,
        ge=0,
        description="At most one event per track in this many seconds of video (a track's end always "
        "follows its start): a busy camera does not flood the broker.",
    )
    gone_after_frames: int = Field(
        default=15,
        ge=1,
        le=100000,
        description="A class has left, or a track has ended, after this many frames of its source "
        "without it (or at the source's end): a detector that misses a frame does not flap.",
    )
    queue_size: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="Messages waiting for the sender thread; when full the oldest is dropped and counted.",
    )
    flush_timeout_s: float = Field(
        default=5.0,
        ge=0,
        le=600,
        description="When the last source ends: how long the output waits for its queue to be sent "
        "before it drops what is left (counted).",
    )


class MqttTls(_Model):
    """TLS to the MQTT broker."""

    ca_file: str | None = Field(default=None, description="CA certificates (PEM); none: the system's.")
    cert_file: str | None = Field(default=None, description="Client certificate (PEM), for mutual TLS.")
    key_file: str | None = Field(default=None, description="The client certificate's private key (PEM).")
    insecure: bool = Field(default=False, description="Do not check the broker's host name (tests only).")


class MqttOutput(SinkOutput):
    """Records and events published to an MQTT broker, a topic per source, with a last will."""

    kind: Literal["mqtt"] = Field(description="Publish to an MQTT broker (paho-mqtt: `pip install framewire[mqtt]`).")
    host: str = Field(default="127.0.0.1", description="The broker's host name or address.")
    port: int = Field(default=1883, ge=1, le=65535, description="The broker's port (8883 for TLS, by custom).")
    job: str = Field(default="framewire", min_length=1, description="This daemon's name in topics (`{job}`).")
    topic: str = Field(
        default="framewire/{source}/records",
        description="Where records go; `{source}` (the source's id) and `{job}` are filled in.",
    )
    events_topic: str = Field(default="framewire/{source}/events", description="Where events go (a template).")
    state_topic: str | None = Field(
        default="framewire/{source}/state",
        description="Each source's state (`streaming`, `ended`), retained: a client that connects later "
        "reads it at once. null: not published.",
    )
    status_topic: str | None = Field(
        default="framewire/{job}/status",
        description="Availability, retained: `online` once connected, `offline` on a clean stop and, as "
        "the last will, when the broker loses the connection. null: none.",
    )
    qos: Literal[0, 1, 2] = Field(
        default=1,
        description="0: at most once; 1: at least once (with a persistent session, what was published while "
        "the broker was away is delivered after); 2: exactly once.",
    )
    retain: bool = Field(default=False, description="Publish records and events with the retain flag.")
    client_id: str | None = Field(
        default=None,
        description="The MQTT client id; null: `framewire-{job}-<output name>`, the same at every start, "
        "so a persistent session is found again.",
    )
    clean_session: bool = Field(
        default=False,
        description="Start a fresh session at each connection; false: the broker keeps the session (QoS 1/2 "
        "in flight resent after a reconnect).",
    )
    keepalive_s: int = Field(default=30, ge=5, le=3600, description="MQTT keep-alive interval.")
    username: str | None = Field(default=None, description="User name, e.g. `${MQTT_USER}`; empty: none.")
    password: SecretStr | None = Field(
        default=None, description="Password, e.g. `${MQTT_PASSWORD}` (never logged); empty: none."
    )
    tls: MqttTls | None = Field(default=None, description="TLS settings; null: plain TCP.")
    reconnect_min_s: float = Field(default=0.5, gt=0, le=60, description="First delay before reconnecting.")
    reconnect_max_s: float = Field(default=30.0, gt=0, le=3600, description="Longest delay between reconnects (doubles up to it).")

    @field_validator("username", "password", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value  # `${MQTT_USER:-}` unset: no credentials

    @field_validator("topic", "events_topic", "state_topic", "status_topic")
    @classmethod
    def _topics(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value or "#" in value or "+" in value:
            raise ValueError(f"{value!r} is not a topic to publish to (empty, or wildcards # +)")
        return _template(value, {"source", "job"})

    @model_validator(mode="after")
    def _delays(self) -> MqttOutput:
        if self.reconnect_max_s < self.reconnect_min_s:
            raise ValueError("reconnect_max_s: must be at least reconnect_min_s")
        if self.password is not None and self.username is None:
            raise ValueError("password: needs a username")
        return self

    def destination(self, source_id: str) -> str | None:
        topic = self.topic.replace("{source}", source_id).replace("{job}", self.job)
        return f"mqtt {self.host}:{self.port} {topic}"


class KafkaOutput(SinkOutput):
    """Records and events produced to Kafka, keyed by the source's id so each source keeps its order."""

    kind: Literal["kafka"] = Field(description="Produce to Kafka (confluent-kafka: `pip install framewire[kafka]`).")
    bootstrap_servers: str = Field(min_length=1, description="Brokers to start from, e.g. `kafka1:9092,kafka2:9092`.")
    topic: str = Field(default="framewire.records", min_length=1, description="The topic of the records.")
    events_topic: str = Field(default="framewire.events", min_length=1, description="The topic of the events.")
    acks: Literal["0", "1", "all"] = Field(
        default="all", description="How many replicas acknowledge a message before it counts as delivered."
    )
    linger_ms: float = Field(default=5.0, ge=0, le=60000, description="How long librdkafka waits to fill a batch.")
    compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = Field(
        default="none", description="Compression of the batches."
    )
    properties: dict[str, str] = Field(
        default_factory=dict,
        description="More librdkafka settings, e.g. `security.protocol: SASL_SSL`, `sasl.mechanism: PLAIN`, "
        "`sasl.username: ${KAFKA_USER}`, `sasl.password: ${KAFKA_PASSWORD}` (values never logged).",
    )

    @field_validator("properties")
    @classmethod
    def _own_keys(cls, value: dict[str, str]) -> dict[str, str]:
        taken = {"bootstrap.servers", "acks", "linger.ms", "compression.type", "on_delivery", "error_cb"}
        clash = sorted(taken & set(value))
        if clash:
            raise ValueError(f"{clash[0]} is set by this output's own key")
        return value

    def destination(self, source_id: str) -> str | None:
        return f"kafka {self.bootstrap_servers} {self.topic}"


class WebhookOutput(SinkOutput):
    """Records and events POSTed as JSON arrays to an HTTP endpoint, in batches, retried on 5xx."""

    kind: Literal["webhook"] = Field(description="POST JSON batches to an HTTP(S) URL.")
    url: str = Field(description="Where to POST, http:// or https://.")
    headers: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Headers of every request, e.g. `Authorization: Bearer ${HOOK_TOKEN}` (never logged).",
    )
    batch_records: int = Field(default=50, ge=1, le=10000, description="A batch is sent when it holds this many messages...")
    batch_ms: float = Field(default=500.0, ge=0, le=600000, description="...or when its first message has waited this long.")
    timeout_s: float = Field(default=5.0, gt=0, le=300, description="How long one request may take.")
    retries: int = Field(
        default=5, ge=0, le=100, description="Tries after the first on a 5xx, a 429, a timeout or a refused connection."
    )
    backoff_s: float = Field(default=0.5, gt=0, le=60, description="Delay before the first retry; it doubles each time.")
    backoff_max_s: float = Field(default=10.0, gt=0, le=3600, description="Longest delay between two tries.")

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")) or len(value) < len("http://x"):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _delays(self) -> WebhookOutput:
        if self.backoff_max_s < self.backoff_s:
            raise ValueError("backoff_max_s: must be at least backoff_s")
        return self

    def destination(self, source_id: str) -> str | None:
        return f"webhook {uris.redact(self.url.split('?')[0])}"  # a query may hold a token
