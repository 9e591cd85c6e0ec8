"""The mqtt, kafka and webhook outputs' config: secrets from `${VAR}`, kept out of reprs; errors that
name the key; defaults that make a persistent MQTT session work."""

from __future__ import annotations

from pathlib import Path

import pytest

from framewire.config import Config, load_config
from framewire.config.sinks import KafkaOutput, MqttOutput, WebhookOutput
from framewire.pipeline.errors import ConfigError

pytestmark = pytest.mark.timeout(30)

DEFAULT = (Path(__file__).resolve().parents[3] / "configs" / "default.yaml").read_text()
SINKS = """
  - kind: mqtt
    username: ${MQTT_USER}
    password: ${MQTT_PASSWORD}
  - kind: kafka
    bootstrap_servers: ${KAFKA:-127.0.0.1:9092}
    properties: {sasl.username: "${KAFKA_USER}"}
  - kind: webhook
    url: https://hooks.example/in
    headers: {Authorization: "Bearer ${HOOK_TOKEN}"}
"""
ENV = {"MQTT_USER": "cam", "MQTT_PASSWORD": "p@ss: #1", "KAFKA_USER": "k", "HOOK_TOKEN": "t0ken"}


def load(*overrides: str, environ: dict[str, str] | None = None, sinks: str = SINKS) -> Config:
    return load_config("job.yaml", overrides, text=DEFAULT + sinks, environ=ENV if environ is None else environ)


def error_of(*overrides: str, environ: dict[str, str] | None = None, sinks: str = SINKS) -> str:
    with pytest.raises(ConfigError) as info:
        load(*overrides, environ=environ, sinks=sinks)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_secrets_come_from_the_environment_and_stay_out_of_reprs() -> None:
    config = load()
    mqtt, kafka, hook = config.outputs[3:]
    assert isinstance(mqtt, MqttOutput) and isinstance(kafka, KafkaOutput) and isinstance(hook, WebhookOutput)
    assert mqtt.username == "cam" and mqtt.password is not None
    assert mqtt.password.get_secret_value() == "p@ss: #1"  # never parsed as YAML
    assert kafka.bootstrap_servers == "127.0.0.1:9092" and kafka.properties == {"sasl.username": "k"}
    assert hook.headers["Authorization"].get_secret_value() == "Bearer t0ken"
    assert "p@ss" not in repr(mqtt) and "t0ken" not in repr(hook)


def test_an_unset_variable_names_the_key() -> None:
    message = error_of(environ={**ENV, "HOOK_TOKEN": None})  # type: ignore[dict-item]
    assert message == ("job.yaml: outputs.5.headers.Authorization: environment variable HOOK_TOKEN is not set "
                       "(${HOOK_TOKEN:-default} gives a default)")  # fmt: skip


def test_mqtt_defaults_name_a_client_that_finds_its_session_again() -> None:
    mqtt = load().outputs[3]
    assert isinstance(mqtt, MqttOutput)
    assert (mqtt.qos, mqtt.clean_session, mqtt.client_id, mqtt.send) == (1, False, None, "records")
    assert (mqtt.topic, mqtt.status_topic) == ("framewire/{source}/records", "framewire/{job}/status")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("outputs.3.topic=framewire/{camera}", "outputs.3.topic: {camera} is not filled in (only job, source)"),
        ("outputs.3.topic=framewire/#", "outputs.3.topic: 'framewire/#' is not a topic to publish to"),
        ("outputs.3.qos=3", "outputs.3.qos: "),
        ("outputs.3.reconnect_max_s=0.1", "outputs.3.reconnect_max_s: must be at least reconnect_min_s"),
        ("outputs.4.properties={acks: '0'}", "outputs.4.properties: acks is set by this output's own key"),
        ("outputs.5.url=ftp://x/", "outputs.5.url: 'ftp://x/' is not an http:// or https:// URL"),
        ("outputs.5.send=all", "outputs.5.send: "),
        ("outputs.5.batch_records=0", "outputs.5.batch_records: "),
    ],
)  # fmt: skip
def test_errors_name_the_key(override: str, message: str) -> None:
    assert message in error_of(override)
