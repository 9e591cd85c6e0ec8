"""`analytics:` at start: one-line errors (a line outside the frame, a polygon of fewer than 3 points,
a class that is not a label, a source that is not there, no tracking), and the shipped showcase."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from framewire.app.compose.analytics import _track
from framewire.app.compose.plan import check
from framewire.config import load_config, validate_config
from framewire.pipeline.errors import ConfigError

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
YOLOX = {"path": str(ROOT / "assets" / "models" / "yolox_ddddocr" / "common_det.onnx"), "task": "detection",
         "labels": ["target"]}  # fmt: skip
BIKES = str(ROOT / "assets" / "videos" / "bikes.mp4")  # 640x272
LINE = {"name": "door", "start": [10, 10], "end": [300, 200]}
ZONE = {"name": "yard", "polygon": [[10, 10], [200, 10], [200, 200]]}


def _raw(analytics: Any, tracking: Any = None, uri: str = BIKES) -> dict[str, Any]:
    return {
        "sources": [{"id": "bikes", "uri": uri}],
        "model": YOLOX,
        "tracking": {} if tracking is None else tracking,
        "analytics": analytics,
        "outputs": [{"kind": "jsonl", "path": "/tmp/x.jsonl"}],
    }


def _config_error(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(raw, "test.yaml")
    assert "\n" not in str(info.value)
    return str(info.value)


def _start_error(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        check(validate_config(raw, "test.yaml"))
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_valid_config_checks_and_its_tracking_stage_counts() -> None:
    config = validate_config(_raw({"bikes": {"lines": [LINE], "zones": [ZONE]}}), "test.yaml")
    check(config)
    stage = _track(config)
    assert stage.analytics is not None and set(stage.analytics.configs) == {"bikes"}


def test_a_line_outside_the_frame_is_refused_at_start() -> None:
    line = {**LINE, "end": [700, 200]}
    assert _start_error(_raw({"bikes": {"lines": [line]}})) == (
        "analytics.bikes.lines.0: 'door' has the point [700, 200] outside the 640x272 frame"
    )
    zone = {**ZONE, "polygon": [[10, 10], [200, 10], [200, 300]]}
    assert _start_error(_raw({"bikes": {"zones": [zone]}})) == (
        "analytics.bikes.zones.0: 'yard' has the point [200, 300] outside the 640x272 frame"
    )


def test_normalised_points_outside_0_to_1_are_refused() -> None:
    raw = _raw({"bikes": {"normalized": True, "lines": [{**LINE, "start": [0.1, 0.1], "end": [1.2, 0.5]}]}})
    assert _config_error(raw) == "test.yaml: analytics.bikes.lines.0: 'door' has a point outside 0..1 (normalized: true)"


def test_a_polygon_of_fewer_than_3_points_is_refused() -> None:
    raw = _raw({"bikes": {"zones": [{**ZONE, "polygon": [[10, 10], [200, 10]]}]}})
    assert _config_error(raw).startswith(
        "test.yaml: analytics.bikes.zones.0.polygon: a polygon needs at least 3 points, this one has 2"
    )


def test_a_class_that_is_not_a_label_of_the_model_is_refused() -> None:
    raw = _raw({"bikes": {"lines": [{**LINE, "classes": ["person"]}]}})
    assert _start_error(raw) == "analytics.bikes.lines.0.classes: 'person' is not a label of the model (labels: target)"
    raw = _raw({"bikes": {"zones": [{**ZONE, "classes": [3]}]}})
    assert _start_error(raw) == "analytics.bikes.zones.0.classes: class id 3 is out of range (the model has 1 classes)"


def test_an_unknown_source_no_tracking_and_doubles_are_refused() -> None:
    assert _config_error(_raw({"cam": {"lines": [LINE]}})) == (
        "test.yaml: analytics.cam: no source has this id (sources: bikes)"
    )
    raw = _raw({"bikes": {"lines": [LINE]}})
    del raw["tracking"]
    assert _config_error(raw) == "test.yaml: analytics.bikes: needs tracking: (lines and zones count tracks)"
    twice = _raw({"bikes": {"lines": [LINE], "zones": [{**ZONE, "name": "door"}]}})
    assert _config_error(twice) == "test.yaml: analytics.bikes.zones.0.name: duplicate name 'door'"
    assert _config_error(_raw({"bikes": {}})).startswith("test.yaml: analytics.bikes: no lines and no zones")
    flat = _raw({"bikes": {"lines": [{**LINE, "end": LINE["start"]}]}})
    assert "start and end are the same point" in _config_error(flat)


def test_the_showcase_config_loads() -> None:
    """configs/showcase.yaml (NanoDet, from the detectors' branch) has a line and a zone on bikes."""
    config = load_config(ROOT / "configs" / "showcase.yaml")
    spec = config.analytics["bikes"]
    assert [line.name for line in spec.lines] == ["crossing"] and [z.name for z in spec.zones] == ["kerb"]
    assert spec.outside(640, 272) is None
    assert [c.kind for c in config.composite] == ["boxes", "analytics"]
