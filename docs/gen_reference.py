"""The reference pages that are made from the code, so that they cannot drift from it: the
configuration (every key of the pydantic models: type, default, description), the command line
(framewire.cli's own parser) and the Python API (mkdocstrings directives for `framewire.__all__`).

docs/hooks.py adds them to the site at every `mkdocs build`; `python docs/gen_reference.py DIR`
writes them into DIR to read or diff. A config field without a description stops the generation,
naming the key: the reference is only as good as the descriptions in the models.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import re
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ByteSize
from pydantic.fields import FieldInfo

ROOT = Path(__file__).resolve().parents[1]


class MissingDescription(ValueError):
    """A config field with no `description`: the generated reference would have a hole."""


# --- what the config accepts ----------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """One mapping of the config: its key path (`sources[]`, `outputs[kind=zmq]`) and its model."""

    path: str
    model: type[BaseModel]
    skip: frozenset[str] = frozenset()  # keys documented by the section that owns the discriminator


def _load(entry: str) -> Any:
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)


def plugin_sections() -> list[tuple[str, str, str, dict[str, type[BaseModel]]]]:
    """The keys that belong to a plug-in rather than to framewire.config (kept there as extra keys
    and validated by the class the config names): (where, the key that names the class, a title,
    {name: its parameter model}). Built-ins only: a plug-in documents its own keys."""
    from framewire.registry import COMPOSITES, STEPS, TASKS
    from framewire.stages.tasks import ObjectTask, Task
    from framewire.stages.tracking import TrackingParams

    tasks = {name: TASKS.get(name) for name in TASKS.names()}
    composites = {name: COMPOSITES.get(name) for name in COMPOSITES.names()}
    return [
        ("model", "task", "Task parameters: the keys of `model:` beside `path` and `task`",
         {name: cls.Params for name, cls in tasks.items() if issubclass(cls, Task)}),
        ("secondary[]", "task", "Secondary task parameters: the keys of a `secondary:` item beside its own",
         {name: cls.Params for name, cls in tasks.items() if issubclass(cls, ObjectTask)}),
        ("steps[]", "kind", "Step parameters: the keys of a `steps:` item beside kind, name and workers",
         {name: STEPS.get(name).Params for name in STEPS.names()}),
        ("composite[]", "kind", "Composite parameters: the keys of a `composite:` item",
         {name: cls.Params for name, cls in composites.items()}),
        ("tracking", "kind", "Tracker parameters: the keys of `tracking:` beside kind and interval",
         {"bytetrack": TrackingParams}),
    ]  # fmt: skip


def _members(annotation: Any) -> list[Any]:
    """`X | None`, `Union[A, B]` and `Annotated[A | B, ...]` as [X, None], [A, B]; an item chosen by
    kind from a registry (`outputs:`) as every registered kind's model."""
    from framewire.config.kinds import registry_of, variants

    registry = registry_of(annotation)
    if registry is not None:
        return list(variants(registry))
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [member for arg in get_args(annotation) for member in _members(arg)]
    return [annotation]


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def _tag(model: type[BaseModel], key: str = "kind") -> str | None:
    field = model.model_fields.get(key)
    if field is not None and get_origin(field.annotation) is Literal and len(get_args(field.annotation)) == 1:
        return str(get_args(field.annotation)[0])
    return None


def _nested(path: str, annotation: Any) -> Iterator[Section]:
    """The sections under a field typed `annotation` at `path`: models, lists and maps of models,
    and a union of models told apart by `kind` (one section per kind)."""
    models: list[tuple[str, type[BaseModel]]] = []
    for member in _members(annotation):
        origin = get_origin(member)
        if _is_model(member):
            models.append((path, member))
        elif origin in (tuple, list) and get_args(member):
            models += [(f"{path}[]", m) for m in _members(get_args(member)[0]) if _is_model(m)]
        elif origin is dict:
            models += [(f"{path}.<name>", m) for m in _members(get_args(member)[1]) if _is_model(m)]
    tagged = len(models) > 1
    for where, model in models:
        tag = _tag(model)
        if tagged and tag is None:
            raise MissingDescription(f"{where}: a union of models without a kind to tell them apart")
        yield Section(_tagged(where, "kind", tag) if tagged else where, model)


