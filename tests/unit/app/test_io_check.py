"""What validate and the start of a job check on this host: sources that are videos or cameras,
outputs that can be written. Nothing is made or written by the check itself."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from framewire.app.io_check import check_io, check_output
from framewire.config import validate_config
from framewire.pipeline.errors import ConfigError
from tests.support import clips

pytestmark = pytest.mark.timeout(60)


def _config(tmp_path: Path, sources: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> Any:
    model = {"path": "model.onnx", "task": "face_detection"}
    return validate_config({"sources": sources, "model": model, "outputs": outputs}, "test.yaml")


def _error(config: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        check_io(config)
    return str(caught.value)


def test_every_source_and_output_that_can_run_passes_and_nothing_is_made(tmp_path: Path) -> None:
    clip = clips.make_clip(tmp_path / "clip.mp4", frames=3)
    outputs = [
        {"kind": "video_file", "path": f"{tmp_path}/out/{{source_id}}/{{start:%Y%m%d}}-{{index:04d}}.mp4",
         "segment_s": 10},
        {"kind": "jsonl", "path": f"{tmp_path}/new/{{source_id}}.jsonl"},
        {"kind": "zmq", "endpoint": f"ipc://{tmp_path}/results.sock"},
        {"kind": "zmq", "endpoint": "tcp://127.0.0.1:0"},
    ]  # fmt: skip
    sources = [{"id": "a", "uri": str(clip)}, {"id": "b", "uri": f"file://{clip}"}, {"id": "c", "uri": "rtsp://h/s"}]
    check_io(_config(tmp_path, sources, outputs))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]


def test_the_first_source_at_fault_is_named(tmp_path: Path) -> None:
    clip = clips.make_clip(tmp_path / "clip.mp4", frames=3)
    (tmp_path / "notes.txt").write_text("these are not the frames you are looking for\n" * 100)
    outputs = [{"kind": "jsonl", "path": f"{tmp_path}/{{source_id}}.jsonl"}]
    for uri, why in [
        (tmp_path / "gone.mp4", f"file not found: {tmp_path}/gone.mp4"),
        (tmp_path / "notes.txt", f"not a video: {tmp_path}/notes.txt (text, which FFmpeg's tty demuxer would draw as frames)"),
        ("/dev/null", "/dev/null is not a camera (a V4L2 video device such as /dev/video0): it is character device 1:3"),
    ]:  # fmt: skip
        config = _config(tmp_path, [{"id": "ok", "uri": str(clip)}, {"id": "bad", "uri": str(uri)}], outputs)
        assert _error(config).startswith(f"sources.1.uri: source bad: {why}")


def test_an_output_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "folder").mkdir()
    for output, message in [
        ({"kind": "jsonl", "path": f"{tmp_path}/file/deeper/{{source_id}}.jsonl"},
         f"outputs.0.path: cannot make the folder {tmp_path}/file/deeper: {tmp_path}/file is a file"),
        ({"kind": "video_file", "path": f"{tmp_path}/{{source_id}}"},
         f"outputs.0.path: {tmp_path}/folder is a folder, not a file"),
        ({"kind": "zmq", "endpoint": f"ipc://{tmp_path}/none/x.sock"},
         f"outputs.0.endpoint: no folder {tmp_path}/none for ipc://{tmp_path}/none/x.sock"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError) as caught:
            check_output(_config(tmp_path, [{"id": "x", "uri": "x.mp4"}], [output]).outputs[0], "outputs.0", ["folder"])
        assert str(caught.value) == message


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_a_folder_without_write_permission(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    output = _config(tmp_path, [{"id": "x", "uri": "x.mp4"}], [{"kind": "jsonl", "path": f"{locked}/sub/{{source_id}}.jsonl"}]).outputs[0]
    with pytest.raises(ConfigError) as caught:
        check_output(output, "outputs.0", ["cam"])
    assert str(caught.value) == f"outputs.0.path: cannot write in the folder {locked} (to make {locked}/sub): permission denied"
