"""A worker keeps freed memory for its next frame (pipeline.worker.heap): no page faults for the
temporaries every frame allocates. Checked in processes started as the workers are (forkserver)."""

from __future__ import annotations

import multiprocessing
import resource
import sys

import numpy as np
import pytest

from framewire.pipeline.worker import heap

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt"),
]


def _faults_a_frame(keep: bool, queue: multiprocessing.Queue) -> None:
    """Minor page faults of a 'frame' that holds four 675 KB temporaries at once and then frees
    them (a 720p frame's scaled picture, its YUV and BGR at the model's size, its planes), after ten
    frames of warm-up. Freed together they make a free block at the top of the heap over glibc's
    trim threshold (twice the largest block it has served from a mapping of its own), and without
    `keep_freed_memory` the heap gives it back to the kernel each frame."""
    queue.put(heap.keep_freed_memory() if keep else None)

    def frame() -> None:
        blocks = [np.empty(691_200, np.uint8) for _ in range(4)]
        for block in blocks:
            block.fill(1)  # written, as a conversion writes its output

    for _ in range(10):
        frame()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        frame()
    queue.put((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)


def _run(keep: bool) -> tuple[bool | None, float]:
    ctx = multiprocessing.get_context("forkserver")
    queue = ctx.Queue()
    process = ctx.Process(target=_faults_a_frame, args=(keep, queue))
    process.start()
    try:
        return queue.get(timeout=30), queue.get(timeout=30)
    finally:
        process.join(timeout=10)


def test_a_worker_frees_no_memory_back_between_frames() -> None:
    set_, faults = _run(keep=True)
    assert set_ is True
    assert faults < 10, f"{faults} page faults a frame"


def test_without_it_a_frame_faults_its_temporaries_in_again() -> None:
    """What the workers paid: the premise of the module, on this machine's glibc."""
    _, faults = _run(keep=False)
    assert faults > 4 * 691_200 // 4096 / 2, f"only {faults} page faults a frame"
