"""The command line as an operator meets it: flags anywhere, JSON logs, the promised config messages,
secrets from the environment, key files only their owner can read."""

from __future__ import annotations

import json
import re
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.helpers import ROOT, VIDEOS, error_lines, face_job, run_cli

pytestmark = pytest.mark.timeout(180)

DEFAULT = ROOT / "configs" / "default.yaml"


def only_error(stderr: str) -> str:
    lines = error_lines(stderr)
    assert len(lines) == 1, stderr
    return lines[0].removeprefix("framewire: error: ")


@pytest.mark.parametrize("order", ["before", "after"])
def test_global_flags_go_before_or_after_the_command(order: str) -> None:
    flags = ["--debug", "--log-format", "json"]
    args = [*flags, "validate", "-c", "missing.yaml"] if order == "before" else ["validate", "-c", "missing.yaml", *flags]
    proc = run_cli(*args)
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and "ConfigError: missing.yaml: config file not found" in proc.stderr  # --debug


def test_json_logs_from_every_process(tmp_path: Path) -> None:
    proc = run_cli(*face_job(tmp_path, VIDEOS / "carphone_pristine.mp4", "--set", "sources.0.max_frames=5"),
                   "-v", "--log-format", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    entries = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert entries and all(set(e) >= {"time", "level", "process", "logger", "message"} for e in entries)
    processes = {e["process"] for e in entries}
    assert "supervisor" in processes and "decode[0]" in processes, processes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "sources.0.polcy=block"], "sources.0.polcy: unknown key (did you mean policy?)"),
        (["--set", "model.score_treshold=0.5"], "model.score_treshold: unknown key (did you mean score_threshold?)"),
        (["--set", "composite.0.strenght=0.5"], "composite.0.strenght: unknown key (did you mean strength?)"),
        (["--set", "http.enabled=true", "--set", "http.host=0.0.0.0"], "http.host: listening on '0.0.0.0' needs http.token"),
        (["--set", "http.token=${FRAMEWIRE_TEST_UNSET}"],
         "http.token: environment variable FRAMEWIRE_TEST_UNSET is not set (${FRAMEWIRE_TEST_UNSET:-default} gives a default)"),
    ],
)  # fmt: skip
def test_config_messages_name_the_file_once_and_the_key(args: list[str], message: str) -> None:
    proc = run_cli("validate", "-c", str(DEFAULT), *args)
    assert proc.returncode == 2
    assert only_error(proc.stderr) == f"{DEFAULT}: {message}"


