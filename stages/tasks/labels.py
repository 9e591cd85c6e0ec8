"""Class labels: from a file (one per line), a list in the config, or the model's own metadata."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path

from framewire.pipeline.errors import ConfigError

LabelSource = Path | tuple[str, ...] | None
"""`labels:` as configured: a file, an inline list, or nothing (then the model's metadata)."""


def read_labels(
    source: LabelSource, metadata: Mapping[str, str], key: str
) -> tuple[tuple[str, ...] | None, str]:
    """The labels and where they came from ('file x', 'config', 'metadata names'), or (None, '')."""
    if isinstance(source, Path):
        try:
            lines = source.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{key}: cannot read labels file {str(source)!r}: {exc}") from None
        labels = _numbered(lines) or tuple(line.strip() for line in lines if line.strip())
        if not labels:
            raise ConfigError(f"{key}: labels file {str(source)!r} has no labels")
        return labels, f"file {source}"
    if source is not None:
        return tuple(source), "config"
    names = metadata_names(metadata)
    return (names, "model metadata 'names'") if names else (None, "")


def _numbered(lines: Sequence[str]) -> tuple[str, ...] | None:
    """Lines of "id  name" (TensorFlow's coco_labels.txt: ids with gaps) as labels by id, a gap
    labelled by its id; None unless every non-empty line is one, ids increasing."""
    pairs = [line.strip().split(maxsplit=1) for line in lines if line.strip()]
    if not pairs or not all(len(p) == 2 and p[0].isdigit() for p in pairs):
        return None
    ids = [int(p[0]) for p in pairs]
    if ids != sorted(set(ids)):
        return None
    names = dict(zip(ids, (p[1].strip() for p in pairs), strict=True))
    return tuple(names.get(i, str(i)) for i in range(ids[-1] + 1))


def metadata_names(metadata: Mapping[str, str]) -> tuple[str, ...] | None:
    """Ultralytics' `names` metadata ("{0: 'person', 1: 'bicycle'}", a Python literal) as a tuple."""
    text = metadata.get("names")
    if not text:
        return None
    try:
        value = ast.literal_eval(text)  # a literal only: no code runs
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, dict) and all(isinstance(k, int) for k in value):
        if sorted(value) != list(range(len(value))):
            return None
        return tuple(str(value[i]) for i in range(len(value)))
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    return None


def class_filter(
    wanted: Sequence[int | str] | None, labels: Sequence[str] | None, classes: int | None, key: str
) -> frozenset[int] | None:
    """The class ids `wanted` names (labels or ids), checked against the model's; None: all classes."""
    if wanted is None:
        return None
    ids: set[int] = set()
    for item in wanted:
        if isinstance(item, int):
            if classes is not None and not 0 <= item < classes:
                raise ConfigError(f"{key}: class id {item} is out of range (the model has {classes} classes)")
            ids.add(item)
            continue
        if labels is None or item not in labels:
            known = (
                ", ".join(labels[:20]) + (", ..." if labels and len(labels) > 20 else "")
                if labels
                else "none"
            )
            raise ConfigError(f"{key}: {item!r} is not a label of the model (labels: {known})")
        ids.add(list(labels).index(item))
    return frozenset(ids)


def label_of(labels: Sequence[str] | None, class_id: int) -> str:
    """The label of a class id; its number as text when there are no labels or too few."""
    if labels is not None and 0 <= class_id < len(labels):
        return labels[class_id]
    return str(class_id)
