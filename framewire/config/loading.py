"""Loading a config: YAML, `--set` overrides, validation into one-line errors, input paths."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from framewire.config import env, keys
from framewire.config.job import Config
from framewire.config.sources import SourceConfig
from framewire.pipeline.errors import ConfigError


def load_config(
    path: str | Path, overrides: Sequence[str] = (), *, text: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Read a YAML config (or `text`), apply `key.path=value` overrides, fill in `${VAR}`s from
    `environ` (the process's environment by default), validate.

    Raises ConfigError with one line naming the file, the key path and the bad value.
    """
    return validate_config(load_raw(path, overrides, text=text, environ=environ), str(path))


def load_raw(
    path: str | Path, overrides: Sequence[str] = (), *, text: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`load_config` before validation: the mapping to validate (framewire.embed adds an output)."""
    name = str(path)
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{name}: config file not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{name}: cannot read config file: {exc}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{name}:{where}: not valid YAML: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{name}: the top level must be a mapping of keys, got {type(raw).__name__}")
    for item in overrides:
        apply_override(raw, item)
    try:
        expanded: dict[str, Any] = env.expand(raw, environ)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    return expanded


def validate_config(raw: Mapping[str, Any], name: str = "config") -> Config:
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{name}: {describe_validation_error(exc, model=Config)}") from None


def describe_validation_error(
    exc: ValidationError, prefix: str = "", *, model: type[BaseModel] | None = None, also_known: Sequence[str] = ()
) -> str:
    """One line for the first error, unknown keys first: `key.path: what is wrong (got value)`,
    plus how many more. With `model` (what was validated), an unknown key gets a "did you mean"
    among the keys its mapping takes (and `also_known`, keys taken before validation)."""
    errors = _useful(exc.errors(include_url=False))
    hints = {tuple(e["loc"]): _hint(e, model, also_known) for e in errors if e["type"] == "extra_forbidden"}
    # A misspelt required key also shows as missing: the unknown key, with its hint, says it all.
    hinted = {loc[:-1] + (hint,) for loc, hint in hints.items() if hint}
    errors = [e for e in errors if not (e["type"] == "missing" and tuple(e["loc"]) in hinted)]
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")  # stable: the rest keep their order
    first = errors[0]
    loc = [str(p) for i, p in enumerate(first["loc"]) if not _is_union_tag(first["loc"], i)]
    key = ".".join(([prefix] if prefix else []) + loc) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        hint = hints.get(tuple(first["loc"]))
        line = f"{key}: unknown key" + (f" (did you mean {hint}?)" if hint else "")
    elif first["type"] == "missing":
        line = f"{key}: required key is missing"
    elif first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        line = _tag_line(key, first, model)
    elif first["type"] == "value_error" and _KEYED.match(msg):
        line = _keyed(key if loc or prefix else "", msg)
    else:
        got = first.get("input")
        line = f"{key}: {msg} (got {_short(got)})" if not isinstance(got, dict) else f"{key}: {msg}"
    if len(errors) > 1:
        line += f" (and {len(errors) - 1} more)"
    line = _CREDENTIALS.sub(r"\1:***@", line)  # a URL's password never reaches a terminal or a log
    return line.replace("\r", "\\r").replace("\n", "\\n")  # one line, whatever the value holds


_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@'\"]*):[^@/\s'\"]+@")
"""The password of a URL's user info (`rtsp://user:secret@host`), hidden in a config error."""


_KEYED = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*: ")
"""A validator's message that starts with the key it is about: `host: ...` or `http.host: ...`."""


def _keyed(key: str, msg: str) -> str:
    """One prefix, not two: a message that names its key in full stays as it is (`http.host: ...`
    under `http`), one that names it from inside the mapping gets the mapping's path in front."""
    named = msg.split(": ", 1)[0]
    if not key or named == key or named.startswith(key + "."):
        return msg
    return f"{key}.{msg}"


def _tag_line(key: str, error: Any, model: type[BaseModel] | None) -> str:
    """A discriminated union's tag (an output's `kind`) that is missing or names no member: the tags
    there are, and the closest one, instead of pydantic's "Input tag 'json' found using 'kind'..."."""
    ctx = error.get("ctx") or {}
    tag_key = str(ctx.get("discriminator", "kind")).strip("'")
    tags = [t.strip(" '") for t in str(ctx["expected_tags"]).split(",")] if "expected_tags" in ctx else []
    if not tags and model is not None:
        tags = keys.tags_at(model, tuple(error["loc"]), tag_key)
    kinds = f"the kinds are {', '.join(tags)}" if tags else ""
    if error["type"] == "union_tag_not_found":
        return f"{key}.{tag_key}: required key is missing" + (f" ({kinds})" if kinds else "")
    hint = keys.suggest(str(ctx.get("tag")), tags)
    said = "; ".join(x for x in (f"did you mean {hint}?" if hint else "", kinds) if x)
    return f"{key}.{tag_key}: unknown {tag_key} {ctx.get('tag')!r}" + (f" ({said})" if said else "")


def _useful(errors: list[Any]) -> list[Any]:
    """A failing item also fails its list's length check; the item's own error is the useful one."""
    locs = [tuple(e["loc"]) for e in errors]
    return [e for e in errors if not any(len(o) > len(e["loc"]) and o[: len(e["loc"])] == tuple(e["loc"]) for o in locs)]


def _hint(error: Any, model: type[BaseModel] | None, also_known: Sequence[str]) -> str | None:
    loc = tuple(error["loc"])
    known = list(also_known) if len(loc) == 1 else []
    if model is not None:
        known += keys.known_keys(model, loc[:-1])
    return keys.suggest(str(loc[-1]), known)


# A task's parameters that name a file beside the model (a labels file): resolved like model.path.
_FILE_PARAMS = ("labels",)


def _files_found(params: Mapping[str, Any], find: Any) -> dict[str, Any]:
    """The file parameters of a model's (extra) keys, each resolved: the update for model_copy."""
    return {k: find(v) for k, v in params.items() if k in _FILE_PARAMS and isinstance(v, str)}


def _is_union_tag(loc: Sequence[object], i: int) -> bool:
    """Whether `loc[i]` names a union's member, not a key: pydantic's name for a member type
    (`function-after[...]`), or an output's kind right after its list index with a key after it
    (`outputs.0.mqtt.host`; a source's kind is no part of its errors' locations)."""
    from framewire.registry import OUTPUTS

    part = loc[i]
    if not isinstance(part, str):
        return False
    tagged = 0 < i < len(loc) - 1 and isinstance(loc[i - 1], int) and part in OUTPUTS
    return "[" in part or tagged


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Apply `a.b.0.c=value` to a raw config mapping. The value is parsed as YAML (`5`, `true`,
    `[1, 2]`), except for a key that takes text: there it is kept as typed (`12345`, `no`, a `#`),
    unless quoted; `null` clears a key that may be null."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key.path=value")
    key, _, text = item.partition("=")
    parts = [p for p in key.strip().split(".")]
    if not key.strip() or any(not p for p in parts):
        raise ConfigError(f"--set {item!r}: empty key in {key!r}")
    value = _override_value(key.strip(), parts, text)
    node: Any = raw
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            if not part.isdigit():
                raise ConfigError(f"--set {key}: {where!r} must be a list index")
            index = int(part)
            if index > len(node) or (index == len(node) and not last):
                raise ConfigError(_past_the_end(key, text, parts[: depth + 1], parts[depth + 1 :], len(node)))
            if index == len(node):
                node.append(value)  # a whole item, added at the end
            if last:
                node[index] = value
            else:
                if not isinstance(node[index], dict | list):
                    node[index] = {}
                node = node[index]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                child = node.get(part)
                if not isinstance(child, dict | list):
                    child = {}
                    node[part] = child
                node = child
        else:
            raise ConfigError(f"--set {key}: {where!r} is not a mapping or list")


