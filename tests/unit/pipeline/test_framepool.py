from __future__ import annotations

import os
import uuid

import numpy as np
import pytest

from framewire.pipeline.wire.framepool import FramePool, PoolCache, PoolLayout
from framewire.pipeline.wire.shm import Segment, segment_name

pytestmark = pytest.mark.timeout(30)


def layout(slots: int = 3) -> PoolLayout:
    return PoolLayout.plan(
        f"framewire-test-{uuid.uuid4().hex[:8]}",
        slots,
        {"image": ((5, 7, 3), "uint8"), "input": ((1, 3, 4, 4), "float32")},
    )


def test_regions_are_aligned_and_separate() -> None:
    lay = layout()
    image, tensor = lay.regions
    assert image.offset == 0 and tensor.offset % 4096 == 0 and tensor.offset >= image.nbytes
    assert lay.slot_bytes >= tensor.offset + tensor.nbytes
    assert PoolLayout.from_wire(lay.to_wire()) == lay


def test_attached_pool_shares_memory_and_owner_unlinks() -> None:
    lay = layout()
    owner = FramePool.create(lay)
    try:
        cache = PoolCache()
        other = cache.get(lay.to_wire())
        assert cache.get(lay.to_wire()) is other
        owner.view(1, "image")[:] = 9
        owner.view(2, "input")[:] = 1.5
        assert int(other.view(1, "image").sum()) == 9 * 5 * 7 * 3
        assert other.view(0, "image").sum() == 0
        np.testing.assert_array_equal(other.view(2, "input"), np.full((1, 3, 4, 4), 1.5, np.float32))
        with pytest.raises(IndexError):
            other.view(3, "image")
        cache.close()
        assert os.path.exists(Segment.path_of(lay.name))
    finally:
        owner.close()
    assert not os.path.exists(Segment.path_of(lay.name))


def test_a_worker_that_finds_its_supervisor_gone_removes_that_job_s_pools_and_rings_once() -> None:
    """What a killed supervisor left in /dev/shm (its pools and audio rings, named after its pid)
    goes when a worker notices; another dead owner's pools are not that worker's to judge."""
    import subprocess
    import sys

    from framewire.pipeline.wire.audioring import AudioRing, AudioRingLayout
    from framewire.pipeline.worker.hub_link import SupervisorWatch

    def dead_pid() -> int:
        done = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
        )
        return int(done.stdout)

    gone, other = dead_pid(), dead_pid()
    tag = uuid.uuid4().hex[:8]
    pool = FramePool.create(PoolLayout.plan(segment_name(gone, 1, tag), 2, {"image": ((4, 4, 3), "uint8")}))
    ring = AudioRing.create(AudioRingLayout(segment_name(gone, 1, f"audio-{tag}"), 16000, 1600))
    elsewhere = FramePool.create(
        PoolLayout.plan(segment_name(other, 1, tag), 2, {"image": ((4, 4, 3), "uint8")})
    )
    paths = [Segment.path_of(pool.layout.name), Segment.path_of(ring.layout.name)]
    try:
        watch, second = SupervisorWatch(gone), SupervisorWatch(gone)
        assert watch.gone() and second.gone()  # both notice; the second finds nothing left: no error
        assert not any(os.path.exists(p) for p in paths)
        assert os.path.exists(Segment.path_of(elsewhere.layout.name))
        assert watch.gone() and not watch.sweep  # swept once
        alive = SupervisorWatch(os.getpid())
        assert not alive.gone() and alive.sweep
    finally:
        for segment in (pool, ring, elsewhere):
            segment.close()  # the owner's close tolerates a file already removed


def test_a_supervisor_seen_alive_is_looked_at_again_after_a_moment_and_its_death_noticed() -> None:
    """gone() reads /proc at most once per CHECK_S while the supervisor lives (the decode loop asks
    once a frame), and still notices a death: a dead supervisor is found within a deadline."""
    import subprocess
    import sys
    import time

    from framewire.pipeline.worker.hub_link import SupervisorWatch

    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        watch = SupervisorWatch(supervisor.pid)
        watch.sweep = False  # nothing of this stand-in supervisor's to remove
        assert not watch.gone()
        assert watch._alive_until > 0  # seen alive: not read again for a moment
    finally:
        supervisor.kill()
        supervisor.wait()
    deadline = time.monotonic() + 10.0
    while not watch.gone() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert watch.gone()
