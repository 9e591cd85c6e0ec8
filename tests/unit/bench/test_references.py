"""The agreement measures of the reference checks: one-to-one box matching and identity switches."""

from __future__ import annotations

import numpy as np
import pytest

from bench.references import id_switches, matched

pytestmark = pytest.mark.timeout(30)


def test_boxes_match_one_to_one_best_overlap_first() -> None:
    reference = np.array([[0, 0, 10, 10], [20, 0, 30, 10]], dtype=float)
    ours = np.array([[0, 0, 10, 11], [0, 0, 10, 10], [50, 50, 60, 60]], dtype=float)
    pairs = matched(reference, ours, 0.9)
    assert [(i, j) for i, j, _ in pairs] == [(0, 1)]  # the exact copy wins; each box once
    assert matched(reference, np.zeros((0, 4)), 0.5) == []
    assert len(matched(reference, ours, 0.0)) == 2


def test_identity_switches_count_changes_of_a_truth_objects_id() -> None:
    box = np.array([0.0, 0.0, 10.0, 10.0])
    other = np.array([100.0, 0.0, 110.0, 10.0])
    truth = [{"a": box, "b": other}] * 4
    steady = [[(box, 1), (other, 2)]] * 4
    assert id_switches(truth, steady) == 0
    swapped = [[(box, 1), (other, 2)], [(box, 2), (other, 1)], [], [(box, 2), (other, 1)]]
    assert id_switches(truth, swapped) == 2  # both change once; a frame without tracks changes nothing
    late = [[], [(box, 7)], [(box, 7)], [(box, 9)]]
    assert id_switches(truth, late) == 1
