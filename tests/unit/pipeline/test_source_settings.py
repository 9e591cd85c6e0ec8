"""Sources' settings changed at run time, in the runtime: the state file (atomic, refused in one
line when corrupt), the hub's CONFIGURE to the workers (and to a worker that says READY later),
the worker's handling of it, and the commands that check, keep, send and announce a change."""

from __future__ import annotations

import functools
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import Frame, Stage
from framewire.pipeline.hub.peers import Roster, StageWorker
from framewire.pipeline.hub.source_settings import SourceSettings
from framewire.pipeline.ops import state_file
from framewire.pipeline.ops.settings import Settings
from framewire.pipeline.plan import SettingsHooks
from framewire.pipeline.wire import messages as msg
from framewire.pipeline.worker.configure import configure
from framewire.pipeline.worker.hub_link import WorkerSpec

pytestmark = pytest.mark.timeout(30)


def test_the_state_file_round_trips_is_written_whole_and_a_missing_one_is_empty(tmp_path: Path) -> None:
    path = str(tmp_path / "state" / "sources.json")
    assert state_file.load(path) == {}
    state_file.save(path, {"b": {"interval": 2}, "a": {"lines": [{"name": "x"}]}})
    kept = {"a": {"lines": [{"name": "x"}]}, "b": {"interval": 2}}
    assert json.loads(Path(path).read_text()) == {"version": 1, "sources": kept}
    state_file.save(path, {"a": {}})
    assert state_file.load(path) == {"a": {}}
    assert os.listdir(tmp_path / "state") == ["sources.json"]  # no temporary file left


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"version": 1, "sources": {', "is not JSON"),
        ('{"version": 2, "sources": {}}', "is not a state file"),
        ("[]", "is not a state file"),
        ('{"version": 1, "sources": {"a": 3}}', "sources.a is not a map"),
    ],
)
def test_a_corrupt_state_file_is_refused_in_one_line_naming_it(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "sources.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        state_file.load(str(path))
    line = str(raised.value)
    assert line.startswith(f"http.state_file: {path}") and why in line and "\n" not in line


def test_a_failed_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "sources.json")
    state_file.save(path, {"a": {"interval": 1}})

    def full(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        state_file.save(path, {"a": {"interval": 5}})
    assert state_file.load(path) == {"a": {"interval": 1}} and os.listdir(tmp_path) == ["sources.json"]


class _Peers:
    """Workers of two stages and an output, recording what the hub sends each."""

    def __init__(self) -> None:
        self.sent: dict[str, list[dict[str, Any]]] = {}
        self.roster = Roster({"infer": [], "track": [], "out": []})
        for stage in ("infer", "track", "out"):
            self.roster.add(self.peer(stage, 0))

    def peer(self, stage: str, index: int, ready: bool = True) -> StageWorker:
        spec = WorkerSpec(stage, index, 0, "ipc://x", 2, functools.partial(int))
        name = f"{stage}[{index}]"

        def send(identity: bytes, header: dict[str, Any], tensors: Any = None) -> bool:
            self.sent.setdefault(name, []).append(header)
            return True

        peer = StageWorker(spec, None, send)
        peer.ready = ready
        return peer


def test_the_hub_sends_a_change_to_every_ready_middle_worker_and_all_of_them_after_a_ready() -> None:
    peers = _Peers()
    settings = SourceSettings(peers.roster, ("infer", "track"), {"cam": {"interval": 1}})
    starting = peers.peer("track", 1, ready=False)
    peers.roster.add(starting)
    assert settings.set("door", {"lines": [{"name": "a"}]}) == 2
    configure_door = {"type": msg.CONFIGURE, "source": "door", "settings": {"lines": [{"name": "a"}]}}
    assert peers.sent == {"infer[0]": [configure_door], "track[0]": [configure_door]}  # not the output
    starting.ready = True
    settings.to_worker(starting)  # its READY: every source's settings
    configure_cam = {"type": msg.CONFIGURE, "source": "cam", "settings": {"interval": 1}}
    assert peers.sent["track[1]"] == [configure_cam, configure_door]
    settings.set("cam", {})
    assert "cam" not in settings.current and peers.sent["infer[0]"][-1]["settings"] == {}
    msg.decode(msg.encode(configure_door))  # a message of the wire's schema


class _Configurable(Stage):
    def __init__(self, fails: bool = False) -> None:
        self.got: list[tuple[str, dict[str, Any]]] = []
        self.fails = fails

    def process(self, frame: Frame) -> Any:
        yield frame

    def configure(self, source_id: str, settings: dict[str, Any]) -> None:
        if self.fails:
            raise ValueError("no such thing")
        self.got.append((source_id, settings))


def test_the_worker_hands_a_configure_to_its_stage_and_goes_on_when_it_fails(caplog: Any) -> None:
    stage = _Configurable()
    configure(stage, {"type": msg.CONFIGURE, "source": "cam", "settings": {"interval": 3}})
    assert stage.got == [("cam", {"interval": 3})]
    with caplog.at_level(logging.WARNING):
        configure(stage, {"type": msg.CONFIGURE, "source": 3})
        configure(_Configurable(fails=True), {"type": msg.CONFIGURE, "source": "cam", "settings": {}})
    assert [r.getMessage() for r in caplog.records] == [
        "dropped a CONFIGURE without a source and its settings",
        "source cam: cannot apply its new settings: ValueError: no such thing",
    ]
    class Plain(Stage):
        def process(self, frame: Frame) -> Any:
            yield frame

    configure(Plain(), {"type": msg.CONFIGURE, "source": "cam", "settings": {}})  # the default ignores it


def _check(source_id: str, change: Any, current: Any, size: Any) -> dict[str, Any]:
    if "bad" in change:
        raise ConfigError("bad: unknown key")
    return {**current, **change, "size": size}


def test_a_change_is_checked_kept_sent_and_announced(tmp_path: Path) -> None:
    path = str(tmp_path / "sources.json")
    peers = _Peers()
    current = SourceSettings(peers.roster, ("infer",), {})
    announced: list[tuple[str, Any, Any]] = []
    events = SimpleNamespace(configured=lambda *a: announced.append(a))
    inputs = SimpleNamespace(sources={"cam": SimpleNamespace(info={"width": 64, "height": 48})})
    hooks = SettingsHooks(frozenset({"interval", "bad"}), _check, {}, path)
    settings = Settings(hooks, current, inputs, events)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="^bad: unknown key$"):
        settings.change("cam", {"bad": 1})
    with pytest.raises(ConfigError, match="the body must be a JSON object"):
        settings.change("cam", [1])
    assert not Path(path).exists() and announced == [] and peers.sent == {}  # refused: nothing happened
    assert settings.change("cam", {"interval": 2}) == {"interval": 2, "size": (64, 48)}  # the size it opened at
    assert state_file.load(path) == {"cam": {"interval": 2, "size": [64, 48]}}
    assert peers.sent["infer[0]"][-1]["settings"]["interval"] == 2
    assert announced == [("cam", {"interval": 2, "size": (64, 48)}, {"interval": 2})]
    assert settings.split({"id": "x", "uri": "f.mp4", "interval": 1}) == ({"id": "x", "uri": "f.mp4"}, {"interval": 1})
    settings.forget("cam")
    assert state_file.load(path) == {} and current.current == {}
