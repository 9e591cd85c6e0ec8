"""The API surface the engines and their fakes rely on, and how to compare it with a real module.

A surface is a mapping `dotted.path -> fact`, where a fact says what the path is: a `value` (an enum
member or constant, with its integer), a `callable` (with its parameter lists: one per pybind11
overload), a `property`, a `class` or an `enum`. The same `describe` runs on the fakes in the test
process and on the real modules in a subprocess (`probe.py`), so both sides are read the same way.
"""

from __future__ import annotations

import ast
import enum
import inspect
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

Fact = dict[str, Any]

CONSTRUCTED = {"Builder", "Runtime", "OnnxParser", "Logger", "ILogger", "IInt8EntropyCalibrator2"}
"""TensorRT classes framewire constructs (or subclasses): their `__init__` parameters count too."""


def _resolve(root: Any, path: str) -> tuple[bool, Any, Any]:
    """(exists, the object, the static attribute of its owner class) for `root.path`."""
    owner: Any = None
    obj = root
    for part in path.split("."):
        static = inspect.getattr_static(obj, part, _MISSING) if isinstance(obj, type) else _MISSING
        try:
            value = getattr(obj, part)
        except AttributeError:
            return False, None, None
        owner, obj = static, value
    return True, obj, owner


_MISSING = object()


def describe(root: Any, path: str) -> Fact:
    """What `root.path` is, as plain data (JSON-able)."""
    exists, obj, static = _resolve(root, path)
    if not exists:
        return {"exists": False}
    if isinstance(static, property) or type(static).__name__ in ("property", "getset_descriptor"):
        return {"exists": True, "kind": "property"}
    if isinstance(obj, type):
        is_enum = issubclass(obj, enum.Enum) or hasattr(obj, "__members__")
        return {"exists": True, "kind": "enum" if is_enum else "class"}
    pybind_member = hasattr(type(obj), "__members__") and hasattr(obj, "value")  # a pybind11 enum member
    if (isinstance(obj, (int, enum.Enum)) or pybind_member) and not isinstance(obj, bool):
        try:
            return {"exists": True, "kind": "value", "value": int(obj)}
        except (TypeError, ValueError):
            return {"exists": True, "kind": "value", "value": None}
    if callable(obj):
        return {"exists": True, "kind": "callable", "params": parameter_lists(obj, path.rsplit(".", 1)[-1])}
    return {"exists": True, "kind": "other"}


def parameter_lists(function: Any, name: str) -> list[list[str]]:
    """The parameter names (no `self`) of each way `function` can be called: its signature, or for
    pybind11 functions the signatures in the docstring (one per overload). A parameter with a
    default is written `name=`."""
    lists: list[list[str]] = []
    doc = inspect.getdoc(function) or ""
    pattern = re.compile(rf"^\s*(?:\d+\.\s+)?{re.escape(name)}\((.*)\)\s*->", re.MULTILINE)
    for match in pattern.finditer(doc):
        names = [_param_name(part) for part in _split_top_level(match.group(1))]
        names = [n for n in names if n and n != "self" and not n.startswith("*")]
        if names not in lists:
            lists.append(names)
    if lists:
        return lists
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return []
    names = [
        f"{p.name}=" if p.default is not p.empty else p.name
        for p in signature.parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self"
    ]
    return [names]


def callable_as(fake: list[str], real: list[str]) -> bool:
    """Whether a call that fits the fake's parameters fits this real parameter list: the same names
    in the same order, and whatever the real one has beyond them has a default."""
    names = [n.rstrip("=") for n in fake]
    return [n.rstrip("=") for n in real[: len(names)]] == names and all(n.endswith("=") for n in real[len(names) :])


def _param_name(text: str) -> str:
    name = text.split(":", 1)[0].split("=", 1)[0].strip()
    return f"{name}=" if "=" in text else name


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char in "[(<{":
            depth += 1
        elif char in "])>}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return parts


# --- the surfaces of the fakes -------------------------------------------------------------------


