"""`sources[].audio`, `sources[].template` and `steps:`: what the config accepts and its one-line errors."""

from __future__ import annotations

import pytest

from framewire.config import load_config
from framewire.app.compose.plan import stage_specs
from framewire.pipeline.errors import ConfigError

pytestmark = pytest.mark.timeout(30)

BASE = """
sources: [{{id: a, uri: {uri}, {source}}}]
model: {{path: m.onnx, task: generator}}
steps: {steps}
outputs: [{{kind: jsonl, path: o.jsonl}}]
"""


def load(source: str = "audio: {uri: s.wav}", uri: str = "t.mp4", steps: str = "[]") -> object:
    return load_config("job.yaml", text=BASE.format(uri=uri, source=source, steps=steps))


def error(**parts: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load(**parts)
    return str(caught.value)


def test_audio_defaults_and_stage_names() -> None:
    config = load(steps="[{kind: region}, {kind: audio_features, name: mel}]")
    audio = config.sources[0].audio  # type: ignore[attr-defined]
    assert (audio.uri, audio.sample_rate, audio.buffer_s, audio.missing.policy, audio.kind) == ("s.wav", 16000, 10.0, "silence", "file")
    assert [s.name for s in stage_specs(config)][:3] == ["region", "mel", "preprocess"]
    assert load(source="audio: {uri: 'zmq+tcp://127.0.0.1:5571'}").sources[0].audio.kind == "zmq"  # type: ignore[attr-defined]


def test_one_line_errors_name_the_key() -> None:
    assert error(source="template: loop") == "job.yaml: sources.0.template: needs audio.uri: the audio file or stream that drives the template"
    assert "template: the template must be a video file" in error(source="template: loop, audio: {uri: s.wav}", uri="'rtsp://h/x'")
    assert "audio.uri: self: a ZeroMQ frame input has no audio track" in error(source="audio: {uri: self}", uri="'zmq+tcp://127.0.0.1:5570'")
    assert "a camera has no audio input here" in error(source="audio: {uri: /dev/video0}")
    assert "sources.0.audio.missing.policy" in error(source="audio: {uri: s.wav, missing: {policy: later}}")
    assert "sources.0.audio.sample_rate" in error(source="audio: {uri: s.wav, sample_rate: 100}")
    assert "expected zmq+tcp://host:port" in error(source="audio: {uri: 'zmq+tcp://nowhere'}")
    assert error(steps="[{kind: vad}, {kind: vad}]").endswith("steps.1.name: 'vad' is already a stage name; name the step")
    assert error(steps="[{kind: vad, name: infer}]").endswith("steps.0.name: 'infer' is already a stage name; name the step")
