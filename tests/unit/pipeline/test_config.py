from __future__ import annotations

from pathlib import Path

import pytest

from framewire.config import Config, Policy, apply_override, load_config, resolve_path
from framewire.pipeline.errors import ConfigError

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[3]

MINIMAL = """
sources:
  - id: cam0
    uri: clip.mp4
model:
  path: model.onnx
  task: face_detection
outputs:
  - kind: jsonl
    path: out/{source_id}.jsonl
"""


def load(text: str, *overrides: str) -> Config:
    return load_config("test.yaml", overrides, text=text)


def error_of(text: str, *overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(text, *overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", ["default.yaml", "matting.yaml"])
def test_shipped_configs_load(name: str) -> None:
    config = load_config(ROOT / "configs" / name)
    assert config.sources and config.outputs


def test_defaults() -> None:
    config = load(MINIMAL)
    source = config.sources[0]
    assert source.policy is Policy.BLOCK and source.realtime is False
    assert config.engine.processes_per_device == 1
    assert config.model.params == {}


def test_task_parameters_sit_beside_path_and_task() -> None:
    config = load(MINIMAL.replace("task: face_detection", "task: face_detection\n  score_threshold: 0.5"))
    assert config.model.params == {"score_threshold": 0.5}


def test_unknown_key_is_named() -> None:
    message = error_of(MINIMAL.replace("uri: clip.mp4", "uri: clip.mp4\n    polcy: block"))
    assert message == "test.yaml: sources.0.polcy: unknown key (did you mean policy?)"


def test_wrong_type_names_key_and_value() -> None:
    message = error_of(MINIMAL + "engine:\n  threads: two\n")
    assert message.startswith("test.yaml: engine.threads:")
    assert "'two'" in message


def test_bad_enum_names_value() -> None:
    message = error_of(MINIMAL.replace("uri: clip.mp4", "uri: clip.mp4\n    policy: blok"))
    assert "sources.0.policy" in message and "'blok'" in message


def test_missing_required_key() -> None:
    message = error_of(MINIMAL.replace("    uri: clip.mp4\n", ""))
    assert message == "test.yaml: sources.0.uri: required key is missing"


def test_bad_output_kind_and_endpoint() -> None:
    assert "outputs.0" in error_of(MINIMAL.replace("kind: jsonl", "kind: jsonnl"))
    bad = MINIMAL + "  - kind: zmq\n    endpoint: localhost:5560\n"
    assert "outputs.1.zmq.endpoint" in error_of(bad) or "outputs.1.endpoint" in error_of(bad)


def test_duplicate_source_ids() -> None:
    text = MINIMAL.replace("sources:\n", "sources:\n  - id: cam0\n    uri: other.mp4\n")
    assert "sources.1.id: duplicate source id 'cam0'" in error_of(text)


def test_several_sources_need_source_id_in_paths() -> None:
    text = MINIMAL.replace("sources:\n", "sources:\n  - id: cam1\n    uri: other.mp4\n").replace(
        "out/{source_id}.jsonl", "out/all.jsonl"
    )
    assert "outputs.0.path" in error_of(text)


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    assert "not valid YAML" in error_of("sources: [\n")
    assert "top level must be a mapping" in error_of("- a\n- b\n")
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")


def test_set_overrides_scalars_lists_and_new_items() -> None:
    config = load(
        MINIMAL,
        "sources.0.uri=other.mp4",
        "engine.threads=3",
        "sources.0.realtime=true",
        "sources.1.id=cam1",
        "sources.1.uri=b.mp4",
        "model.score_threshold=0.6",
    )
    assert config.sources[0].uri == "other.mp4"
    assert config.engine.threads == 3
    assert config.sources[0].realtime is True
    assert config.sources[1].id == "cam1"
    assert config.model.params["score_threshold"] == 0.6


def test_set_errors() -> None:
    raw: dict = {"sources": [{"id": "a"}]}
    with pytest.raises(ConfigError, match="expected key.path=value"):
        apply_override(raw, "sources.0.uri")
    with pytest.raises(ConfigError, match="past the end"):
        apply_override(raw, "sources.5.uri=x")
    with pytest.raises(ConfigError, match="must be a list index"):
        apply_override(raw, "sources.first.uri=x")
    assert "engine.threads" in error_of(MINIMAL, "engine.threads=-1")


def test_resolve_path() -> None:
    assert resolve_path("out/{source_id}.mp4", "cam0") == "out/cam0.mp4"


# --- transport.listen: workers on other hosts --------------------------------------------------


def test_the_hub_listens_on_tcp_only_when_asked() -> None:
    assert load(MINIMAL).transport.listen is None
    config = load(MINIMAL, "transport.listen=tcp://127.0.0.1:5570", "transport.remote_stages=[infer]")
    assert config.transport.listen == "tcp://127.0.0.1:5570" and config.transport.remote_stages == ("infer",)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["transport.listen=tcp://0.0.0.0:5570"],
            "transport.listen: tcp://0.0.0.0:5570 is reachable from other hosts: set transport.curve_secret_key",
        ),
        (["transport.listen=ipc:///tmp/x.sock"], "transport.listen: expected tcp://HOST:PORT"),
        (["transport.listen=tcp://10.0.0.1:99999"], "transport.listen: expected tcp://HOST:PORT"),
        (
            ["transport.listen=tcp://0.0.0.0:5570", "transport.curve_secret_key=hub.key_secret"],
            "transport.curve_clients: required with transport.curve_secret_key",
        ),
        (["transport.remote_stages=[infer]"], "transport.listen: remote_stages and curve keys need"),
        (
            ["transport.listen=tcp://127.0.0.1:5570", "transport.remote_stages=[decode]"],
            "transport.remote_stages: 'decode' is not a stage of this job (preprocess, infer, postprocess, "
            "output0.jsonl)",
        ),
    ],
)
def test_bad_listen_settings_are_one_line_errors(overrides: list[str], expected: str) -> None:
    assert expected in error_of(MINIMAL, *overrides)


