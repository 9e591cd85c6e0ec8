"""A source added through POST /sources is refused with the config file's one-line errors: the key
path under `source`, a "did you mean" for a misspelt key, a missing file named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from framewire.app.compose.sources import make_source
from framewire.config import load_config
from framewire.pipeline.errors import ConfigError

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
BIKES = str(ROOT / "assets" / "videos" / "bikes.mp4")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"id": "cam", "urii": BIKES}, "source.urii: unknown key (did you mean uri?)"),
        ({"id": "cam", "uri": BIKES, "polcy": "block"}, "source.polcy: unknown key (did you mean policy?)"),
        ({"id": "cam", "uri": BIKES, "reconnect": {"initial": 1}}, "source.reconnect.initial: unknown key (did you mean initial_s?)"),
        ({"id": "cam", "uri": BIKES, "frames": 5}, "source.frames: unknown key (did you mean max_frames?)"),
        # A kind no source has (an output's, posted as a source): the registry's names, one line.
        ({"id": "cam", "uri": BIKES, "kind": "json"}, "source.kind: unknown source 'json' (one of camera, file, stream, zmq)"),
        ({"kind": "jsonl", "path": "x.jsonl"}, "source.kind: unknown source 'jsonl' (one of camera, file, stream, zmq)"),
        ({"id": "cam"}, "source.uri: required key is missing"),
        ({"id": "cam", "uri": BIKES, "policy": "json"},
         "source.policy: Input should be 'block', 'drop_oldest' or 'drop_newest' (got 'json')"),
        ({"id": "cam", "uri": "/nowhere/clip.mp4"}, "source.uri: file not found: /nowhere/clip.mp4"),
    ],
)  # fmt: skip
def test_a_bad_body_is_one_line_like_the_config_file(body: dict[str, Any], message: str) -> None:
    config = load_config(ROOT / "configs" / "default.yaml")
    with pytest.raises(ConfigError) as info:
        make_source(config, body)
    assert str(info.value) == message


def test_a_file_that_is_not_a_video_is_refused_when_added(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a video\n" * 50)
    config = load_config(ROOT / "configs" / "default.yaml")
    with pytest.raises(ConfigError) as info:
        make_source(config, {"id": "notes", "uri": str(notes)})
    assert str(info.value).startswith("source.uri: source notes: ") and "notes.txt" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_good_body_is_a_source_plan() -> None:
    config = load_config(ROOT / "configs" / "default.yaml")
    assert make_source(config, {"id": "cam", "uri": BIKES, "max_frames": 3}).source_id == "cam"
