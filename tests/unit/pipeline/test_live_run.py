"""A live-layout worker's model side with its readers: real fused stages over the frames its sources
read, a source that fails mid-stream and a frame the stage fails on each taking nothing else down."""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest
from framewire.pipeline.frame import Frame, StageContext
from framewire.pipeline.plan import Policy, SourceOptions, SourcePlan
from framewire.pipeline.worker.live_run import LiveRunner, pixels
from framewire.pipeline.worker.live_share import LiveShare, Readers, SourceReader, Waiting
from framewire.stages.fused import Fused

from tests.support import fakes

pytestmark = pytest.mark.timeout(60)

LIVE = SourceOptions(policy=Policy.DROP_OLDEST)


def run(
    share: LiveShare, stage: Fused, readers: list[SourceReader]
) -> tuple[list[Frame], list[tuple[Waiting, str]]]:
    delivered: list[Frame] = []
    failed: list[tuple[Waiting, str]] = []
    runner = LiveRunner(share, stage, "infer", delivered.append, lambda w, e: failed.append((w, e)))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reading = not all(r.ended for r in readers)
        if not runner.step(0.02) and not reading:
            break
    return delivered, failed


def fused(fail_seq: int | None = None) -> Fused:
    stage = Fused([("pre", fakes.passthrough("pre")), ("infer", fakes.passthrough("inf", fail_seq=fail_seq))])
    stage.start(StageContext("infer", 0))
    return stage


def test_a_source_that_fails_mid_stream_leaves_its_neighbour_running_and_in_order() -> None:
    share = LiveShare()
    good = SourcePlan("good", functools.partial(fakes.SyntheticSource, "good", 60, delay_s=0.01), LIVE)
    bad = SourcePlan(
        "bad", functools.partial(fakes.SyntheticSource, "bad", 60, fail_at=10, delay_s=0.01), LIVE
    )
    readers = [SourceReader(good, share).start(), SourceReader(bad, share).start()]
    delivered, failed = run(share, fused(), readers)
    assert all(r.join(5) for r in readers) and not failed
    assert readers[1].error is not None and "synthetic failure at frame 10" in readers[1].error
    assert readers[0].error is None
    good_seqs = [f.seq for f in delivered if f.source_id == "good"]
    assert good_seqs == sorted(set(good_seqs)) and good_seqs[-1] == 59  # it read to its end
    assert all(f.seq < 10 for f in delivered if f.source_id == "bad")
    for frame in delivered:  # each frame's own pixels, through both members, each member's span stamped
        assert frame.meta["value"] == frame.seq % 251 and frame.meta["seen"] == ["pre", "inf"]
        assert {"pre", "infer"} <= set(frame.timings)
    counts = readers[0].counts
    assert counts is not None and counts.read == 60 and counts.taken == len(good_seqs)
    assert counts.taken + counts.overflow + counts.stale == 60


def test_a_frame_the_stage_fails_on_is_failed_alone() -> None:
    share = LiveShare()
    plan = SourcePlan("cam", functools.partial(fakes.SyntheticSource, "cam", 30, delay_s=0.02), LIVE)
    readers = [SourceReader(plan, share).start()]
    delivered, failed = run(share, fused(fail_seq=5), readers)
    taken = readers[0].counts
    assert taken is not None
    # The model keeps up at 50 fps, so every frame is taken; the one it fails on is reported, named.
    if taken.taken == 30:
        assert [w.seq for w, _ in failed] == [5] and "infer: ValueError: inf refuses frame 5" in failed[0][1]
        assert [f.seq for f in delivered] == [s for s in range(30) if s != 5]
    else:  # a loaded machine dropped some at the source: still, only seq 5 can fail
        assert [w.seq for w, _ in failed] in ([], [5])
    assert len(delivered) + len(failed) == taken.taken


class Pending:
    """Pixels a source decoded but did not convert: written on demand."""

    shape = (4, 6, 3)

    def write_into(self, out: np.ndarray) -> None:
        out[:] = 7


def test_pending_pixels_are_converted_only_when_taken() -> None:
    assert pixels(Pending()).shape == (4, 6, 3) and int(pixels(Pending())[0, 0, 0]) == 7
    image = np.zeros((2, 2, 3), np.uint8)
    assert pixels(image) is image


def test_a_rebalance_moves_only_the_sources_that_leave_and_counts_what_they_held() -> None:
    share = LiveShare()
    plans = {
        s: SourcePlan(s, functools.partial(fakes.SyntheticSource, s, 2000, delay_s=0.005), LIVE)
        for s in "abc"
    }
    readers = Readers(share, plans)
    assert readers.apply(["a", "b"]) == {}
    kept = readers.readers["b"]
    time.sleep(0.2)
    gone = readers.apply(["b", "c"])
    assert list(gone) == ["a"] and gone["a"].read > 0
    assert gone["a"].read == gone["a"].taken + gone["a"].overflow + gone["a"].stale + gone["a"].lost
    assert readers.readers["b"] is kept and set(share.sources) == {"b", "c"}
    seen: set[str] = set()
    deadline = time.monotonic() + 10
    while seen != {"b", "c"} and time.monotonic() < deadline:
        frame = share.take(0.1)
        if frame is not None:
            seen.add(frame.source)
    assert seen == {"b", "c"}
    assert readers.stop_all(5)
