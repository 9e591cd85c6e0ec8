"""Lines and zones through the CLI: the default face job with tracking and `analytics:` on a clip
whose face moves across a line and in and out of a zone. The counts in the records equal
supervision's LineZone and PolygonZone fed with the records' own tracks, and `/metrics` has them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.helpers import VIDEOS, face_job, read_jsonl, start_cli
from tests.e2e.test_http import free_port, get
from tests.unit.stages.test_analytics import _sv_detections  # the records' tracks as supervision's (anchors)
from tests.unit.stages.test_analytics import sv  # noqa: F401  (fixture: supervision, installed once)

pytestmark = pytest.mark.timeout(240)

LINE = ((75.0, 10.0), (75.0, 140.0))  # carphone_pristine.mp4 is 176x144; the face's chin moves across x=75
ZONE = ((0, 0), (75, 0), (75, 143), (0, 143))
ANALYTICS = (
    "analytics={clip: {lines: [{name: door, start: [75, 10], end: [75, 140]}], "
    "zones: [{name: left, polygon: [[0, 0], [75, 0], [75, 143], [0, 143]]}]}}"
)


def _metrics(url: str) -> dict[str, Any]:
    status, text = get(url + "/metrics?format=text")
    assert status == 200
    return {f.name: f for f in text_string_to_metric_families(text)}


@pytest.mark.parametrize("fuse", ["true", "false"])  # tracking inside the infer process, or a process of its own
def test_counts_through_the_cli_equal_supervision_and_reach_metrics(tmp_path: Path, sv: Any, fuse: str) -> None:
    port = free_port()
    proc = start_cli(*face_job(
        tmp_path, VIDEOS / "carphone_pristine.mp4", "--set", "tracking={}", "--set", ANALYTICS,
        "--set", f"stages.fuse={fuse}",
        "--set", "composite=[{kind: boxes}, {kind: analytics}]",
        "--set", "http.enabled=true", "--set", f"http.port={port}", "--set", "http.keep_running=true",
    ))  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    families: dict[str, Any] = {}
    while True:  # until every frame is out (keep_running: the daemon stays up for the scrape)
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        if get(url + "/healthz")[0] == 200:
            families = _metrics(url)
            done = [s.value for s in families["framewire_frames"].samples if s.labels.get("stage") == "output"]
            if done and done[0] >= 120:
                break
        time.sleep(0.2)
    assert get(url + "/drain", "POST")[0] == 202
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err

    records = read_jsonl(tmp_path / "clip.jsonl")
    assert [r["seq"] for r in records] == list(range(120))
    line = sv.LineZone(sv.Point(*LINE[0]), sv.Point(*LINE[1]), triggering_anchors=[sv.Position.BOTTOM_CENTER])
    zone = sv.PolygonZone(np.array(ZONE, dtype=np.int64))
    occupancy = []
    for record in records:
        detections = _sv_detections(sv, record["results"]["detections"])
        line.trigger(detections)
        zone.trigger(detections)
        occupancy.append(zone.current_count)
        counted = record["results"]["analytics"]
        assert sum(counted["lines"]["door"]["in"].values()) == line.in_count, record["seq"]
        assert sum(counted["lines"]["door"]["out"].values()) == line.out_count, record["seq"]
        assert sum(counted["zones"]["left"]["occupancy"].values()) == zone.current_count, record["seq"]
    assert line.in_count + line.out_count >= 2 and 0 in occupancy and 1 in occupancy  # worth testing
    last = records[-1]["results"]["analytics"]
    crossings = {
        (s.labels["direction"], s.labels["class"]): s.value
        for s in families["framewire_line_crossings"].samples
        if s.labels["source"] == "clip" and s.labels["line"] == "door" and s.name.endswith("_total")
    }
    expected = {(d, c): float(n) for d in ("in", "out") for c, n in last["lines"]["door"][d].items()}
    assert crossings == expected
    entries = {
        s.labels["class"]: s.value for s in families["framewire_zone_entries"].samples if s.name.endswith("_total")
    }
    assert entries == {c: float(n) for c, n in last["zones"]["left"]["entries"].items()}
