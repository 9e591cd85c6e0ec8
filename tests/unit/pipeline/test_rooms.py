"""The runtime is grouped by role (docs/architecture.md): a module's room says what it may touch, and
its name says what it is, once. Two modules of one name in two rooms (`metrics` in hub/ and ops/)
would make `from ... import metrics` ambiguous to a reader."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

PIPELINE = Path(__file__).resolve().parents[3] / "pipeline"
ROOMS = ("hub", "ops", "run", "wire", "worker")


def test_the_runtime_has_its_rooms_and_nothing_else() -> None:
    folders = sorted(p.name for p in PIPELINE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert folders == sorted(ROOMS)


def test_no_two_modules_of_the_runtime_share_a_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in PIPELINE.rglob("*.py"):
        if path.name != "__init__.py":
            where[path.stem].append(str(path.relative_to(PIPELINE)))
    where.update({room: [*where.get(room, []), f"{room}/"] for room in ROOMS})  # a module named like a room
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
