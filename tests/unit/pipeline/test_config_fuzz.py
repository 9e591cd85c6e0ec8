"""Fuzzed configs: anything a user can write is either accepted or rejected with a ConfigError."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from framewire.config import apply_override, load_config, validate_config
from framewire.pipeline.errors import ConfigError

pytestmark = pytest.mark.timeout(120)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True), st.text(max_size=20)
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12)

BASE = {
    "sources": [{"id": "a", "uri": "a.mp4"}],
    "model": {"path": "m.onnx", "task": "face_detection"},
    "outputs": [{"kind": "jsonl", "path": "out/{source_id}.jsonl"}],
}
KEYS = [
    "sources", "sources.0", "sources.0.id", "sources.0.policy", "sources.0.realtime", "sources.0.max_frames",
    "model", "model.path", "engine", "engine.threads", "engine.providers", "engine.max_batch", "outputs",
    "outputs.0", "outputs.0.kind", "outputs.0.path", "composite", "stages.preprocess.workers", "transport",
    "transport.slots_per_source", "http", "http.port", "http.host", "version",
]  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(KEYS), value=values)
def test_any_value_at_any_key_is_accepted_or_a_config_error(key: str, value: object) -> None:
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    try:
        apply_override(raw, f"{key}={yaml.safe_dump(value, default_flow_style=True).strip()}")
        validate_config(raw, "fuzz.yaml")
    except ConfigError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_any_text_is_accepted_or_a_config_error(text: str) -> None:
    try:
        load_config("fuzz.yaml", text=text)
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.yaml")
