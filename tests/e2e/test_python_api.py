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

import psutil
import pytest

from framewire import Client, EndOfStream, FrameRecord
from tests.e2e.helpers import CLI, ROOT, VIDEOS, env, face_job, start_cli
from tests.e2e.test_http import free_port

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
    port = free_port()
    cwd = workdir(tmp_path, port)
    script = cwd / "example.py"
    script.write_text(examples()[0].replace(ENDPOINT, f"tcp://127.0.0.1:{port}"))
    reader = subprocess.Popen([sys.executable, str(script)], cwd=cwd, env=env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    # Connected before the daemon starts, as a user would be: its ZeroMQ threads are up, then a moment.
    deadline = time.monotonic() + 60
    while psutil.Process(reader.pid).num_threads() < 3:
        assert time.monotonic() < deadline and reader.poll() is None
        time.sleep(0.05)
    time.sleep(0.5)
    job = subprocess.run([sys.executable, str(CLI), "run", "-c", "configs/default.yaml"], cwd=cwd, env=env(), capture_output=True, text=True, timeout=150)
    assert job.returncode == 0, job.stderr
    out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("carphone 0 ") and lines[119].startswith("carphone 119 ")
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
    takes a nap after the first frame while the job goes on: it still gets the end of stream (the job
    outlasts the nap), and every frame it missed is counted, none twice."""
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    with Client(endpoint, hwm=4) as client:
        proc = start_cli(*face_job(tmp_path, VIDEOS / "bigbuckbunny.mp4"), "--set", "sources.0.realtime=true",
                         "--set", f"outputs.2={{kind: zmq, endpoint: '{endpoint}', jpeg: true, jpeg_quality: 100, hwm: 4}}")  # fmt: skip
        try:
            received: list[object] = []
            first = client.receive(timeout=120)
            assert isinstance(first, FrameRecord)
            time.sleep(2.5)  # busy elsewhere: about 60 frames of 0.3 MB go out meanwhile
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
    # The first frame's number starts the count: from it to the end of stream, all are accounted for.
    assert len(frames) + 1 + client.lost == 132 - first.seq + 1  # type: ignore[attr-defined]
