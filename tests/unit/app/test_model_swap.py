"""A running job's model pointed at a new file (framewire.app.compose.model_swap): the checks of the
config's model, refused in one line naming the key, and the specs of the stages that hold it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from framewire.app.compose.plan import build_plan
from framewire.config import load_config
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.plan import Plan

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
YUNET = ROOT / "assets" / "models" / "yunet" / "face_detection_yunet_2023mar.onnx"


def plan(*overrides: str) -> Plan:
    return build_plan(load_config(ROOT / "configs" / "default.yaml", list(overrides)))


def test_a_copy_gives_the_stages_that_hold_the_model_with_its_version(tmp_path: Path) -> None:
    new = shutil.copy(YUNET, tmp_path / "v2.onnx")
    job = plan()
    assert job.model is not None and job.model.version.startswith("face_detection_yunet_2023mar.onnx@")
    assert job.update_model is not None
    update = job.update_model({"path": str(new), "version": "v2"})
    assert (update.model.path, update.model.version) == (str(new), "v2")
    assert [s.name for s in update.stages] == ["infer"] and update.stages[0].facts == job.spec("infer").facts
    unnamed = job.update_model({"path": str(new)})
    assert unnamed.model.version == "v2.onnx@" + job.model.version.split("@")[1]  # same bytes, same hash
    unfused = plan("stages.fuse=false")
    assert unfused.update_model is not None
    assert [s.name for s in unfused.update_model({"path": str(new)}).stages] == ["preprocess", "infer", "postprocess"]


def test_a_file_the_config_would_refuse_is_refused_in_one_line_naming_the_key(tmp_path: Path) -> None:
    job = plan()
    assert job.update_model is not None
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(YUNET.read_bytes()[:100_000])
    refusals = {
        "model.path: required key is missing": {"version": "v2"},
        "model.pth: unknown key (did you mean path?)": {"pth": str(cut)},
        "model.version: not a label: ''": {"path": str(YUNET), "version": ""},
        f"model.path: model file not found: {tmp_path / 'gone.onnx'}": {"path": str(tmp_path / "gone.onnx")},
        f"model.path: model file '{cut}' is not a valid ONNX model": {"path": str(cut)},
        "model.path: model file ": {"path": str(ROOT / "assets" / "models" / "u2netp" / "u2netp.onnx")},
    }
    for line, body in refusals.items():
        with pytest.raises(ConfigError) as refused:
            job.update_model(body)
        assert str(refused.value).startswith(line) and "\n" not in str(refused.value), body
