"""The command line's own helpers (the commands themselves are run as a user would in tests/e2e)."""

from __future__ import annotations

from framewire.cli import classes_line


def test_validate_names_the_classes_and_cuts_a_long_list() -> None:
    assert classes_line(("face",)) == "classes (1): 0=face"
    coco = tuple(f"c{i}" for i in range(80))
    line = classes_line(coco)
    assert line.startswith("classes (80): 0=c0, 1=c1, ") and line.endswith(", 19=c19, ... (60 more)")
    assert classes_line(coco[:20]).endswith("19=c19")
