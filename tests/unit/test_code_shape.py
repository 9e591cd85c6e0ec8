"""The runtime stays readable (issue 9): no module of pipeline/ over 450 lines, no function of the
runtime, the composition root, the stages, engines, sources or media over 60 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
FUNCTION_PACKAGES = ("framewire", "pipeline", "stages", "engines")


def test_no_runtime_module_is_too_long_to_read() -> None:
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "pipeline").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}  # fmt: skip
    assert not long, f"over {MAX_MODULE_LINES} lines: {long}"


@pytest.mark.parametrize("package", FUNCTION_PACKAGES)
def test_no_function_is_too_long_to_read(package: str) -> None:
    long: dict[str, int] = {}
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert not long, f"over {MAX_FUNCTION_LINES} lines: {long}"
