"""A shipped config runs from any folder: the model's files beside it (`labels:`) resolve like
`model.path`; a union member's error names the key, not pydantic's member type."""

from __future__ import annotations

from pathlib import Path

import pytest

from framewire.config import load_config, resolve_inputs
from framewire.pipeline.errors import ConfigError

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[3]


def test_a_labels_file_resolves_like_the_model_from_another_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = resolve_inputs(load_config(ROOT / "configs" / "ssd.yaml"), [ROOT])
    labels = Path(config.model.params["labels"])
    assert labels.is_absolute() and labels.is_file()
    assert labels == ROOT / "assets/models/ssd_mobilenet_v2_coco/coco_labels.txt"
    assert Path(config.model.path).is_file()


def test_a_missing_labels_file_is_one_line_naming_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "configs" / "ssd.yaml").read_text().replace("coco_labels.txt", "nope.txt")
    config = resolve_inputs(load_config("ssd.yaml", text=text), [ROOT])
    from framewire.app.compose.model import build_task

    with pytest.raises(ConfigError) as info:
        build_task(config)
    message = str(info.value)
    assert message.startswith("model.labels: cannot read labels file") and "nope.txt" in message
    assert "\n" not in message


def test_a_union_members_error_names_the_key_alone() -> None:
    text = (ROOT / "configs" / "ssd.yaml").read_text()
    config = resolve_inputs(load_config("ssd.yaml", ["model.labels=5"], text=text), [ROOT])
    from framewire.app.compose.model import build_task

    with pytest.raises(ConfigError) as info:
        build_task(config)
    message = str(info.value)
    assert message.split(": ")[0] == "model.labels", message
    assert "function-after" not in message and "\n" not in message


def test_a_urls_password_is_hidden_in_a_config_error() -> None:
    text = """
sources:
  - {id: cam, uri: "rtsp://admin:hunter2@127.0.0.1:8554/cam", live: true}
model: {path: m.onnx, task: face_detection}
outputs: [{kind: jsonl, path: "out/{source_id}.jsonl"}]
http: {port: "mqtt://bob:s3cret@broker:1883"}
"""
    with pytest.raises(ConfigError) as info:
        load_config("t.yaml", text=text)
    message = str(info.value)
    assert "http.port" in message and "s3cret" not in message and "bob:***@broker" in message, message
