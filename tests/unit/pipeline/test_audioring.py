"""The audio ring: samples by time, gaps marked, overwrites and pending windows told apart."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from framewire.pipeline.wire.audioring import AudioRing, AudioRingLayout, RingCache, ring_of
from framewire.pipeline.wire.shm import Segment

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def ring() -> Iterator[AudioRing]:
    made = AudioRing.create(AudioRingLayout(f"framewire-test-audio-{uuid.uuid4().hex[:8]}", 1000, 100))
    yield made
    made.close()


def test_samples_sit_at_their_time_from_the_first_chunk(ring: AudioRing) -> None:
    assert ring.origin_s is None and ring.window(0.0, 10).pending == 10
    ring.write(np.arange(50, dtype=np.float32), 2.0)
    assert ring.origin_s == 2.0 and ring.head == 50 and ring.written_until_s() == pytest.approx(2.05)
    window = ring.window(2.010, 20)
    assert window.complete and window.samples.tolist() == list(range(10, 30))
    ahead = ring.window(2.040, 20)  # half written, half still to come
    assert ahead.missing == 10 and ahead.pending == 10 and ahead.samples[:10].tolist() == list(range(40, 50))


def test_a_late_start_is_a_gap_of_silence_not_a_shift(ring: AudioRing) -> None:
    ring.write(np.ones(10, np.float32), 0.0)
    gap, dropped = ring.write(np.full(10, 2.0, np.float32), 0.030)  # 20 samples never arrived
    assert (gap, dropped) == (20, 0) and ring.head == 40
    window = ring.window(0.0, 40)
    assert window.missing == 20 and window.pending == 0
    assert window.samples[:10].tolist() == [1.0] * 10 and window.samples[30:].tolist() == [2.0] * 10
    assert not window.samples[10:30].any()


def test_overlap_and_jitter(ring: AudioRing) -> None:
    ring.write(np.ones(10, np.float32), 0.0)
    assert ring.write(np.full(10, 2.0, np.float32), 0.005) == (0, 5)  # half of it already there
    assert ring.head == 15
    assert ring.write(np.full(5, 3.0, np.float32), 0.0151) == (0, 0)  # a sample off: continues
    assert ring.head == 20 and ring.read(15, 5).samples.tolist() == [3.0] * 5


def test_old_samples_are_overwritten_and_read_as_missing(ring: AudioRing) -> None:
    ring.write(np.arange(250, dtype=np.float32), 0.0)  # capacity 100: samples 150..249 remain
    assert ring.head == 250
    old = ring.read(100, 100)
    assert old.missing == 50 and old.samples[50:].tolist() == list(range(150, 200))
    assert ring.read(-5, 5).missing == 5  # before the audio began


def test_the_end_makes_missing_final(ring: AudioRing) -> None:
    ring.write(np.ones(10, np.float32), 0.0)
    assert ring.window(0.005, 10).pending == 5 and ring.end_s() is None
    ring.end()
    window = ring.window(0.005, 10)
    assert window.missing == 5 and window.pending == 0 and ring.end_s() == pytest.approx(0.010)


def test_another_process_maps_it_by_name_and_the_owner_unlinks(ring: AudioRing) -> None:
    wire = {**ring.layout.to_wire()}
    cache = RingCache()
    reader = cache.get(wire)
    assert cache.get(wire) is reader
    ring.write(np.full(7, 0.5, np.float32), 1.0)
    assert reader.head == 7 and reader.origin_s == 1.0 and reader.window(1.0, 7).samples.tolist() == [0.5] * 7
    assert (
        ring_of({"name": "pool", "audio": wire}) == wire
        and ring_of({"name": "pool"}) is None
        and ring_of(None) is None
    )
    cache.close()
    path = Segment.path_of(ring.layout.name)
    assert os.path.exists(path)
    ring.close()
    assert not os.path.exists(path)
