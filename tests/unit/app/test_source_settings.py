"""A source's settings at run time, checked as the config is (framewire.app.compose.settings): each
refusal is one line naming the key; a change merges over what was changed before, null gives a key
back to the config; the state file's settings are checked at start, and a bad one names the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from framewire.app.compose.model import build_task
from framewire.app.compose.settings import check_settings, settings_hooks
from framewire.config import Config, load_config
from framewire.pipeline.errors import ConfigError

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
LINE = {"name": "door", "start": [75, 10], "end": [75, 140]}  # carphone_pristine.mp4 is 176x144


def _config(tmp: Path, *extra: str) -> Config:
    sets = ["tracking={}", "http.enabled=true", f"http.state_file={tmp}/sources.json",
            "analytics={carphone: {lines: [{name: door, start: [75, 10], end: [75, 140]}]}}", *extra]
    return load_config(ROOT / "configs" / "default.yaml", sets)


def _check(config: Config, change: Any, current: Any = None, size: Any = None) -> dict[str, Any]:
    return check_settings(config, build_task(config), "carphone", change, current or {}, size)


@pytest.mark.parametrize(
    ("change", "line"),
    [
        ({"lines": [{**LINE, "end": [75, 10]}]}, "lines.0: line 'door': start and end are the same point; a line needs two"),
        ({"lines": [{**LINE, "end": [75, 400]}]}, "lines.0: 'door' has the point [75, 400] outside the 176x144 frame"),
        ({"lines": [{**LINE, "start": "x"}]}, "lines.0.start: Input should be a valid tuple (got 'x')"),
        ({"zones": [{"name": "z", "polygon": [[0, 0], [1, 1]]}]},
         "zones.0.polygon: a polygon needs at least 3 points, this one has 2 (got [[0, 0], [1, 1]])"),
        ({"lines": [LINE, LINE]}, "lines.1.name: duplicate name 'door'"),
        ({"lines": [{**LINE, "classes": ["cat"]}]}, "lines.0.classes: 'cat' is not a label of the model (labels: face)"),
        ({"classes": [3]}, "classes: class id 3 is out of range (the model has 1 classes)"),
        ({"score_threshold": 1.5}, "score_threshold: Input should be less than or equal to 1 (got 1.5)"),
        ({"interval": -1}, "interval: Input should be greater than or equal to 0 (got -1)"),
        ({"line": []}, "line: unknown key (did you mean lines?)"),
    ],
)
def test_a_change_the_config_would_refuse_is_one_line_naming_the_key(tmp_path: Path, change: Any, line: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _check(_config(tmp_path), change)
    assert str(raised.value) == line


def test_a_change_merges_over_the_last_and_null_gives_a_key_back(tmp_path: Path) -> None:
    config = _config(tmp_path)
    zone = {"name": "left", "polygon": [[0, 0], [75, 0], [75, 143]]}
    first = _check(config, {"zones": [zone], "score_threshold": 0.5})
    kept_zone = {**zone, "polygon": [[0.0, 0.0], [75.0, 0.0], [75.0, 143.0]], "classes": None}
    assert first == {"zones": [kept_zone], "score_threshold": 0.5}
    second = _check(config, {"score_threshold": None, "interval": 2}, first)
    assert second == {"zones": first["zones"], "interval": 2}
    # The frame the source opened at counts, not the file's: 100x150 here.
    with pytest.raises(ConfigError, match=r"^zones.0: 'left' has the point \[120, 0\] outside the 100x150 frame$"):
        _check(config, {"zones": [{"name": "left", "polygon": [[0, 0], [120, 0], [0, 143]]}]}, size=(100, 150))


def test_without_tracking_lines_are_refused_and_a_threshold_is_not(tmp_path: Path) -> None:
    config = load_config(ROOT / "configs" / "default.yaml", ["http.enabled=true"])
    with pytest.raises(ConfigError, match=r"^lines: needs tracking: in the job's config"):
        _check(config, {"lines": [LINE]})
    assert _check(config, {"score_threshold": 0.8}) == {"score_threshold": 0.8}


def test_the_state_file_is_read_and_checked_at_start(tmp_path: Path) -> None:
    state = tmp_path / "sources.json"
    state.write_text(json.dumps({"version": 1, "sources": {"carphone": {"interval": 1}, "later": {"lines": [LINE]}}}))
    config = _config(tmp_path)
    hooks = settings_hooks(config, build_task(config))
    assert hooks is not None and hooks.state_file == str(state)
    line = {**LINE, "start": [75.0, 10.0], "end": [75.0, 140.0], "classes": None, "hysteresis": 0.0,
            "hysteresis_unit": "pixels", "once": False}
    assert hooks.initial == {"carphone": {"interval": 1}, "later": {"lines": [line]}}
    applied = hooks.shown("carphone", {"interval": 1})
    assert applied["lines"][0]["name"] == "door" and applied["interval"] == 1 and applied["score_threshold"] == 0.7
    state.write_text(json.dumps({"version": 1, "sources": {"carphone": {"lines": [{**LINE, "end": [75, 999]}]}}}))
    with pytest.raises(ConfigError) as raised:
        settings_hooks(config, build_task(config))
    where = f"http.state_file: {state}: sources.carphone.lines.0"
    assert str(raised.value) == f"{where}: 'door' has the point [75, 999] outside the 176x144 frame: fix or remove it"
    assert settings_hooks(load_config(ROOT / "configs" / "default.yaml"), build_task(config)) is None  # no HTTP
