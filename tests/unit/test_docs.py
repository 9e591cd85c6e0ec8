"""The docs site builds with no warning (broken links and anchors fail), the README stays short, and
the generated configuration reference lists every key the config accepts.

The key check walks the pydantic models on its own, not with docs/gen_reference.py's walk, and
reads the keys back out of the generated page, so a section the generator forgets is caught.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, Field

from framewire.config import Config
from framewire.config.kinds import registry_of, variants

ROOT = Path(__file__).resolve().parents[2]


def _models_in(annotation: Any) -> list[tuple[str, type[BaseModel]]]:
    """(suffix, model) for each model a field holds: `` for a mapping, `[]` for a list item,
    `.<name>` for a map's values; an item chosen by kind from a registry, every registered kind."""
    registry = registry_of(annotation)
    if registry is not None:
        return [("", model) for model in variants(registry)]
    origin = get_origin(annotation)
    if origin is Annotated:
        return _models_in(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [found for arg in get_args(annotation) for found in _models_in(arg)]
    if origin in (tuple, list):
        return [(f"[]{suffix}", model) for suffix, model in _models_in(get_args(annotation)[0])]
    if origin is dict:
        return [(f".<name>{suffix}", model) for suffix, model in _models_in(get_args(annotation)[1])]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    return []


def _kind(model: type[BaseModel]) -> str:
    annotation = model.model_fields["kind"].annotation
    assert get_origin(annotation) is Literal
    return str(get_args(annotation)[0])


def expected_keys(model: type[BaseModel], prefix: str = "", skip: frozenset[str] = frozenset()) -> set[str]:
    """Every key path under `model`: `sources[].reconnect.initial_s`, `outputs[kind=zmq].endpoint`."""
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        key = f"{prefix}.{name}" if prefix else name
        keys.add(key)
        nested = _models_in(field.annotation)
        tagged = len(nested) > 1  # a union of models, told apart by kind
        for suffix, child in nested:
            path = f"{key}{suffix}"
            if tagged:
                path = f"{path.removesuffix('[]')}[kind={_kind(child)}]"
            keys |= expected_keys(child, path)
    return keys


def plugin_keys() -> set[str]:
    """The built-in tasks', steps', composites' and tracker's own keys (extra keys of the config)."""
    from framewire.registry import COMPOSITES, STEPS, TASKS
    from framewire.stages.tasks import ObjectTask, Task
    from framewire.stages.tracking import TrackingParams

    keys = expected_keys(TrackingParams, "tracking[kind=bytetrack]")
    for name in TASKS.names():
        cls = TASKS.get(name)
        if issubclass(cls, Task):
            keys |= expected_keys(cls.Params, f"model[task={name}]", frozenset({"task"}))
        if issubclass(cls, ObjectTask):
            keys |= expected_keys(cls.Params, f"secondary[task={name}]", frozenset({"task"}))
    for name in STEPS.names():
        keys |= expected_keys(STEPS.get(name).Params, f"steps[kind={name}]", frozenset({"kind"}))
    for name in COMPOSITES.names():
        keys |= expected_keys(COMPOSITES.get(name).Params, f"composite[kind={name}]", frozenset({"kind"}))
    return keys


def documented_keys(page: str) -> set[str]:
    """The key paths the page lists: each table row's key under its section heading's path."""
    keys: set[str] = set()
    section: str | None = None
    for line in page.splitlines():
        heading = re.match(r"^###\s+(?:`([^`]+)`|Top level)", line)
        if heading:
            section = heading.group(1) or ""
            continue
        row = re.match(r"^\| `([a-z_0-9]+)` \|", line)
        if row and section is not None:
            keys.add(f"{section}.{row.group(1)}" if section else row.group(1))
    return keys


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reference")
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_reference.py"), str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out / "reference"


def test_the_configuration_reference_lists_every_key(generated: Path) -> None:
    page = (generated / "configuration.md").read_text()
    expected = expected_keys(Config) | plugin_keys()
    documented = documented_keys(page)
    assert len(expected) > 250  # the walk found the whole config, not a corner of it
    assert sorted(expected - documented) == []
    assert sorted(documented - expected) == []


def test_every_documented_key_has_a_type_a_default_and_a_description(generated: Path) -> None:
    rows = [line for line in (generated / "configuration.md").read_text().splitlines() if re.match(r"^\| `", line)]
    for row in rows:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert len(cells) == 4 and all(cells), row


def test_a_field_without_a_description_fails_the_generation() -> None:
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import gen_reference
    finally:
        sys.path.remove(str(ROOT / "docs"))

    class Inner(BaseModel):
        bare: int = 1

    class Outer(BaseModel):
        inner: Inner = Field(default_factory=Inner, description="A nested mapping.")

    class Described(BaseModel):
        inner: int = Field(default=1, description="A number.")

    assert [section.path for section in gen_reference.walk(gen_reference.Section("x", Described))] == ["x"]
    with pytest.raises(gen_reference.MissingDescription, match=r"^x\.inner\.bare: "):
        gen_reference.walk(gen_reference.Section("x", Outer))


def test_the_cli_reference_has_every_command_and_flag(generated: Path) -> None:
    from framewire.cli import _parser

    page = (generated / "cli.md").read_text()
    parser = _parser()
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    for name, sub in commands.items():
        assert f"## framewire {name}\n" in page, name
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in page, (name, flag)


def test_the_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


@pytest.mark.slow
def test_the_site_builds_with_no_warning(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "framewire.Client" in api and "framewire.Pipeline" in api
    config = (tmp_path / "site" / "reference" / "configuration" / "index.html").read_text()
    assert 'id="outputs-kind-zmq"' in config