def _class_paths(prefix: str, cls: type) -> list[str]:
    """Public methods, properties, nested classes and enum members a fake class defines (its data
    attributes are the fake's own bookkeeping, not API)."""
    paths: list[str] = []
    if issubclass(cls, enum.Enum):
        return [f"{prefix}.{member}" for member in cls.__members__]
    for klass in cls.__mro__:
        if klass is object or klass.__module__ != cls.__module__:
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") and not (name == "__init__" and cls.__name__ in CONSTRUCTED):
                continue
            if name == "__init__" and prefix.split(".")[-1] not in CONSTRUCTED:
                continue
            if isinstance(value, (property, staticmethod, classmethod)) or inspect.isfunction(value):
                paths.append(f"{prefix}.{name}")
            elif isinstance(value, type):
                paths.append(f"{prefix}.{name}")
                paths.extend(_class_paths(f"{prefix}.{name}", value))
            elif isinstance(value, enum.Enum):
                paths.append(f"{prefix}.{name}")
    return sorted(set(paths))


def fake_tensorrt_paths(module: Any) -> list[str]:
    """Every path of a FakeTensorRT module that mirrors the real API."""
    paths: list[str] = []
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        paths.append(name)
        if isinstance(value, type):
            paths.extend(_class_paths(name, value))
    return sorted(set(paths))


def fake_cuda_paths(runtime: Any) -> list[str]:
    """Every `cuda...` name of a FakeCudaRuntime (functions, enums and their members, constants)."""
    paths: list[str] = []
    for name in dir(type(runtime)):
        if not name.startswith("cuda"):
            continue
        paths.append(name)
        value = getattr(type(runtime), name)
        if isinstance(value, type) and issubclass(value, enum.Enum):
            paths.extend(f"{name}.{member}" for member in value.__members__)
    paths.append("cudaDeviceProp.name")  # an attribute of the struct the code reads
    return sorted(set(paths))


# --- what the code itself uses -----------------------------------------------------------------


def code_paths(files: Iterable[Path] | None = None) -> dict[str, set[str]]:
    """Attribute chains the engines read from `trt` (the tensorrt module) and from `rt` (cuda-python's
    runtime), and the names of cuda functions and error codes spelled as strings (`call("cudaMalloc")`,
    `getattr(rt, name)`, `cudaSuccess`)."""
    found: dict[str, set[str]] = {"tensorrt": set(), "cuda": set(), "cuda_names": set()}
    for file in files or sorted((ROOT / "engines").glob("*.py")):
        tree = ast.parse(file.read_text(), str(file))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and not isinstance(getattr(node, "_parent_attr", None), ast.Attribute):
                chain = _chain(node)
                if chain and chain[0] in ("trt", "rt") and len(chain) > 1:
                    found["tensorrt" if chain[0] == "trt" else "cuda"].add(".".join(chain[1:]))
            # cuda functions named by a string: call("cudaMalloc", ...), getattr(rt, name) over a tuple
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and CUDA_NAME.match(node.value):
                found["cuda_names"].add(node.value)
            for child in ast.iter_child_nodes(node):
                child._parent_attr = node  # type: ignore[attr-defined]
    # Keep the longest chains only: `BuilderFlag.FP16` covers `BuilderFlag`.
    for key, chains in found.items():
        found[key] = {c for c in chains if not any(o != c and o.startswith(c + ".") for o in chains)}
    return found


CUDA_NAME = re.compile(r"^cuda[A-Z][A-Za-z]+$")


def _chain(node: ast.Attribute) -> list[str]:
    parts: list[str] = []
    current: ast.AST = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if isinstance(current, ast.Name):
        parts.append(current.id)
        return list(reversed(parts))
    return []


# --- comparing -----------------------------------------------------------------------------------


def mismatches(fake: Mapping[str, Fact], real: Mapping[str, Fact]) -> list[str]:
    """One line per path where the fake promises something the real module does not have."""
    problems: list[str] = []
    for path, expected in sorted(fake.items()):
        if not expected.get("exists"):
            continue
        found = real.get(path, {"exists": False})
        if not found.get("exists"):
            problems.append(f"{path}: missing")
            continue
        kind = expected["kind"]
        if kind == "value" and found.get("value") != expected.get("value"):
            problems.append(f"{path}: value {found.get('value')}, the fake says {expected.get('value')}")
        elif kind == "property" and found["kind"] != "property":
            problems.append(f"{path}: a {found['kind']}, the fake has a property")
        elif kind in ("class", "enum") and found["kind"] not in ("class", "enum"):
            problems.append(f"{path}: a {found['kind']}, the fake has a class")
        elif kind == "callable":
            if found["kind"] not in ("callable", "class"):
                problems.append(f"{path}: a {found['kind']}, the fake has a callable")
            elif found.get("params") and not any(callable_as(expected["params"][0], r) for r in found["params"]):
                problems.append(f"{path}: parameters {found['params']}, the fake has {expected['params'][0]}")
    return problems