def _tagged(where: str, key: str, name: str | None) -> str:
    """`outputs[]` with kind zmq is `outputs[kind=zmq]`; `model` with task detection, `model[task=detection]`."""
    return f"{where.removesuffix('[]')}[{key}={name}]"


def walk(section: Section) -> list[Section]:
    """`section` and every mapping under it, depth first; a field without a description stops it."""
    found = [section]
    for name, field in section.model.model_fields.items():
        key = f"{section.path}.{name}" if section.path else name
        if not field.description:
            raise MissingDescription(f"{key}: the field has no description ({section.model.__qualname__})")
        for child in _nested(key, field.annotation):
            found += walk(child)
    return found


def config_sections() -> list[Section]:
    """Every mapping the config accepts, depth first, the plug-ins' parameters last."""
    from framewire.config import Config

    sections = walk(Section("", Config))
    for where, key, _title, models in plugin_sections():
        for name, model in models.items():
            sections += walk(Section(_tagged(where, key, name), model, frozenset({key})))
    return sections


# --- rendering ------------------------------------------------------------------------------------

_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null", Any: "any"}
_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "length ≥"), ("max_length", "length ≤"))


def anchor(path: str) -> str:
    """The heading id of a section: its key path in letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "top-level"


def _bounds(metadata: list[Any]) -> str:
    found = [f"{sign} {getattr(item, name)}" for item in metadata for name, sign in _BOUNDS
             if getattr(item, name, None) is not None]  # fmt: skip
    return f" ({', '.join(found)})" if found else ""


def type_text(annotation: Any, path: str) -> str:
    """A field's type as a reader of YAML sees it; a nested model links to its section."""
    from framewire.config.kinds import registry_of, variants

    registry = registry_of(annotation)
    if registry is not None and len(variants(registry)) > 1:  # told apart by kind: one section each
        return " \\| ".join(f"[mapping, kind `{_tag(model)}`](#{anchor(_tagged(path, 'kind', _tag(model)))})"
                             for model in variants(registry))  # fmt: skip
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        return type_text(inner, path) + _bounds(metadata)
    if origin is Union or origin is types.UnionType:
        args = get_args(annotation)
        if sum(_is_model(arg) for arg in args) > 1:  # told apart by kind: one section each
            return " \\| ".join(f"[mapping, kind `{_tag(arg)}`](#{anchor(_tagged(path, 'kind', _tag(arg)))})"
                                 if _is_model(arg) else type_text(arg, path) for arg in args)
        return " \\| ".join(type_text(arg, path) for arg in args)
    if origin is Literal:
        return " \\| ".join(f"`{_value(arg)}`" for arg in get_args(annotation))
    if origin in (tuple, list):
        args = get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis or len(args) == 1:
            return f"list of {type_text(args[0], path + '[]')}"
        return "[" + ", ".join(type_text(arg, path) for arg in args) + "]"
    if origin is dict:
        return f"mapping of {type_text(get_args(annotation)[0], path)} to {type_text(get_args(annotation)[1], path + '.<name>')}"
    if _is_model(annotation):
        tag = _tag(annotation)
        target = next((s.path for s in _nested(path, annotation)), path)
        label = f"mapping, kind `{tag}`" if tag else "mapping"
        return f"[{label}](#{anchor(target)})"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{member.value}`" for member in annotation)
    if annotation is ByteSize:
        return "size (bytes, or text such as `20GiB`, `500MB`)"
    return _SCALARS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _value(value: Any) -> str:
    """A default as it would be written in the YAML file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return _value(value.value)
    if isinstance(value, BaseModel):
        return _value(value.model_dump())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_value(item)}" for key, item in value.items()) + "}"
    if isinstance(value, str):
        return value if value else '""'
    return repr(value)


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        made = field.default_factory()  # type: ignore[call-arg]
        return "its defaults" if isinstance(made, BaseModel) else f"`{_value(made)}`"
    return f"`{_value(field.default)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _render_section(section: Section, title: str | None = None) -> list[str]:
    own_doc = section.model.__dict__.get("__doc__")
    heading = f"`{section.path}`" if section.path else "Top level"
    lines = [f"### {title or heading} {{#{anchor(section.path)}}}", ""]
    if own_doc:
        lines += [" ".join(own_doc.split()), ""]
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    for name, field in section.model.model_fields.items():
        if name in section.skip:
            continue
        key = f"{section.path}.{name}" if section.path else name
        lines.append(f"| `{name}` | {type_text(field.annotation, key)} | {default_text(field)} | {_cell(field.description or '')} |")
    return [*lines, ""]


CONFIG_INTRO = """# Configuration reference

Made from the pydantic models at every docs build (docs/gen_reference.py): every key the config
accepts, with its type, its default and the description written where the key is declared. The
guides show these keys at work; [Your first config](../learn/first-config.md) starts from nothing.

How to read it:

- A heading is a key path. `sources[]` is an item of the `sources:` list; `outputs[kind=zmq]` is an
  item of `outputs:` whose `kind` is `zmq`; `model[task=detection]` lists the keys `model:` takes
  beside `path` and `task` when `task` is `detection`.
- On the command line, `--set` addresses the same keys, list items by index:
  `--set sources.0.reconnect.max_s=10`, `--set outputs.2.jpeg=true`
  ([CLI reference](cli.md), [Command-line behaviour](behaviour.md)).
- An unknown key is an error that names the key it resembles. A value may name environment
  variables: `${VAR}`, or `${VAR:-default}` (`$${` writes `${`). Relative output paths are relative
  to the current folder; a relative input path (a model, a file source) is looked for there, then
  beside the config file, then in the checkout.
- A key whose type links to another section takes a mapping: that section lists its keys.
- Task, step, composite and tracker keys belong to the class the config names (a built-in or a
  plug-in); the built-ins' are listed at the end. A plug-in's keys are its own
  ([Plug-ins](../guides/plugins.md)).
"""


def configuration() -> str:
    """The configuration reference page."""
    sections = config_sections()
    by_path = {section.path: section for section in sections}
    lines = [CONFIG_INTRO, "## The job", ""]
    plugins = plugin_sections()
    plugin_roots = {_tagged(where, key, name) for where, key, _t, models in plugins for name in models}
    for section in sections:
        if section.path not in plugin_roots and not any(section.path.startswith(root + ".") for root in plugin_roots):
            lines += _render_section(section)
        for where, key, _title, models in plugins:
            if section.path == where:
                links = ", ".join(f"[{name}](#{anchor(_tagged(where, key, name))})" for name in models)
                lines += [f"Beside these keys, those of its {key}: {links}; a plug-in's own are in its docs.", ""]
    for where, key, title, models in plugins:
        lines += [f"## {title}", ""]
        for name in models:
            root = _tagged(where, key, name)
            lines += _render_section(by_path[root])
            lines += [line for s in sections if s.path.startswith(root + ".") for line in _render_section(s)]
    return "\n".join(lines).rstrip() + "\n"


# --- the command line -----------------------------------------------------------------------------


def _flag_rows(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = ["| argument | value | default | what |", "|---|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or argparse.SUPPRESS in (
            action.help, action.default  # a command's copy of the top-level flags: listed once, at the top
        ):
            continue
        names = ", ".join(f"`{name}`" for name in action.option_strings) or f"`{action.metavar or action.dest}`"
        if action.choices is not None:
            value = " \\| ".join(f"`{choice}`" for choice in action.choices)
        elif action.nargs == 0:
            value = ""
        else:
            value = f"`{formatter._format_args(action, action.dest.upper())}`"
        default = action.default
        unset = default is None or default is False or default == [] or default == ""
        shown = "" if unset or action.nargs == 0 else f"`{_relative(default)}`"
        helped = _relative(formatter._expand_help(action)) if action.help else ""
        rows.append(f"| {names}{' (required)' if action.required else ''} | {value} | {shown} | {_cell(helped)} |")
    return rows


def _relative(value: Any) -> str:
    """Defaults that hold the checkout's absolute path, as the path a reader of the checkout types."""
    return str(value).replace(str(ROOT) + "/", "")


def _usage(parser: argparse.ArgumentParser) -> list[str]:
    return ["```", " ".join(parser.format_usage().split())[len("usage: "):], "```", ""]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (sub, helps.get(name, "")) for name, sub in action.choices.items()}
    return {}


CLI_INTRO = """# CLI reference

Made from the command's own argument parser at every docs build (`framewire.cli`): every command and
every flag. `framewire` is the installed command; from a checkout, `python run_pipeline.py` is the
same command. Exit codes, errors, `--set`, signals and log formats are in
[Command-line behaviour](behaviour.md).
"""


def command_line() -> str:
    """The CLI reference page: the top-level flags, then each command."""
    argv0, sys.argv[0] = sys.argv[0], "framewire"
    try:
        from framewire.cli import _parser

        parser = _parser()
    finally:
        sys.argv[0] = argv0
    lines = [CLI_INTRO, "## framewire", "", parser.description or "", "", *_usage(parser), *_flag_rows(parser), ""]
    lines += ["Every command below also takes `--debug`, `-v` and `--log-format` after its name.", ""]
    for name, (sub, text) in _subcommands(parser).items():
        lines += [f"## framewire {name}", "", f"{text[:1].upper()}{text[1:]}.", ""]
        if name == "bench":
            lines += _bench()
            continue
        lines += [*_usage(sub), *_flag_rows(sub), ""]
    return "\n".join(lines).rstrip() + "\n"


def _bench() -> list[str]:
    """`bench` hands its arguments to the benchmarks' own parser (bench/cli.py, in the checkout only)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.cli import build_parser

    lines = ["From a checkout only (`bench/` is not installed): `python run_pipeline.py bench <what>`, or",
             "`python -m bench <what>`. Each writes JSON (`--json PATH`) and a table; see",
             "[Benchmarks](../guides/benchmarking.md).", ""]  # fmt: skip
    for name, (sub, text) in _subcommands(build_parser("framewire bench")).items():
        lines += [f"### framewire bench {name}", "", f"{text[:1].upper()}{text[1:]}.", ""]
        lines += [*_usage(sub), *_flag_rows(sub), ""]
    return lines


# --- the Python API -------------------------------------------------------------------------------

API_INTRO = """# Python API reference

Made from the docstrings of the names `framewire` exports (`framewire.__all__`) at every docs
build. [Python: read results, run a job](../guides/python.md) shows them at work. Everything
else under `framewire.*` is internal and may change.
"""


COMPONENTS_INTRO = """## Building blocks: `framewire.components` {#building-blocks}

For a loop of your own around framewire's tasks and engines, as the benchmarks run theirs
([Benchmark results](../benchmarks.md#what-the-benchmarks-import)): a config's task, engine, steps,
composites and middle stages, video and audio, the daemon's records. Each name loads on first use.
"""


def python_api() -> str:
    """The API page: one mkdocstrings block per public name, under the name users import; then the
    building blocks of framewire.components."""
    import framewire
    import framewire.components

    lines = [API_INTRO]
    for name in framewire.__all__:
        lines += _api_block(f"framewire.{name}")
    lines += [COMPONENTS_INTRO]
    for name in framewire.components.__all__:
        lines += _api_block(f"framewire.components.{name}")
    return "\n".join(lines).rstrip() + "\n"


def _api_block(path: str) -> list[str]:
    return [f"::: {path}", "    options:", "      show_root_heading: true", "      show_root_full_path: true", ""]


PAGES: dict[str, Callable[[], str]] = {
    "reference/configuration.md": configuration,
    "reference/cli.md": command_line,
    "reference/api.md": python_api,
    "reference/openapi.json": lambda: importlib.import_module("framewire.app.http_api").document_bytes().decode(),
}
"""The generated pages, by their path under docs/."""


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python docs/gen_reference.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    for page, make in PAGES.items():
        target = out / page
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(make())
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