def test_off_loopback_the_hub_needs_curve_or_an_explicit_plaintext() -> None:
    curve = load(
        MINIMAL,
        "transport.listen=tcp://0.0.0.0:5570",
        "transport.curve_secret_key=keys/hub.key_secret",
        "transport.curve_clients=keys/workers",
    )
    assert curve.transport.curve_clients == "keys/workers"
    plain = load(MINIMAL, "transport.listen=tcp://10.1.2.3:5570", "transport.allow_plaintext=true")
    assert plain.transport.allow_plaintext
    assert load(MINIMAL, "transport.listen=tcp://[::1]:5570").transport.listen == "tcp://[::1]:5570"


def test_outputs_are_stages_by_name() -> None:
    config = load(MINIMAL, "transport.listen=tcp://localhost:5570", "transport.remote_stages=[output0.jsonl]")
    assert config.stage_names()[-1] == "output0.jsonl"


def test_fused_stages_are_the_stages_a_remote_worker_can_take() -> None:
    two = "outputs=[{kind: jsonl, path: a.jsonl}, {kind: video_file, path: a.mp4}]"
    fused = load(MINIMAL, two, "stages.fuse=true", "stages.fuse_outputs=true")
    assert fused.stage_names() == ["infer", "outputs"]
    assert load(MINIMAL, "stages.fuse_outputs=true").stage_names() == ["preprocess", "infer", "postprocess", "output0.jsonl"]
    expected = "transport.remote_stages: 'preprocess' is not a stage of this job (infer, outputs)"
    listen = ("transport.listen=tcp://127.0.0.1:5570", "transport.remote_stages=[preprocess]")
    assert expected in error_of(MINIMAL, two, "stages.fuse=true", "stages.fuse_outputs=true", *listen)


def test_a_stall_timeout_is_on_by_default_and_can_be_off() -> None:
    assert load(MINIMAL).stages.stall_timeout_s == 60
    assert load(MINIMAL, "stages.stall_timeout_s=null").stages.stall_timeout_s is None
    assert "stages.stall_timeout_s: Input should be greater than 0" in error_of(MINIMAL, "stages.stall_timeout_s=0")