def _past_the_end(key: str, text: str, at: list[str], rest: list[str], length: int) -> str:
    """One line for `--set sources.1.realtime=true` on a list of one: setting a key of an item that
    is not there would add a half-made item (then "sources.1.id: required key is missing"). An item is
    added whole, at the list's end; the line says how."""
    name = ".".join(at[:-1])
    items = f"{length} item" + ("" if length == 1 else "s")
    held = f" ({name}.0 to {name}.{length - 1})" if length > 1 else f" ({name}.0)" if length else ""
    example = [f"{k}: ..." for k in keys.required_keys(Config, at) if not rest or k != rest[0]]
    if len(rest) == 1:
        example.append(f"{rest[0]}: {text.strip() or '...'}")
    add = f"--set '{name}.{length}={{{', '.join(example) or '...'}}}'"
    past = f"{name} has {items}{held}, so {'.'.join(at)} is past its end"
    return f"--set {key}: {past}; to add one, give it whole: {add}"


def _override_value(key: str, parts: list[str], text: str) -> Any:
    is_text, nullable = keys.text_key(Config, parts)
    stripped = text.strip()
    if is_text:
        if nullable and stripped in ("null", "~"):
            return None
        quoted = len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in "'\""
        if not quoted:
            return text
    try:
        return yaml.safe_load(text) if stripped else ""
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"--set {key}: the value is not valid YAML: {problem} (quote text that holds {{}}, [] or ': ')") from None


