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


def test_a_model_found_nowhere_names_every_place_looked_in_and_a_near_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39: "model.path: model file not found: assets/...onnx" said neither where it looked nor
    that the folder holds nanodet_m_416.onnx."""
    project, work = tmp_path / "project", tmp_path / "work"
    (project / "models").mkdir(parents=True)
    (project / "models" / "nanodet_m_416.onnx").write_bytes(b"")
    (project / "models" / "labels.txt").write_text("person\n")
    work.mkdir()
    job = project / "job.yaml"
    job.write_text(
        "sources: [{id: a, uri: a.mp4}]\nmodel: {path: models/nanodet_m416.onnx, task: detection}\n"
        "outputs: [{kind: jsonl, path: out.jsonl}]\n"
    )
    monkeypatch.chdir(work)
    with pytest.raises(ConfigError) as info:
        resolve_inputs(load_config(job), [project], job)
    assert str(info.value) == (
        f"model.path: model file not found: models/nanodet_m416.onnx (looked in the working folder: "
        f"{work}/models/nanodet_m416.onnx; beside the config: {project}/models/nanodet_m416.onnx); "
        "did you mean models/nanodet_m_416.onnx?"
    )
    monkeypatch.chdir(project)  # the working folder is the config's: looked in once
    with pytest.raises(ConfigError) as info:
        resolve_inputs(load_config(job), [project], job)
    assert str(info.value) == (
        "model.path: model file not found: models/nanodet_m416.onnx (looked in the working folder and "
        f"beside the config: {project}/models/nanodet_m416.onnx); did you mean models/nanodet_m_416.onnx?"
    )
    near = "model.path=models/nanodet_m_416.onnx"
    found = resolve_inputs(load_config(job, [near]), [project], job)
    assert found.model.path == "models/nanodet_m_416.onnx"  # found from the working folder, kept as typed
    vad = "steps=[{kind: vad, model: models/silero.onnx}]"
    with pytest.raises(ConfigError, match=r"^steps.0.model: model file not found: models/silero.onnx \("):
        resolve_inputs(load_config(job, [near, vad]), [project], job)
    with pytest.raises(ConfigError, match=r"^model.path: model file not found: /nowhere/m.onnx$"):
        resolve_inputs(load_config(job, ["model.path=/nowhere/m.onnx"]), [project], job)
