"""What was retired stays out loudly: a config written for the remote stage workers fails at once, in
one line that says what replaced them, exit 2, before any process starts or any output is opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.helpers import ROOT, error_lines, run_cli

pytestmark = pytest.mark.timeout(120)

DEFAULT = ROOT / "configs" / "default.yaml"
REPLACED = (
    "removed after framewire 0.1 with the remote stage workers (the `worker` command): run inference on Triton "
    "(engine.backend: triton) or share sources across replicas (fleet:)"
)


def test_a_job_with_remote_stages_fails_in_one_line_naming_what_replaced_them(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    outputs = f"outputs.0.path={tmp_path}/{{source_id}}.mp4"
    config.write_text(DEFAULT.read_text() + "transport:\n  remote_stages: [infer]\n  listen: tcp://127.0.0.1:5570\n")
    done = run_cli("run", "-c", str(config), "--no-progress", "--set", outputs)
    assert done.returncode == 2, done.stderr
    assert error_lines(done.stderr) == [
        f"framewire: error: {config}: transport.listen: {REPLACED}; docs: Guides, Past one machine"
    ], done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr  # no traceback, no worker's log
    assert done.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]  # nothing opened


def test_the_worker_command_is_gone() -> None:
    done = run_cli("worker", "--stage", "infer", "--connect", "tcp://127.0.0.1:5570")
    assert done.returncode == 2
    assert "invalid choice: 'worker'" in done.stderr
