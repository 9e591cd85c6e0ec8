"""`resume: true` on a file source: one-line errors where it cannot work, and `run --resume`."""

from __future__ import annotations

from pathlib import Path

import pytest

from framewire.app.compose.sources import make_source
from framewire.config import load_config
from framewire.pipeline.errors import ConfigError
from framewire.sources.file import FileSource
from framewire.sources.resume import ResumeTargets

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[3]
BASE = "model: {path: model.onnx, task: face_detection}\n"
JSONL = '{kind: jsonl, path: "out/{source_id}.jsonl"}'


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_config("resume.yaml", text=BASE + text)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_file_source_resumes_with_a_fragmented_recording() -> None:
    config = load_config(
        "resume.yaml",
        text=BASE + f"outputs: [{JSONL}, {{kind: video_file, path: 'out/{{source_id}}.mp4'}}]\n"
        "sources: [{id: a, uri: clip.mp4, resume: true}, {id: b, uri: clip.mp4}]\n",
    )
    assert [s.resume for s in config.sources] == [True, False]


@pytest.mark.parametrize(
    ("source", "outputs", "message"),
    [
        ("{id: cam, uri: 'rtsp://h/s', resume: true}", JSONL, "sources.0.resume: only for files, not a live stream"),
        ("{id: a, uri: clip.mp4, policy: drop_oldest, resume: true}", JSONL, "sources.0.resume: needs policy block"),
        ("{id: a, uri: clip.mp4, resume: true}", "{kind: video_file, path: 'out/a.mp4', container: mp4}",
         "outputs.0.container: mp4 cannot be resumed"),
        ("{id: a, uri: clip.mp4, resume: true}", "{kind: video_file, path: 'out/a-{index}.mp4', segment_s: 10}",
         "outputs.0.segment_s: a recording in segments cannot be resumed"),
        ("{id: a, uri: clip.mp4, resume: true}", "{kind: video_file, path: 'out/{start}.mp4'}",
         "outputs.0.path: {start} names another file each run"),
    ],
)  # fmt: skip
def test_what_cannot_resume_says_why_in_one_line(source: str, outputs: str, message: str) -> None:
    assert message in error_of(f"outputs: [{outputs}]\nsources: [{source}]\n")


def test_a_source_added_at_run_time_resumes_only_into_outputs_that_can() -> None:
    bikes = str(ROOT / "assets" / "videos" / "bikes.mp4")
    config = load_config(ROOT / "configs" / "default.yaml")  # a video_file (fmp4) and a jsonl output
    plan = make_source(config, {"id": "later", "uri": bikes, "resume": True})
    source = plan.factory()  # what the decode worker builds: a file source that reads these first
    assert isinstance(source, FileSource)
    assert source.resume == ResumeTargets(("out/later.jsonl",), ("out/later.mp4",))
    mp4 = load_config(ROOT / "configs" / "default.yaml", ["outputs.0.container=mp4"])
    with pytest.raises(ConfigError, match=r"source.resume: outputs.0.container: mp4 cannot be resumed"):
        make_source(mp4, {"id": "later", "uri": bikes, "resume": True})
