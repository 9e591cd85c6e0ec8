"""Bad input: one line naming the culprit, exit code 1 or 2, within seconds; other sources go on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.helpers import ROOT, U2NETP, VIDEOS, error_lines, face_job, read_jsonl, run_cli
from tests.support import clips

pytestmark = pytest.mark.timeout(120)


def check_error(proc, code: int, *needles: str) -> str:  # type: ignore[no-untyped-def]
    assert proc.returncode == code, proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def timed(*args: str):  # type: ignore[no-untyped-def]
    started = time.monotonic()
    proc = run_cli(*args, timeout=60)
    assert time.monotonic() - started < 30
    return proc


def validate_args(run_args: list[str]) -> list[str]:
    """`face_job`'s arguments for `validate` instead of `run`."""
    return ["validate", *run_args[2:]]


def test_missing_video(tmp_path: Path) -> None:
    args = face_job(tmp_path, tmp_path / "nope.mp4", source_id="cam7")
    for command in (args, validate_args(args)):
        line = check_error(timed(*command), 2)
        assert line == f"framewire: error: sources.0.uri: source cam7: file not found: {tmp_path}/nope.mp4"


def test_a_file_that_is_not_a_video(tmp_path: Path) -> None:
    fake = tmp_path / "notes.mp4"
    fake.write_text("these are not the frames you are looking for\n" * 100)
    check_error(timed(*face_job(tmp_path, fake)), 2, "sources.0.uri", "clip", "notes.mp4", "not a readable video")


def test_a_text_file_is_no_video_and_dev_null_no_camera(tmp_path: Path) -> None:
    """FFmpeg's tty demuxer would draw a .txt as 54 frames of letters, and /dev/null would be
    retried as a camera for ever: both are refused at start, run and validate alike."""
    text = tmp_path / "notes.txt"
    text.write_text("these are not the frames you are looking for\n" * 100)
    for uri, why in [
        (text, f"not a video: {text} (text, which FFmpeg's tty demuxer would draw as frames)"),
        ("/dev/null", "/dev/null is not a camera (a V4L2 video device such as /dev/video0): it is character "
                      "device 1:3, not video4linux (81)"),
    ]:  # fmt: skip
        args = face_job(tmp_path, uri, source_id="cam")
        for command in (args, validate_args(args)):
            assert check_error(timed(*command), 2) == f"framewire: error: sources.0.uri: source cam: {why}"
    assert not (tmp_path / "cam.jsonl").exists()


def test_outputs_and_endpoints_are_checked_at_start(tmp_path: Path) -> None:
    """An output that cannot be written, a port that is no port: one line at start, not an error
    from every output at frame 0."""
    (tmp_path / "plain-file").write_text("")
    cases = [
        (f"outputs.0.path={tmp_path}/plain-file/{{source_id}}.mp4",
         f"outputs.0.path: cannot make the folder {tmp_path}/plain-file: {tmp_path}/plain-file is a file"),
        (f"outputs.1.path={tmp_path}", f"outputs.1.path: {tmp_path} is a folder, not a file"),
        ("outputs.2={kind: zmq, endpoint: 'tcp://127.0.0.1:notaport'}",
         "outputs.2.endpoint: port 'notaport' is not a number from 0 to 65535 (0 or *: any free port)"),
        (f"outputs.2={{kind: zmq, endpoint: 'ipc://{tmp_path}/none/x.sock'}}",
         f"outputs.2.endpoint: no folder {tmp_path}/none for ipc://{tmp_path}/none/x.sock"),
    ]  # fmt: skip
    for override, message in cases:
        args = face_job(tmp_path, VIDEOS / "carphone_pristine.mp4", "--set", override)
        for command in (args, validate_args(args)):
            line = check_error(timed(*command), 2)
            assert message in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain-file"]  # nothing made, nothing written


