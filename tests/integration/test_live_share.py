"""A live-layout worker's readers against a real RTSP server: a source that fails leaves its worker's
other sources reading, and the model side sees each source's frames in order with every frame counted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from framewire.pipeline.plan import Policy
from framewire.pipeline.worker.live_share import LiveShare, SourceReader

from framewire.app.compose.sources import source_plan
from framewire.config import SourceConfig
from tests.support.rtsp_server import free_port, spawn

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def rtsp() -> Iterator[str]:
    port = free_port()
    server = spawn(port, frames=50, fps=25)
    try:
        yield f"rtsp://127.0.0.1:{port}/live"
    finally:
        server.kill()
        server.wait(10)


def test_a_failing_source_leaves_the_other_sources_of_its_worker_reading(rtsp: str) -> None:
    dead = f"rtsp://127.0.0.1:{free_port()}/live"  # nobody listens there
    good = source_plan(SourceConfig(id="cam", uri=rtsp))
    bad = source_plan(
        SourceConfig(id="gone", uri=dead, reconnect={"initial_s": 0.05, "max_s": 0.05, "max_attempts": 2})
    )
    assert good.options.policy != Policy.BLOCK and bad.options.policy != Policy.BLOCK
    share = LiveShare()
    readers = [SourceReader(good, share).start(), SourceReader(bad, share).start()]
    seqs: list[int] = []
    after_failure: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and len(after_failure) < 25:
            frame = share.take(0.1)
            if frame is None:
                continue
            assert frame.source == "cam"
            seqs.append(frame.seq)
            if readers[1].ended:
                after_failure.append(frame)
    finally:
        for reader in readers:
            reader.stop()
        assert all(reader.join(10) for reader in readers)
    while (last := share.take(0)) is not None:  # what was still waiting when the readers stopped
        seqs.append(last.seq)
    assert (
        readers[1].error is not None and "gone" in readers[1].error and "gave up after 2" in readers[1].error
    )
    assert len(after_failure) == 25  # cam went on after gone failed, in its worker
    assert seqs == sorted(set(seqs))
    cam = readers[0].counts
    assert cam is not None and readers[0].error is None
    assert cam.read == cam.taken + cam.overflow + cam.stale + cam.lost and cam.taken == len(seqs)
