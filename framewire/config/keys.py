"""What a key path means in a config model: the keys a mapping there takes, and whether it holds text.

Errors use it to say "did you mean" for an unknown key, and `--set` to keep a value as it was typed
where the key takes a string (`--set http.token=12345` is the text "12345", not a number).
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

Part = str | int


def _members(annotation: Any) -> list[Any]:
    """The alternatives of an annotation: `X | None` and `Annotated[A | B, ...]` give [X, None] and [A, B]."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(annotation) for m in _members(arg)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) and hasattr(annotation, "variants"):
        return list(annotation.variants())  # a base chosen by kind: every registered kind's model
    return [annotation]


def _kind_of(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("kind")
    if field is not None and get_origin(field.annotation) is Literal:
        return str(get_args(field.annotation)[0])
    return None


def _step(annotation: Any, part: Part) -> list[Any]:
    """What sits under `part` of a value typed `annotation` (every alternative of it)."""
    found: list[Any] = []
    for member in _members(annotation):
        origin = get_origin(member)
        if isinstance(member, type) and issubclass(member, BaseModel):
            field = member.model_fields.get(str(part))
            if field is not None:
                found.append(field.annotation)
        elif origin in (tuple, list) and str(part).isdigit():
            found.append(get_args(member)[0])
        elif origin is dict:
            found.append(get_args(member)[1])
    return found


def annotations_at(model: type[BaseModel], path: Sequence[Part]) -> list[Any]:
    """Every annotation the key path may have (a union of outputs gives one per kind that has it);
    [] where the models do not say (task parameters, an unknown key)."""
    current: list[Any] = [model]
    for part in path:
        tagged = [m for a in current for m in _members(a)
                  if isinstance(m, type) and issubclass(m, BaseModel) and _kind_of(m) == part]  # fmt: skip
        if tagged:  # pydantic names a discriminated union's member by its tag in an error's loc
            current = tagged
            continue
        current = [a for c in current for a in _step(c, part)]
        if not current:
            return []
    return current


def known_keys(model: type[BaseModel], path: Sequence[Part]) -> list[str]:
    """The keys the mapping at `path` takes (the models' fields there), for "did you mean"."""
    keys: list[str] = []
    for annotation in annotations_at(model, path):
        for member in _members(annotation):
            if isinstance(member, type) and issubclass(member, BaseModel):
                keys += [k for k in member.model_fields if k not in keys]
    return keys


def suggest(key: str, known: Iterable[str]) -> str | None:
    """The known key closest to a misspelt one, if one is close."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return close[0] if close else None


def text_key(model: type[BaseModel], path: Sequence[Part]) -> tuple[bool, bool]:
    """(whether the key at `path` takes text and only text, whether it also takes null)."""
    annotations = annotations_at(model, path)
    if not annotations:
        return False, False
    members = [m for a in annotations for m in _members(a)]
    nullable = type(None) in members
    values = [m for m in members if m is not type(None)]
    return bool(values) and all(m is str for m in values), nullable


def tags_at(model: type[BaseModel], path: Sequence[Part], tag_key: str = "kind") -> list[str]:
    """The tags (`kind` values) of the discriminated union at `path`, in declaration order."""
    tags: list[str] = []
    for annotation in annotations_at(model, path):
        for member in _members(annotation):
            if isinstance(member, type) and issubclass(member, BaseModel) and tag_key == "kind":
                kind = _kind_of(member)
                if kind is not None and kind not in tags:
                    tags.append(kind)
    return tags


def required_keys(model: type[BaseModel], path: Sequence[Part]) -> list[str]:
    """The keys every model the mapping at `path` may be requires (a source's id and uri; an
    output's kind), in declaration order: what an item added whole must hold."""
    found: list[list[str]] = []
    for annotation in annotations_at(model, path):
        for member in _members(annotation):
            if isinstance(member, type) and issubclass(member, BaseModel):
                found.append([k for k, f in member.model_fields.items() if f.is_required()])
    if not found:
        return []
    return [k for k in found[0] if all(k in other for other in found[1:])]