def test_truncated_video_keeps_what_it_could_decode(tmp_path: Path) -> None:
    full = clips.make_clip(tmp_path / "full.avi", codec="mpeg4", frames=60, from_clip=VIDEOS / "carphone_pristine.mp4",
                           width=176, height=144)  # fmt: skip
    cut = clips.make_truncated_copy(full, tmp_path / "cut.avi", fraction=0.5)
    line = check_error(timed(*face_job(tmp_path, cut)), 1, "clip", "truncated")
    records = read_jsonl(tmp_path / "clip.jsonl")
    assert 0 < len(records) < 60 and [r["seq"] for r in records] == list(range(len(records)))
    assert clips.count_frames(tmp_path / "clip.mp4") == len(records)
    assert f"decoded {len(records)} of 60" in line


def test_corrupt_video(tmp_path: Path) -> None:
    full = clips.make_clip(tmp_path / "full.mp4", frames=60, from_clip=VIDEOS / "carphone_pristine.mp4",
                           width=176, height=144)  # fmt: skip
    bad = clips.make_corrupt_copy(full, tmp_path / "bad.mp4")
    check_error(timed(*face_job(tmp_path, bad)), 1, "clip")


def test_one_bad_source_does_not_stop_the_others(tmp_path: Path) -> None:
    full = clips.make_clip(tmp_path / "full.avi", codec="mpeg4", frames=60, from_clip=VIDEOS / "carphone_pristine.mp4",
                           width=176, height=144)  # fmt: skip
    cut = clips.make_truncated_copy(full, tmp_path / "cut.avi", fraction=0.5)  # opens at start, fails midway
    args = face_job(tmp_path, VIDEOS / "carphone_pristine.mp4", source_id="good")
    args += ["--set", f"sources.1={{id: bad, uri: '{cut}'}}"]
    proc = timed(*args)
    check_error(proc, 1, "bad", "truncated")
    assert len(read_jsonl(tmp_path / "good.jsonl")) == 120
    assert clips.count_frames(tmp_path / "good.mp4") == 120


@pytest.mark.parametrize(
    "override, needles",
    [
        ("sources.0.polcy=block", ["sources.0.polcy", "unknown key"]),
        ("engine.threads=two", ["engine.threads", "'two'"]),
        ("sources.0.policy=sometimes", ["sources.0.policy", "'sometimes'"]),
        ("model.score_threshold=2", ["model.score_threshold", "2"]),
        ("model.task=pose_estimation", ["model.task", "pose_estimation"]),
        ("composite.0.kind=sparkle", ["composite.0", "sparkle"]),
        (f"model.path={ROOT}/nothing.onnx", ["model.path", "nothing.onnx"]),
        (f"model.path={U2NETP}", ["input"]),
        ("outputs.0.kind=hologram", ["outputs.0"]),
    ],
)
def test_bad_config_exits_2_naming_the_key(tmp_path: Path, override: str, needles: list[str]) -> None:
    for command in ("run", "validate"):
        args = face_job(tmp_path, VIDEOS / "carphone_pristine.mp4", "--set", override)
        if command == "validate":
            args = ["validate", *args[2:]]
        check_error(timed(*args), 2, *needles)


def test_config_file_problems(tmp_path: Path) -> None:
    check_error(timed("run", "-c", str(tmp_path / "none.yaml")), 2, "none.yaml", "not found")
    broken = tmp_path / "broken.yaml"
    broken.write_text("sources: [\n  - id: a\n")
    check_error(timed("validate", "-c", str(broken)), 2, "broken.yaml", "YAML")
    check_error(timed("run", "--set", "novalue"), 2, "novalue")


def test_usage_error_exits_2() -> None:
    proc = timed("frobnicate")
    assert proc.returncode == 2


def test_model_that_does_not_fit_its_task_names_the_tensor(tmp_path: Path) -> None:
    args = ["validate", *face_job(tmp_path, VIDEOS / "carphone_pristine.mp4")[2:], "--set", f"model.path={U2NETP}"]
    line = check_error(timed(*args), 2)
    assert "input.1" in line or "1959" in line or "cls_8" in line
