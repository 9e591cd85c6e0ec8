"""`kind: recording`: its keys checked where they are declared, and against the model and the analytics."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from framewire.config.analytics import SourceAnalyticsConfig
from framewire.config.recording import RecordingOutput

pytestmark = pytest.mark.timeout(30)


def output(**keys: object) -> RecordingOutput:
    return RecordingOutput.model_validate({"kind": "recording", "folder": "out", **keys})


def test_a_pre_roll_the_ring_cannot_hold_is_refused_naming_the_key() -> None:
    with pytest.raises(ValidationError, match="pre_s: 12 s does not fit in ring_s"):
        output(clips={"pre_s": 12, "events": [{"event": "crossed"}]})
    assert output(clips={"pre_s": 12, "ring_s": 15, "events": [{"event": "crossed"}]}).clips is not None


def test_a_line_on_an_event_that_has_none_is_refused() -> None:
    with pytest.raises(ValidationError, match="line: only for event crossed"):
        output(clips={"events": [{"event": "track_started", "line": "kerb"}]})


def test_a_recording_records_something() -> None:
    with pytest.raises(ValidationError, match="passthrough or clips"):
        output()
    assert output(passthrough={}).passthrough is not None


def test_labels_lines_zones_sources_and_the_folder_are_checked_against_the_job(tmp_path: Path) -> None:
    analytics = {
        "cam": SourceAnalyticsConfig.model_validate(
            {"lines": [{"name": "kerb", "start": [0, 0], "end": [9, 9]}]}
        )
    }
    ok = output(
        folder=str(tmp_path / "rec"),
        clips={"events": [{"event": "crossed", "line": "kerb", "labels": ["car"]}]},
    )
    assert ok.problems("outputs.0", ["car"], analytics, ["cam"]) is None
    assert "outputs.0.clips.events.0.labels: 'car' is not a label" in str(
        ok.problems("outputs.0", ["person"], analytics, ["cam"])
    )
    assert "outputs.0.clips.events.0.line: no line 'kerb'" in str(
        ok.problems("outputs.0", ["car"], {}, ["cam"])
    )
    zone = output(folder=str(tmp_path), clips={"events": [{"event": "entered", "zone": "yard"}]})
    assert "clips.events.0.zone: no zone 'yard'" in str(zone.problems("outputs.0", None, analytics, ["cam"]))
    other = output(folder=str(tmp_path), clips={"events": [{"event": "crossed", "sources": ["door"]}]})
    assert "clips.events.0.sources: no source 'door'" in str(
        other.problems("outputs.0", None, analytics, ["cam"])
    )
    (tmp_path / "file").write_text("")
    blocked = output(folder=str(tmp_path / "file" / "rec"), passthrough={})
    assert "outputs.0.folder: cannot make the folder" in str(
        blocked.problems("outputs.0", None, analytics, ["cam"])
    )
