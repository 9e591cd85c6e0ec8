"""The one Registry type: entries from an entry-point group, loaded lazily, duplicates and unknown
names refused in one line. Real distributions: dist-info folders on sys.path, read by importlib.metadata."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from framewire.pipeline.errors import ConfigError
from framewire.registry import COMPOSITES, OUTPUTS, SOURCES, STEPS, TASKS, Registry

pytestmark = pytest.mark.timeout(60)

GROUP = "framewire.widgets"


def _dist(root: Path, name: str, entries: dict[str, str], module: str | None = None, body: str = "") -> None:
    """A distribution `name` installed under `root`: its dist-info and, with `module`, its code."""
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "\n".join(f"{key} = {value}" for key, value in entries.items())
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{lines}\n")
    if module:
        (root / f"{module}.py").write_text(textwrap.dedent(body))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("fw_widget")]:
        del sys.modules[name]


def test_entries_load_lazily_and_once(site: Path) -> None:
    _dist(site, "widgets-a", {"round": "fw_widget_round:Round", "square": "fw_widget_square:Square"})
    (site / "fw_widget_round.py").write_text("class Round:\n    sides = 0\n")
    (site / "fw_widget_square.py").write_text("class Square:\n    sides = 4\n")
    widgets: Registry[type] = Registry("widgets", "widget")
    assert widgets.names() == ("round", "square")
    assert "round" in widgets and "hexagon" not in widgets
    assert "fw_widget_round" not in sys.modules  # listing imports nothing
    first = widgets.get("round")
    assert first.sides == 0 and widgets.get("round") is first  # type: ignore[attr-defined]
    assert "fw_widget_square" not in sys.modules  # only the entry asked for
    assert widgets.distribution("round") == "widgets-a"


def test_unknown_name_lists_the_names_and_guesses(site: Path) -> None:
    _dist(site, "widgets-a", {"round": "fw_widget_round:Round", "square": "fw_widget_square:Square"})
    with pytest.raises(ConfigError) as info:
        Registry("widgets", "widget").get("sqare", "things.0.kind")
    assert str(info.value) == "things.0.kind: unknown widget 'sqare' (one of round, square; did you mean square?)"
    assert info.value.exit_code == 2


def test_a_name_from_two_distributions_is_refused_naming_both(site: Path) -> None:
    _dist(site / "a", "widgets-a", {"round": "fw_widget_round:Round"})
    _dist(site / "b", "widgets-b", {"round": "fw_widget_other:Round"})
    sys.path[:0] = [str(site / "a"), str(site / "b")]
    try:
        with pytest.raises(ConfigError) as info:
            Registry("widgets", "widget").get("round")
    finally:
        sys.path.remove(str(site / "a"))
        sys.path.remove(str(site / "b"))
    message = str(info.value)
    assert "'round' is registered twice in framewire.widgets" in message
    assert "widgets-a (fw_widget_round:Round)" in message and "widgets-b (fw_widget_other:Round)" in message
    assert "\n" not in message


def test_one_distribution_found_twice_is_one_entry(site: Path) -> None:
    _dist(site / "a", "widgets-a", {"round": "fw_widget_round:Round"})
    _dist(site / "b", "widgets-a", {"round": "fw_widget_round:Round"})
    (site / "fw_widget_round.py").write_text("class Round:\n    pass\n")
    sys.path[:0] = [str(site / "a"), str(site / "b")]
    try:
        assert Registry("widgets", "widget").get("round").__name__ == "Round"
    finally:
        sys.path.remove(str(site / "a"))
        sys.path.remove(str(site / "b"))


def test_an_entry_that_fails_to_import_is_one_config_error(site: Path) -> None:
    _dist(site, "widgets-a", {"broken": "fw_widget_broken:Broken", "missing": "fw_widget_nowhere:X"})
    (site / "fw_widget_broken.py").write_text("raise RuntimeError('no licence\\nsecond line')\n")
    widgets: Registry[type] = Registry("widgets", "widget")
    with pytest.raises(ConfigError) as info:
        widgets.get("broken")
    assert str(info.value) == (
        "kind: cannot load widget 'broken' (fw_widget_broken:Broken, from widgets-a): RuntimeError: no licence"
    )
    with pytest.raises(ConfigError, match="cannot load widget 'missing'.*ModuleNotFoundError"):
        widgets.get("missing")


def test_the_builtins_come_through_the_same_groups() -> None:
    assert {"face_detection", "detection", "matting", "classification"} <= set(TASKS.names())
    assert STEPS.names() == ("audio_features", "region", "vad")
    assert {"blur", "boxes", "paste"} <= set(COMPOSITES.names())
    assert {"video_file", "jsonl", "zmq"} <= set(OUTPUTS.names())
    assert {"file", "stream", "camera", "zmq"} <= set(SOURCES.names())
    for name in ("video_file", "jsonl", "zmq"):
        assert OUTPUTS.distribution(name) == "framewire"
        assert OUTPUTS.get(name).Config.model_fields["kind"].annotation.__args__ == (name,)
