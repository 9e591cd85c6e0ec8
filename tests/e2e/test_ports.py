"""An address the job listens on that is already taken fails at once, in one line that names it and its
config key, before any worker starts (no "did not stop; killing it" from workers stopped again). How
quickly the supervisor fails is timed in-process, apart from the CLI's start-up
(tests/integration/test_supervisor.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.helpers import ROOT, run_cli

pytestmark = pytest.mark.timeout(180)

CONFIG = str(ROOT / "configs" / "default.yaml")


@pytest.fixture()
def taken() -> Iterator[int]:
    """A port the OS gave us, bound and listening for the whole test: nobody else can bind it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("key", "overrides", "address"),
    [
        ("outputs.2.endpoint", ["outputs.2.endpoint=tcp://127.0.0.1:{port}"], "tcp://127.0.0.1:{port}"),
        ("http.port", ["http.enabled=true", "http.port={port}"], "127.0.0.1:{port}"),
    ],
)
def test_an_address_in_use_fails_fast_in_one_line(
    tmp_path: Path, taken: int, key: str, overrides: list[str], address: str
) -> None:
    sets = [f"outputs.0.path={tmp_path}/{{source_id}}.mp4", f"outputs.1.path={tmp_path}/{{source_id}}.jsonl"]
    sets += [o.format(port=taken) for o in overrides]
    args = [arg for value in sets for arg in ("--set", value)]
    if key != "outputs.2.endpoint":  # the default job's own zmq port must not be what fails
        args += ["--set", f"outputs.2.endpoint=ipc://{tmp_path}/out.sock"]
    done = run_cli("run", "-c", CONFIG, "--no-progress", *args)
    lines = done.stderr.splitlines()
    assert done.returncode == 1, done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"framewire: error: {key}: ")
    assert address.format(port=taken) in lines[0] and "in use" in lines[0]
    assert done.stdout == ""
    assert not list(tmp_path.glob("carphone.*"))  # no output was opened
