"""The product stays readable (issues 9 and 38): no module of the runtime, the composition root, the
stages, engines, sources or media, or of the benchmarks (bench/), over 450 lines, and no function of
the first over 60."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
PACKAGES = ("framewire", "pipeline", "stages", "engines")
PRODUCT = (*PACKAGES, "bench")
"""Every folder of product code: the benchmarks (the `bench` command) are read and changed too."""


@pytest.mark.parametrize("package", PRODUCT)
def test_no_module_is_too_long_to_read(package: str) -> None:
    long: dict[str, int] = {}
    for path in (ROOT / package).rglob("*.py"):
        name = str(path.relative_to(ROOT))
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            long[name] = lines
    assert not long, f"over {MAX_MODULE_LINES} lines: {long}"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_too_long_to_read(package: str) -> None:
    long: dict[str, int] = {}
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert not long, f"over {MAX_FUNCTION_LINES} lines: {long}"


BARE = {"app", "pipeline", "stages", "engines", "sources", "media", "run_pipeline"}
"""The folders' own names: from a checkout's root they would import a second copy of the runtime
(two registries, isinstance failures); everything is imported as framewire.* (pyproject's ruff
banned-api says the same to an editor)."""


def test_nothing_imports_a_folder_by_its_bare_name() -> None:
    found = []
    for folder in ("framewire", "pipeline", "stages", "engines", "bench", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                found += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in BARE
                ]
    assert not found, f"import framewire.<name> instead: {found}"