def resolve_path(template: str, source_id: str) -> str:
    """An output path with `{source_id}` filled in."""
    return template.replace("{source_id}", source_id)


def resolve_inputs(config: Config, roots: Sequence[str | Path], config_file: str | Path | None = None) -> Config:
    """Relative input paths (`model.path`, `secondary.N.path`, file sources) that do not exist from
    the current folder but do under one of `roots` (the project), resolved there: the shipped configs
    then run from anywhere. Output paths stay relative to the current folder. A model file found
    nowhere is a ConfigError that names every place looked in (`config_file`'s folder is "beside the
    config") and a near name there."""

    def find(path: str) -> str:
        if "://" in path or Path(path).is_absolute() or Path(path).exists():
            return path
        for root in roots:
            candidate = Path(root) / path
            if candidate.exists():
                return str(candidate)
        return path

    def model_file(key: str, path: str) -> str:
        found = find(path)
        if "://" not in found and not Path(found).exists():
            raise ConfigError(missing_file(key, "model file", path, roots, config_file))
        return found

    sources = tuple(
        s.model_copy(update={"uri": find(s.uri), "audio": s.audio and s.audio.model_copy(update={"uri": find(s.audio.uri)})})
        if isinstance(s, SourceConfig) else s
        for s in config.sources
    )
    path = model_file("model.path", config.model.path)
    model = config.model.model_copy(update={"path": path, **_files_found(config.model.params, find)})
    secondary = tuple(
        s.model_copy(update={"path": model_file(f"secondary.{i}.path", s.path), **_files_found(s.params, find)})
        for i, s in enumerate(config.secondary)
    )
    # A step's model file (`model:` of audio_features, vad, region) resolves like model.path.
    steps = tuple(
        s.model_copy(update={"model": model_file(f"steps.{i}.model", s.params["model"])})
        if isinstance(s.params.get("model"), str) else s
        for i, s in enumerate(config.steps)
    )  # fmt: skip
    return config.model_copy(update={"sources": sources, "model": model, "secondary": secondary, "steps": steps})


def missing_file(
    key: str, what: str, path: str, roots: Sequence[str | Path] = (), config_file: str | Path | None = None
) -> str:
    """One line for an input file found nowhere: every place looked in, labelled where it is the
    working folder or the config's, and a near name in the same folder (`model.path: model file not
    found: a/m.onnx (looked in the working folder: /w/a/m.onnx; beside the config: /c/a/m.onnx); did
    you mean a/m2.onnx?`)."""
    beside = Path(config_file).resolve().parent if config_file is not None else None
    folders = [Path("/")] if Path(path).is_absolute() else [Path.cwd(), *(Path(r).resolve() for r in roots)]
    places: dict[Path, list[str]] = {}
    for folder in folders:
        labels = places.setdefault(Path(os.path.normpath(folder / path)), [])
        labels += [label for label, at in (("the working folder", Path.cwd()), ("beside the config", beside))
                   if folder == at and label not in labels]  # fmt: skip
    looked = "; ".join(" and ".join(labels) + ": " * bool(labels) + str(where) for where, labels in places.items())
    near = _near_name(Path(path), list(places))
    where = "" if Path(path).is_absolute() else f" (looked in {looked})"
    return f"{key}: {what} not found: {path}{where}" + (f"; did you mean {near}?" if near else "")


def _near_name(path: Path, candidates: Sequence[Path]) -> str | None:
    """The closest file name in the folder of the first candidate whose folder exists, written as
    the path was (its folder as typed, the near name)."""
    for candidate in candidates:
        if candidate.parent.is_dir():
            names = sorted(p.name for p in candidate.parent.iterdir() if p.is_file())
            close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.6)
            if close:
                return str(path.parent / close[0]) if str(path.parent) != "." else close[0]
    return None
