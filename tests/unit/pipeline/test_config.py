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
        "sources.1={id: cam1, uri: b.mp4}",
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
    with pytest.raises(ConfigError, match="past its end"):
        apply_override(raw, "sources.5.uri=x")
    with pytest.raises(ConfigError, match="must be a list index"):
        apply_override(raw, "sources.first.uri=x")
    assert "engine.threads" in error_of(MINIMAL, "engine.threads=-1")


def test_a_key_of_an_item_past_the_end_of_a_list_is_one_line_that_says_how_to_add_one() -> None:
    """Issue 39: `--set sources.1.realtime=true` on one source made a second, half-made source
    ("sources.1.id: required key is missing (and 1 more)")."""
    raw: dict = {"sources": [{"id": "a", "uri": "a.mp4"}], "outputs": []}
    with pytest.raises(ConfigError) as caught:
        apply_override(raw, "sources.1.realtime=true")
    assert str(caught.value) == (
        "--set sources.1.realtime: sources has 1 item (sources.0), so sources.1 is past its end; "
        "to add one, give it whole: --set 'sources.1={id: ..., uri: ..., realtime: true}'"
    )
    assert raw["sources"] == [{"id": "a", "uri": "a.mp4"}]  # nothing added
    with pytest.raises(ConfigError, match=r"^--set outputs.0.path: outputs has 0 items, so outputs.0 is past its end; "
                       r"to add one, give it whole: --set 'outputs.0=\{kind: ..., path: x\}'$"):
        apply_override(raw, "outputs.0.path=x")
    apply_override(raw, "sources.1={id: b, uri: b.mp4}")  # a whole item, at the end
    assert raw["sources"][1] == {"id": "b", "uri": "b.mp4"}
    with pytest.raises(ConfigError, match=r"sources has 2 items \(sources.0 to sources.1\), so sources.3 is past"):
        apply_override(raw, "sources.3={id: c, uri: c.mp4}")


def test_resolve_path() -> None:
    assert resolve_path("out/{source_id}.mp4", "cam0") == "out/cam0.mp4"


# --- the keys of the retired remote stage workers ------------------------------------------------

RETIRED = (
    "transport.{key}: removed after framewire 0.1 with the remote stage workers (the `worker` command): run "
    "inference on Triton (engine.backend: triton) or share sources across replicas (fleet:){curve}; docs: "
    "Guides, Past one machine"
)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("listen", "tcp://127.0.0.1:5570"),
        ("remote_stages", "[infer]"),
        ("remote_timeout_s", "10"),
        ("remote_wait_s", "null"),
        ("curve_secret_key", "keys/hub.key_secret"),
        ("curve_clients", "keys/workers"),
        ("allow_plaintext", "false"),
    ],
)
def test_a_retired_transport_key_says_what_replaced_it(key: str, value: str) -> None:
    curve = "; CurveZMQ stays on zmq outputs and sources" if key.startswith(("curve", "allow")) else ""
    assert error_of(MINIMAL, f"transport.{key}={value}") == "test.yaml: " + RETIRED.format(key=key, curve=curve)


def test_a_retired_key_in_the_file_fails_beside_valid_transport_keys() -> None:
    text = MINIMAL + "transport:\n  slots_per_source: 8\n  remote_stages: [infer]\n  listen: tcp://127.0.0.1:5570\n"
    assert error_of(text) == "test.yaml: " + RETIRED.format(key="listen", curve="")
    assert load(MINIMAL, "transport.slots_per_source=8").transport.slots_per_source == 8


def stage_names(config: Config) -> list[str]:
    """The job's stages as the hub names them (framewire.app.compose.plan lists them)."""
    from framewire.app.compose.plan import stage_specs

    return [spec.name for spec in stage_specs(config)]


def test_outputs_are_stages_by_name() -> None:
    assert stage_names(load(MINIMAL))[-1] == "output0.jsonl"


def test_fused_stages_and_outputs_are_one_stage_each() -> None:
    two = "outputs=[{kind: jsonl, path: a.jsonl}, {kind: video_file, path: a.mp4}]"
    fused = load(MINIMAL, two, "stages.fuse=true", "stages.fuse_outputs=true")
    assert stage_names(fused) == ["infer", "outputs"]
    one_output = load(MINIMAL, "stages.fuse_outputs=true")
    assert stage_names(one_output) == ["preprocess", "infer", "postprocess", "output0.jsonl"]


def test_a_stall_timeout_is_on_by_default_and_can_be_off() -> None:
    assert load(MINIMAL).stages.stall_timeout_s == 60
    assert load(MINIMAL, "stages.stall_timeout_s=null").stages.stall_timeout_s is None
    assert "stages.stall_timeout_s: Input should be greater than 0" in error_of(MINIMAL, "stages.stall_timeout_s=0")
