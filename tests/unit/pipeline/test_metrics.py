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


def test_histogram_buckets_count_every_value_at_or_under_their_bound() -> None:
    """Prometheus's buckets are cumulative and `le` is inclusive: a value on a bound is in it."""
    from framewire.pipeline.ops.metrics import LATENCY_BUCKETS

    values = [*LATENCY_BUCKETS, 0.0, 1e-9, 0.0007, 0.3, 10.0001, 99.0, *(b * 1.0000001 for b in LATENCY_BUCKETS)]
    m = Metrics()
    m.declare("fw_latency_seconds", "histogram", "Latency.")
    for value in values:
        m.observe("fw_latency_seconds", value, stage="infer")
    samples = next(iter(text_string_to_metric_families(m.render()))).samples
    buckets = {s.labels["le"]: s.value for s in samples if s.name.endswith("_bucket")}
    for bound in LATENCY_BUCKETS:
        key = str(int(bound)) if bound == int(bound) else repr(float(bound))
        assert buckets[key] == sum(1 for v in values if v <= bound), bound
    assert buckets["+Inf"] == len(values)


def test_the_same_labels_in_any_order_are_one_series_even_past_the_kept_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    from framewire.pipeline.ops import metrics

    monkeypatch.setattr(metrics, "LABELS_KEPT", 3)  # the memo of label tuples is cleared on the way
    m = Metrics()
    m.declare("fw_frames_total", "counter", "Frames.")
    for i in range(20):
        m.inc("fw_frames_total", source=f"cam{i % 5}", stage="infer")
        m.inc("fw_frames_total", stage="infer", source=f"cam{i % 5}")
    assert m.values("fw_frames_total") == {(("source", f"cam{i}"), ("stage", "infer")): 8.0 for i in range(5)}
    m.inc("fw_frames_total", source=["not", "hashable"], stage="infer")
    assert m.value("fw_frames_total", source="['not', 'hashable']", stage="infer") == 1.0
