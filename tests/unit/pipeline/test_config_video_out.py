"""`kind: push` and `kind: hls` outputs in a config: what is accepted, and the one-line errors."""

from __future__ import annotations

import pytest

from framewire.app.compose.http import http_settings
from framewire.config import Config, load_config
from framewire.config.video_out import HlsOutput, PushOutput
from framewire.pipeline.errors import ConfigError

pytestmark = pytest.mark.timeout(30)

BASE = """
sources:
  - id: cam0
    uri: clip.mp4
model:
  path: model.onnx
  task: face_detection
http:
  enabled: true
outputs:
  - kind: push
    url: rtsp://user:${PUSH_PASSWORD:-pw}@media:8554/{source_id}
  - kind: hls
    path: out/hls/{source_id}
"""


def load(*overrides: str) -> Config:
    return load_config("test.yaml", overrides, text=BASE)


def error_of(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(*overrides)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_defaults_and_the_muxer_from_the_scheme() -> None:
    config = load()
    push, hls = config.outputs
    assert isinstance(push, PushOutput) and isinstance(hls, HlsOutput)
    assert push.muxer == "rtsp" and (push.preset, push.tune, push.queue_frames) == ("ultrafast", "zerolatency", 8)
    assert (hls.segment_s, hls.keep_segments) == (2.0, 6)
    assert load("outputs.0.url=rtmp://media/live/{source_id}").outputs[0].muxer == "flv"  # type: ignore[attr-defined]
    settings = http_settings(config)
    assert settings is not None and settings.hls == ("out/hls/{source_id}",)


@pytest.mark.parametrize(
    "override, expected",
    [
        ("outputs.0.url=http://media/{source_id}", "outputs.0.url"),
        ("outputs.0.url=rtsp://media/{index}", "not {index}"),
        ("outputs.1.path=out/{start}", "not {start}"),
        ("outputs.0.reconnect_backoff_s=[5, 1]", "first <= longest"),
        ("outputs.1.segment_s=0", "outputs.1.segment_s"),
        ("outputs.0.bitrate_kbps=10", "outputs.0.bitrate_kbps"),
    ],
)
def test_refused_with_the_key_named(override: str, expected: str) -> None:
    assert expected in error_of(override)
