"""`framewire run` on a terminal (a real pty): a multi-source job shows a line per source with its
state and its rate over the last seconds, redrawn in place."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.helpers import CLI, ROOT, VIDEOS, env

pytestmark = pytest.mark.timeout(120)


def test_a_multi_source_job_shows_each_sources_rate_and_state(tmp_path: Path) -> None:
    clip = VIDEOS / "carphone_pristine.mp4"
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, str(CLI), "run",
         "--set", f"sources=[{{id: front, uri: '{clip}', realtime: true, max_frames: 75}}, "
                  f"{{id: back, uri: '{clip}', realtime: true, max_frames: 45}}]",
         "--set", f"outputs=[{{kind: jsonl, path: '{tmp_path}/{{source_id}}.jsonl'}}]"],
        cwd=ROOT, env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 100
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=30) == 0, out.decode(errors="replace")[-2000:]
    text = out.decode()
    rates = {sid: [float(fps) for fps in re.findall(rf"\n  {sid}\s+running\s+([\d.]+) fps", text)]
             for sid in ("front", "back")}  # fmt: skip
    # Paced at 29.97 fps: each line shows its own rate as it goes (about that, less on a loaded machine).
    assert all(rates[sid] and 5.0 < max(rates[sid]) < 60.0 for sid in rates), (rates, text[-2000:])
    assert re.search(r"\n  back\s+ended\s+0\.0 fps", text)  # back ends first; front goes on
    assert "\x1b[2A\r" in text  # three lines redrawn in place
    assert re.search(r"\[#+\] 120/120 frames", text) and "framewire: 120 frames from 2 sources in" in text
