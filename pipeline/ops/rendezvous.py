"""Rendezvous (highest-random-weight) hashing: which replica of a fleet runs a source.

Every replica computes the same answer from the source's id and the replicas' names alone, with no
table to share: each (source, replica) pair gets a pseudo-random weight and the heaviest replica
wins. When a replica joins, it takes about 1/N of the sources (those whose new pair outweighs every
old one) and nothing else moves; when one leaves, only its own sources move, spread evenly over the
others (each goes to its runner-up). A modulo hash (`hash(id) % N`) would move most of them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def weight(key: str, node: str) -> int:
    """The pair's weight: 64 bits of BLAKE2b, the same on every host and Python (unlike `hash()`)."""
    digest = hashlib.blake2b(f"{node}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def ranked(key: str, nodes: Iterable[str]) -> list[str]:
    """`nodes` from the one that should run `key` to the last (ties, which 64 bits make rare, by name)."""
    return sorted(set(nodes), key=lambda node: (weight(key, node), node), reverse=True)


def owner(key: str, nodes: Iterable[str]) -> str | None:
    """The node that runs `key`; None when there is none."""
    best = ranked(key, nodes)
    return best[0] if best else None


def shard_of(key: str, index: int, count: int) -> bool:
    """Whether replica `index` of `count` (named "0" .. "count-1") runs `key`: static sharding."""
    return owner(key, (str(i) for i in range(count))) == str(index)
