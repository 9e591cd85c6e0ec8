"""Rendezvous hashing: the same answer everywhere, and a replica that joins or leaves moves only its share."""

from __future__ import annotations

import pytest

from framewire.pipeline.ops.rendezvous import owner, ranked, shard_of, weight

pytestmark = pytest.mark.timeout(60)

KEYS = [f"cam-{i:04d}" for i in range(3000)]


def share(nodes: list[str]) -> dict[str, str]:
    return {key: str(owner(key, nodes)) for key in KEYS}


def test_the_answer_is_fixed_whatever_the_order_and_across_versions() -> None:
    nodes = ["0", "1", "2"]
    assert share(nodes) == share(list(reversed(nodes)))
    # Pinned: a change of hash would move every camera of every running fleet on upgrade.
    assert [owner(k, nodes) for k in ("cam-1", "cam-2", "cam-3", "lobby", "dock")] == ["1", "1", "1", "0", "2"]
    assert weight("lobby", "0") == weight("lobby", "0") and 0 <= weight("lobby", "0") < 2**64
    assert owner("x", []) is None and ranked("x", ["b", "a", "b"]) in (["a", "b"], ["b", "a"])


@pytest.mark.parametrize("count", [2, 3, 5, 8])
def test_a_replica_that_joins_takes_about_one_nth_and_nothing_else_moves(count: int) -> None:
    before = share([str(i) for i in range(count)])
    after = share([str(i) for i in range(count + 1)])
    moved = [key for key in KEYS if before[key] != after[key]]
    assert all(after[key] == str(count) for key in moved)  # every move is to the newcomer
    assert abs(len(moved) / len(KEYS) - 1 / (count + 1)) < 0.03


def test_a_replica_that_leaves_hands_only_its_own_sources_to_the_others_evenly() -> None:
    before = share(["0", "1", "2", "3"])
    after = share(["0", "1", "3"])
    assert all(before[key] == after[key] for key in KEYS if before[key] != "2")
    taken = [after[key] for key in KEYS if before[key] == "2"]
    for node in ("0", "1", "3"):
        assert abs(taken.count(node) / len(taken) - 1 / 3) < 0.06


def test_each_source_is_in_exactly_one_static_shard_and_the_shards_are_balanced() -> None:
    for count in (1, 3, 7):
        counts = [0] * count
        for key in KEYS:
            owners = [i for i in range(count) if shard_of(key, i, count)]
            assert len(owners) == 1
            counts[owners[0]] += 1
        assert all(abs(c / len(KEYS) - 1 / count) < 0.04 for c in counts)
