"""The README's Python examples run as written, and a slow subscriber's losses are counted.

Each example is taken from the README's "Python" section and run as a script in a folder of its
own, beside a copy of configs/default.yaml. The one change: the default job's zmq port (5560)
becomes a free one, in the config copy and in the example alike, so that other jobs on this
machine cannot take it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framewire import Client, EndOfStream, FrameRecord
from tests.e2e.helpers import CLI, ROOT, VIDEOS, env, face_job, start_cli
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(240)

ENDPOINT = "tcp://127.0.0.1:5560"


def examples() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Python", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def workdir(tmp: Path, port: int) -> Path:
    (tmp / "configs").mkdir()
    config = (ROOT / "configs" / "default.yaml").read_text()
    assert ENDPOINT in config
    (tmp / "configs" / "default.yaml").write_text(config.replace(ENDPOINT, f"tcp://127.0.0.1:{port}"))
    return tmp


def run_example(code: str, cwd: Path, port: int, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    script = cwd / "example.py"
    script.write_text(code.replace(ENDPOINT, f"tcp://127.0.0.1:{port}"))
    return subprocess.run([sys.executable, str(script)], cwd=cwd, env=env(), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip


def test_the_readme_has_the_three_examples() -> None:
    found = examples()
    assert len(found) == 3
    assert "Client(" in found[0] and ".run(on_result)" in found[1] and ".results()" in found[2]


def test_client_example_reads_the_default_job(tmp_path: Path) -> None:
    """The example, then the job as its comment says to start it: the job's first frame waits for
    the example's subscription, so it gets every frame from seq 0, whatever the machine's load."""
    port = free_port()
    cwd = workdir(tmp_path, port)
    code = examples()[0]
    command = re.search(r"python run_pipeline\.py (run .*)$", code, re.M)
    assert command is not None and "wait_subscribers=1" in command.group(1)
    script = cwd / "example.py"
    script.write_text(code.replace(ENDPOINT, f"tcp://127.0.0.1:{port}"))
    reader = subprocess.Popen([sys.executable, str(script)], cwd=cwd, env=env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        # The README's command on the config copy; the wait's bound raised so that no start-up, however
        # slow, outlasts it (the default 10 s is for people).
        job = subprocess.run([sys.executable, str(CLI), *command.group(1).split(), "-c", "configs/default.yaml",
                              "--set", "outputs.2.wait_subscribers_timeout_s=120"],
                             cwd=cwd, env=env(), capture_output=True, text=True, timeout=200)  # fmt: skip
        assert job.returncode == 0, job.stderr
        assert "sending anyway" not in job.stderr  # the wait ended on the subscription, not its bound
        out, err = reader.communicate(timeout=60)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.communicate()
    assert reader.returncode == 0, err
    lines = out.splitlines()
    assert [int(line.split()[1]) for line in lines[:120]] == list(range(120))
    assert all(line.startswith("carphone ") for line in lines[:120])
    assert lines[120:] == ["carphone ended", "lost: 0"]


def test_callback_example(tmp_path: Path) -> None:
    port = free_port()
    done = run_example(examples()[1], workdir(tmp_path, port), port)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [int(line.split()[0]) for line in lines[:-1]] == list(range(30))
    assert lines[-1] == "0 {'carphone': 30}"
    assert (tmp_path / "out" / "carphone.jsonl").read_text().count("\n") == 30  # the config's outputs ran too


def test_iterator_example_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    done = run_example(examples()[2], workdir(tmp_path, port), port)
    assert done.returncode == 0, done.stderr
    frames = int(re.match(r"\{'carphone': (\d+)\} True$", done.stdout.splitlines()[-1]).group(1))  # type: ignore[union-attr]
    assert 60 <= frames < 120  # stopped after frame 59; the frames in flight were finished


def test_a_slow_subscriber_of_the_daemon_counts_its_losses(tmp_path: Path) -> None:
    """Big Buck Bunny paced at its 25 fps with large JPEGs on a pub output, and a subscriber that
    stays away after its first frame while 60 more frames go out (the JSONL output, which runs
    before the zmq one, says when): it still gets the end of stream (the job outlasts the absence),
    and every frame it missed is counted, none twice."""
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    with Client(endpoint, hwm=4) as client:
        proc = start_cli(*face_job(tmp_path, VIDEOS / "bigbuckbunny.mp4"), "--set", "sources.0.realtime=true",
                         "--set", f"outputs.2={{kind: zmq, endpoint: '{endpoint}', jpeg: true, jpeg_quality: 100, hwm: 4}}")  # fmt: skip
        try:
            received: list[object] = []
            first = client.receive(timeout=120)
            assert isinstance(first, FrameRecord)
            jsonl = tmp_path / "clip.jsonl"
            deadline = time.monotonic() + 60
            while not (jsonl.exists() and jsonl.read_text().count("\n") >= first.seq + 61):
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)  # busy elsewhere while 60 frames of 0.3 MB go out, far over the marks
            for message in client.messages(until_eos=True, timeout=60):
                received.append(message)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err
    assert isinstance(received[-1], EndOfStream)
    frames = [first, *received[:-1]]
    print(f"slow subscriber of the daemon: {len(frames)} frames received, {client.lost} lost, from seq {first.seq}")
    assert client.lost > 0
    # Every message of the stream (132 frames and the end) is here or counted, those before the
    # first one received included: the stream's numbers start at 0.
    assert client.missed_at_start == first.seq  # type: ignore[attr-defined]
    assert len(frames) + 1 + client.lost == 133
