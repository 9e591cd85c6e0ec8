"""Config errors as a user meets them: unknown keys first with a "did you mean", one prefix per
message, `--set` keeping text for keys that take text, `${VAR}` expansion, output path templates."""

from __future__ import annotations

from pathlib import Path

import pytest

from framewire.config import Config, load_config
from framewire.config.keys import known_keys, text_key
from framewire.pipeline.errors import ConfigError

pytestmark = pytest.mark.timeout(30)

DEFAULT = (Path(__file__).resolve().parents[3] / "configs" / "default.yaml").read_text()


def load(text: str = DEFAULT, *overrides: str, environ: dict[str, str] | None = None) -> Config:
    return load_config("job.yaml", overrides, text=text, environ=environ or {})


def error_of(text: str = DEFAULT, *overrides: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load(text, *overrides, environ=environ)
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize(
    ("text", "overrides", "message"),
    [
        # The misspelt key is named, not the required key it leaves missing.
        (DEFAULT.replace("sources:", "sourcez:"), (), "job.yaml: sourcez: unknown key (did you mean sources?)"),
        (DEFAULT, ("sources.0.polcy=block",), "job.yaml: sources.0.polcy: unknown key (did you mean policy?)"),
        (DEFAULT, ("outputs.0.crff=20",), "job.yaml: outputs.0.crff: unknown key (did you mean crf?)"),
        (DEFAULT, ("outputs.2.hwn=20",), "job.yaml: outputs.2.hwn: unknown key (did you mean hwm?)"),
        (DEFAULT, ("engine.thread=2",), "job.yaml: engine.thread: unknown key (did you mean threads?)"),
        (DEFAULT, ("sources.0.reconnect.max=2",), "job.yaml: sources.0.reconnect.max: unknown key (did you mean max_s?)"),
        (DEFAULT, ("zzz=1",), "job.yaml: zzz: unknown key"),
        # An output's kind: the kinds there are, and the closest, not pydantic's "Input tag ... found".
        (DEFAULT, ("outputs.1.kind=json",),
         "job.yaml: outputs.1.kind: unknown output 'json' (one of hls, jsonl, kafka, mqtt, push, recording, video_file, webhook, zmq; did you mean jsonl?)"),
        (DEFAULT, ("outputs.3={path: x.jsonl}",), "job.yaml: outputs.3.kind: required key is missing (one of hls, jsonl, kafka, mqtt, push, recording, video_file, webhook, zmq)"),
        # An unknown key comes before other errors of the same config.
        (DEFAULT, ("engine.threads=-1", "stages.fusee=true"), "job.yaml: stages.fusee: unknown key (did you mean fuse?) (and 1 more)"),
        # One prefix, whether the validator names its key in full or from inside its mapping.
        (DEFAULT, ("http.enabled=true", "http.host=0.0.0.0"), "job.yaml: http.host: listening on '0.0.0.0' needs http.token"),
        (DEFAULT, ("sources.0.max_staleness_ms=5",),
         "job.yaml: sources.0.max_staleness_ms: needs policy drop_oldest or drop_newest (block drops nothing)"),
        (DEFAULT, ("outputs.0.segment_s=60",),
         "job.yaml: outputs.0.path: 'out/{source_id}.mp4' needs {index} or {start} with segment_s (one file per segment)"),
        (DEFAULT, ("outputs.0.keep_segments=3",), "job.yaml: outputs.0.keep_segments: retention needs segment_s (it deletes old segments)"),
        (DEFAULT, ("outputs.0.path=out/{camera}.mp4",),
         "job.yaml: outputs.0.path: unknown placeholder {camera} (use {source_id}, {index}, {start}) (got 'out/{camera}.mp4')"),
        (DEFAULT, ("outputs.1.path=out/{index}.jsonl",),
         "job.yaml: outputs.1.path: only {source_id} is filled in a jsonl path, not {index} (got 'out/{index}.jsonl')"),
        (DEFAULT, ("outputs.2.mode=push", "outputs.2.wait_subscribers=1"),
         "job.yaml: outputs.2.wait_subscribers: only for mode pub (a push output already waits for a puller)"),
    ],
)  # fmt: skip
def test_messages(text: str, overrides: tuple[str, ...], message: str) -> None:
    assert error_of(text, *overrides) == message


def test_set_keeps_text_for_keys_that_take_text() -> None:
    config = load(
        DEFAULT,
        "http.token=12345",
        "sources.0.ffmpeg_options.probesize=32768",  # the README's own example
        "sources.0.id=no",
        "sources.0.uri=clips/take #1.mp4",
        "outputs.2.endpoint=tcp://127.0.0.1:0012",
    )
    assert config.http.token == "12345"
    assert config.sources[0].ffmpeg_options == {"probesize": "32768"}
    assert config.sources[0].id == "no"
    assert config.sources[0].uri == "clips/take #1.mp4"
    assert config.outputs[2].endpoint == "tcp://127.0.0.1:0012"  # type: ignore[union-attr]


def test_set_still_parses_yaml_elsewhere_and_quotes_and_null_for_text() -> None:
    config = load(DEFAULT, "engine.threads=3", "sources.0.realtime=true", "http.token=null", "sources.0.id='007'")
    assert config.engine.threads == 3 and config.sources[0].realtime is True
    assert config.http.token is None and config.sources[0].id == "007"


def test_what_a_key_takes() -> None:
    assert text_key(Config, ["http", "token"]) == (True, True)
    assert text_key(Config, ["sources", "0", "uri"]) == (True, False)
    assert text_key(Config, ["sources", "0", "ffmpeg_options", "x"]) == (True, False)
    assert text_key(Config, ["outputs", "0", "path"]) == (True, False)  # every output kind with a path
    assert text_key(Config, ["engine", "threads"]) == (False, False)
    assert text_key(Config, ["model", "score_threshold"]) == (False, False)  # the task's: unknown here
    assert "segment_s" in known_keys(Config, ("outputs", 0, "video_file"))


def test_environment_variables_fill_in_values() -> None:
    config = load(
        DEFAULT.replace("tcp://127.0.0.1:5560", "tcp://${BIND:-127.0.0.1}:${PORT}"),
        "http.token=${TOKEN}",
        "sources.0.uri=rtsp://cam:${PASSWORD}@10.0.0.5/s1",
        "sources.0.ffmpeg_options.note=$${literal}",
        environ={"TOKEN": "s3cret", "PORT": "5599", "PASSWORD": "p#ss: [x]"},
    )
    assert config.http.token == "s3cret"
    assert config.outputs[2].endpoint == "tcp://127.0.0.1:5599"  # type: ignore[union-attr]
    assert config.sources[0].uri == "rtsp://cam:p#ss: [x]@10.0.0.5/s1"  # never parsed as YAML
    assert config.sources[0].ffmpeg_options == {"note": "${literal}"}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("http.token=${TOKEN}", "job.yaml: http.token: environment variable TOKEN is not set (${TOKEN:-default} gives a default)"),
        ("sources.0.uri=${1BAD}", "job.yaml: sources.0.uri: ${1BAD} is not ${NAME} or ${NAME:-default}"),
    ],
)  # fmt: skip
def test_environment_errors_name_the_key(override: str, message: str) -> None:
    assert error_of(DEFAULT, override) == message


def test_an_empty_variable_takes_its_default() -> None:
    config = load(DEFAULT, "http.token=${TOKEN:-fallback}", environ={"TOKEN": ""})
    assert config.http.token == "fallback"