def test_a_misspelt_top_level_key(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(DEFAULT.read_text().replace("sources:", "sourcez:"))
    proc = run_cli("validate", "-c", str(config))
    assert only_error(proc.stderr) == f"{config}: sourcez: unknown key (did you mean sources?)"


def test_set_keeps_text_where_a_key_takes_text() -> None:
    proc = run_cli("validate", "-c", str(DEFAULT), "--set", "http.token=12345", "--set", "sources.0.id=no",
                   "--set", "sources.0.ffmpeg_options.probesize=32768")  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_keys_writes_the_secret_half_for_its_owner_only(tmp_path: Path) -> None:
    proc = run_cli("keys", "--dir", str(tmp_path / "keys"), "--name", "hub")
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE((tmp_path / "keys" / "hub.key_secret").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys" / "hub.key").stat().st_mode) == 0o644


def test_keys_keeps_an_existing_pair_unless_forced(tmp_path: Path) -> None:
    folder = tmp_path / "keys"
    assert run_cli("keys", "--dir", str(folder), "--name", "hub").returncode == 0
    secret = (folder / "hub.key_secret").read_bytes()
    again = run_cli("keys", "--dir", str(folder), "--name", "hub")
    assert again.returncode == 2
    assert only_error(again.stderr) == (
        f"keys: {folder / 'hub.key_secret'} already exists; --force overwrites it (clients of the old key lose access)"
    )
    assert (folder / "hub.key_secret").read_bytes() == secret and again.stdout == ""
    forced = run_cli("keys", "--dir", str(folder), "--name", "hub", "--force")
    assert forced.returncode == 0, forced.stderr
    assert (folder / "hub.key_secret").read_bytes() != secret
    assert stat.S_IMODE((folder / "hub.key_secret").stat().st_mode) == 0o600


def test_quantize_names_a_calibration_video_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("these are not the frames you are looking for\n" * 100)
    for video, why in [
        (tmp_path / "missing.mp4", f"file not found: {tmp_path}/missing.mp4"),
        (tmp_path / "notes.txt", f"not a video: {tmp_path}/notes.txt (text, which FFmpeg's tty demuxer would draw as frames)"),
    ]:  # fmt: skip
        proc = run_cli("quantize", "-c", str(DEFAULT), "--video", str(video), "-o", str(tmp_path / "int8.onnx"))
        assert proc.returncode == 2
        assert only_error(proc.stderr) == f"--video: {why}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no model written


@pytest.fixture
def feeding(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Publishers that keep sending frames of `cam` and `door` until the test ends: their endpoints."""
    from framewire.pipeline.wire.publish import Publisher

    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(name: str, **curve: str) -> str:
        publisher = Publisher(f"ipc://{tmp_path}/{name}.sock", "pub", **curve)
        bound = threading.Event()

        def feed() -> None:  # the socket lives in the thread that uses it
            publisher.open()
            bound.set()
            seq = 0
            while not stop.wait(0.02):
                for source in ("cam", "door"):
                    publisher.send(source, {"source": source, "seq": seq, "pts": seq, "time": 0.0, "width": 1,
                                            "height": 1, "results": {}, "latency_ms": {}})  # fmt: skip
                seq += 1
            publisher.close()

        threads.append(threading.Thread(target=feed, daemon=True))
        threads[-1].start()
        assert bound.wait(timeout=20)
        return publisher.endpoint

    yield start
    stop.set()
    for thread in threads:
        thread.join(timeout=10)


def test_subscribe_says_why_nothing_came(tmp_path: Path, feeding: Callable[..., str]) -> None:
    import zmq.auth

    server_public, server_secret = zmq.auth.create_certificates(tmp_path, "server")
    (tmp_path / "clients").mkdir()
    plain = feeding("plain")
    curve = feeding("curve", curve_secret_key=str(server_secret), curve_clients_dir=str(tmp_path / "clients"))
    nobody = f"ipc://{tmp_path}/nobody.sock"
    cases = [
        ([nobody], f"nothing from {nobody} in 1 s: no publisher answered"),
        ([plain, "--topic", "yard"],
         f"nothing from {plain} in 1 s: a publisher is there but sent nothing on topic 'yard' (topics seen: cam, door)"),
        ([curve, "--server-key", str(server_public)],
         f"{curve}: the server refused our CurveZMQ key (a fresh pair: pass --client-key, a secret key whose "
         "public half is in the output's curve_clients folder)"),
        ([curve], f"nothing from {curve} in 1 s: the server wants CurveZMQ (--server-key: its public certificate)"),
    ]  # fmt: skip
    for args, message in cases:
        proc = run_cli("subscribe", "--endpoint", *args, "--timeout", "1", timeout=60)
        assert proc.returncode == 1 and proc.stdout == "", proc.stderr
        assert only_error(proc.stderr) == f"subscribe: {message}"
    # without --timeout too: a refused key is final, so it does not wait for ever
    proc = run_cli("subscribe", "--endpoint", curve, "--server-key", str(server_public), timeout=60)
    assert proc.returncode == 1 and "the server refused our CurveZMQ key" in only_error(proc.stderr)
    done = run_cli("subscribe", "--endpoint", plain, "--topic", "door", "--count", "2", timeout=60)
    assert done.returncode == 0 and [json.loads(line)["source"] for line in done.stdout.splitlines()] == ["door"] * 2


def test_every_command_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    help_text = run_cli("--help").stdout
    commands = next(group for group in re.findall(r"\{([a-z,-]+)\}", help_text) if "run" in group).split(",")
    assert set(commands) >= {"run", "validate", "subscribe", "keys", "bench", "build-engine", "quantize"}
    for command in commands:
        assert f"run_pipeline.py {command}" in readme, command
    assert "framewire run -c" in readme  # the installed command


def test_the_readmes_subscriber_started_first_gets_every_frame_and_exits_at_the_end(tmp_path: Path) -> None:
    """Issue 39: the README said to run `subscribe` "while the job runs", but the job lasts a second.
    Its two commands as written, the subscriber first (the port made a free one): the subscriber
    prints every frame from seq 0, then exits by itself when the source ends."""
    import subprocess
    import sys

    from tests.e2e.helpers import CLI, env
    from tests.support.ports import free_port

    readme = (ROOT / "README.md").read_text()
    subscriber = re.search(r"`\.venv/bin/python run_pipeline\.py (subscribe [^`]*--until-eos[^`]*)`", readme)
    job = re.search(r"`\.venv/bin/python run_pipeline\.py (run --set outputs\.2\.wait_subscribers=1)`",
                    readme)  # fmt: skip
    assert subscriber is not None and job is not None
    assert readme.index(subscriber.group(0)) < readme.index(job.group(0))  # told in the order to run them
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    args = subscriber.group(1).replace("tcp://127.0.0.1:5560", endpoint).split()
    listening = subprocess.Popen(
        [sys.executable, str(CLI), *args], cwd=tmp_path, env=env(), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        zmq = ["--set", f"outputs.2.endpoint={endpoint}", "--set", "outputs.2.wait_subscribers_timeout_s=120"]
        done = run_cli(*job.group(1).split(), "--no-progress", *zmq, cwd=tmp_path, timeout=150)
        assert done.returncode == 0, done.stderr[-2000:]
        out, err = listening.communicate(timeout=60)  # it ends by itself
    finally:
        listening.kill()
    assert listening.returncode == 0, err[-2000:]
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["seq"] for r in records if "seq" in r] == list(range(120))
    assert records[-1]["eos"] is True
