from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from framewire.pipeline.ops.metrics import Metrics

pytestmark = pytest.mark.timeout(30)


def test_render_parses_with_the_official_parser() -> None:
    m = Metrics()
    m.declare("fw_frames_total", "counter", "Frames.\nTwo lines.")
    m.declare("fw_latency_seconds", "histogram", "Latency.")
    m.declare("fw_depth", "gauge", "Depth.")
    m.inc("fw_frames_total", source='cam"1', stage="infer")
    m.inc("fw_frames_total", 2, source='cam"1', stage="infer")
    m.set("fw_depth", 3.5, stage="pre\\process")
    for value in (0.0004, 0.003, 0.003, 20.0):
        m.observe("fw_latency_seconds", value, stage="infer")
    families = {f.name: f for f in text_string_to_metric_families(m.render())}
    frames = families["fw_frames"].samples[0]
    assert frames.value == 3 and frames.labels == {"source": 'cam"1', "stage": "infer"}
    assert families["fw_depth"].samples[0].labels == {"stage": "pre\\process"}
    hist = {(s.name, s.labels.get("le")): s.value for s in families["fw_latency_seconds"].samples}
    assert hist[("fw_latency_seconds_bucket", "0.0005")] == 1
    assert hist[("fw_latency_seconds_bucket", "0.005")] == 3
    assert hist[("fw_latency_seconds_bucket", "+Inf")] == 4
    assert hist[("fw_latency_seconds_count", None)] == 4
    assert hist[("fw_latency_seconds_sum", None)] == pytest.approx(20.0064)


def test_replace_drops_series_that_are_gone() -> None:
    m = Metrics()
    m.declare("fw_up", "gauge", "Up.")
    m.set("fw_up", 1, source="a")
    m.replace("fw_up", {(("source", "b"),): 1.0})
    assert 'source="a"' not in m.render() and 'source="b"' in m.render()


def test_an_outputs_totals_become_one_series_per_counter() -> None:
    from framewire.pipeline.ops.telemetry import Telemetry

    telemetry = Telemetry()
    telemetry.on_output_counts("output2.mqtt", {"sent": 4, "dropped": 1})
    telemetry.on_output_counts("output2.mqtt", {"sent": 9, "dropped": 1})  # totals, not increments
    families = {f.name: f for f in text_string_to_metric_families(telemetry.metrics.render())}
    samples = {s.labels["counter"]: s.value for s in families["framewire_output_messages"].samples}
    assert samples == {"sent": 9, "dropped": 1}
    assert {s.labels["output"] for s in families["framewire_output_messages"].samples} == {"output2.mqtt"}
