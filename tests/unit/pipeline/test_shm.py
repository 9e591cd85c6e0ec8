"""Shared-memory segments (pipeline.wire.shm), which the frame pool and the audio ring lay out: made
by an owner, mapped by name in another process, swept when the owner was killed before it removed them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import pytest

from framewire.pipeline.wire.shm import Segment, segment_name, sweep_orphans

pytestmark = pytest.mark.timeout(60)

ATTACH_AND_WRITE = """
import sys
from framewire.pipeline.wire.shm import Segment
segment = Segment.attach(sys.argv[1], 8192)
print(int(segment.buffer[:16].sum()), flush=True)
segment.buffer[4096:4100] = [1, 2, 3, 4]
segment.close()
"""

CREATE_AND_HANG = """
import os, sys, time
from framewire.pipeline.wire.shm import Segment, segment_name
segment = Segment.create(segment_name(os.getpid(), 1, sys.argv[1]), 4096)
print(segment.name, flush=True)
time.sleep(60)
"""


def test_create_makes_a_zeroed_segment_and_refuses_a_name_taken() -> None:
    segment = Segment.create(segment_name(os.getpid(), 1, uuid.uuid4().hex[:8]), 8192)
    try:
        assert segment.owner and segment.buffer.size == 8192 and not segment.buffer.any()
        assert os.path.exists(Segment.path_of(segment.name))
        with pytest.raises(FileExistsError):
            Segment.create(segment.name, 4096)
    finally:
        segment.close()
    assert not os.path.exists(Segment.path_of(segment.name))
    segment.close()  # twice, or after a sweep removed the file: no error


def test_another_process_attaches_by_name_shares_the_bytes_and_leaves_the_segment() -> None:
    segment = Segment.create(segment_name(os.getpid(), 1, uuid.uuid4().hex[:8]), 8192)
    try:
        segment.buffer[:16] = 3
        child = subprocess.run(
            [sys.executable, "-c", ATTACH_AND_WRITE, segment.name], capture_output=True, text=True, timeout=30
        )
        assert child.returncode == 0, child.stderr
        assert child.stdout.split() == [str(3 * 16)]
        assert segment.buffer[4096:4100].tolist() == [1, 2, 3, 4]
        assert os.path.exists(Segment.path_of(segment.name))  # an attached process's exit unlinks nothing
    finally:
        segment.close()
    with pytest.raises(FileNotFoundError):
        Segment.attach(segment.name, 8192)


def test_sweep_removes_the_segment_of_a_sigkilled_owner_and_spares_a_live_one() -> None:
    tag = uuid.uuid4().hex[:8]
    owner = subprocess.Popen([sys.executable, "-c", CREATE_AND_HANG, tag], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        name = owner.stdout.readline().strip()
        assert name == segment_name(owner.pid, 1, tag)
        assert sweep_orphans(owner_pid=owner.pid) == []  # its owner still runs
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    mine = Segment.create(segment_name(os.getpid(), 1, tag), 4096)
    try:
        assert os.path.exists(Segment.path_of(name))  # killed: nobody removed it
        assert sweep_orphans(owner_pid=owner.pid) == [name]
        assert not os.path.exists(Segment.path_of(name))
        assert sweep_orphans(owner_pid=os.getpid()) == [] and os.path.exists(Segment.path_of(mine.name))
    finally:
        mine.close()


def test_sweep_reads_only_names_of_its_prefix_whose_pid_is_gone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(done.stdout)
    orphan = tmp_path / segment_name(dead_pid, 1, "cam")
    mine = tmp_path / segment_name(os.getpid(), 1, "cam")
    triton = tmp_path / f"fw-triton-{dead_pid}-0"
    for path in (orphan, mine, triton, tmp_path / "not-ours", tmp_path / "framewire-x-1-cam"):
        path.write_bytes(b"x")
    assert sweep_orphans(str(tmp_path)) == [orphan.name]
    assert not orphan.exists() and mine.exists() and triton.exists()
    assert sweep_orphans(str(tmp_path), prefix="fw-triton-") == [triton.name]
    assert sweep_orphans(str(tmp_path / "missing")) == []
