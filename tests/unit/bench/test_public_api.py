"""bench/ uses framewire as a user would (issue 21): `framewire` and `framewire.components` only, plus
the few internals a benchmark measures or shares on purpose, each listed here with its reason and kept
in one place in its module (docs/benchmarks.md, "What the benchmarks import")."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import framewire
import framewire.components

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench"

PUBLIC: dict[str, set[str]] = {
    "framewire": set(framewire.__all__),
    "framewire.components": set(framewire.components.__all__),
    "framewire.cli": {"main"},  # `python -m bench` is the `bench` command
}
"""The modules bench may import from, and the names each one offers."""

EXCEPTIONS: dict[tuple[str, str], str] = {
    ("transport_hub.py", "framewire.pipeline.plan"): "measures the hub: a Plan with a stage that does nothing",
    ("transport_hub.py", "framewire.pipeline.run.supervisor"): "measures the hub: runs that Plan's Supervisor",
    ("transport_hops.py", "framewire.pipeline.wire"): "measures the hub's wire: its message encoding",
    ("transport_hops.py", "framewire.pipeline.wire.framepool"): "measures the hub's wire: the frame pool",
    ("transport_hops.py", "framewire.engines"): "measures the hop from a pool slot to the GPU (`cuda`)",
    ("lipsync.py", "framewire.pipeline.wire.audioring"): "its loop feeds the audio steps through the daemon's audio ring",
    ("console.py", "framewire.pipeline.ops.preview"): "measures the console's previews on the hub's side",
    ("console.py", "framewire.pipeline.wire.framepool"): "measures the previews' hand-over from a frame-pool slot",
    ("console.py", "framewire.media.jpeg"): "measures the daemon's own preview encoder",
    ("http_server.py", "framewire.pipeline.ops.control"): "measures the daemon's HTTP server alone (bench http)",
    ("http_server.py", "framewire.pipeline.ops.console"): "the server's console, which the viewers load",
    ("http_server.py", "framewire.pipeline.ops.live"): "the console's live figures, published as the hub does",
    ("http_server.py", "framewire.pipeline.ops.metrics"): "the server's /metrics",
    ("http_server.py", "framewire.pipeline.ops.preview"): "real previews for the viewers' long polls",
    ("http_server.py", "framewire.pipeline.wire.framepool"): "the frame-pool slot the previews are copied from",
    ("http_server.py", "framewire.media.jpeg"): "the daemon's own preview encoder",
    ("engine.py", "framewire.engines"): "reads GPU memory through the backend's own cuda-python binding (`cuda`)",
    ("recording.py", "framewire.sources.packets"): "measures the decode worker's packet tap itself",
    ("recording.py", "framewire.media.clips"): "measures the clip output's ring of packets",
    ("recording.py", "framewire.media.segments"): "the passthrough recording's retention, as the tap takes it",
    ("recording.py", "framewire.pipeline.wire.packets"): "measures the clips' socket, both ends",
    ("cli.py", "framewire.app.commands"): "CLI glue: the same --config and --set flags as every command",
    ("accuracy.py", "framewire.app.commands"): "CLI glue: the same tolerance flags as `framewire accuracy`",
}
"""(bench module, framewire module): why that benchmark imports an internal."""


@dataclass(frozen=True)
class Found:
    """One import of a framewire module: where, what, and the statement list that holds it."""

    file: str
    line: int
    module: str
    names: tuple[str, ...]
    block: int  # id of the statement list it sits in
    index: int  # its place in that list


def framewire_imports(file: str, source: str) -> list[Found]:
    """Every `import framewire...` and `from framewire... import` in `source`, at any depth."""
    found: list[Found] = []
    for node in ast.walk(ast.parse(source)):
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for index, stmt in enumerate(block):
                if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and _ours(stmt.module or ""):
                    names = tuple(alias.name for alias in stmt.names)
                    found.append(Found(file, stmt.lineno, stmt.module or "", names, id(block), index))
                elif isinstance(stmt, ast.Import):
                    found += [Found(file, stmt.lineno, alias.name, (), id(block), index)
                              for alias in stmt.names if _ours(alias.name)]  # fmt: skip
    return found


def _ours(module: str) -> bool:
    return module == "framewire" or module.startswith("framewire.")


def problems(file: str, source: str) -> list[str]:
    """What breaks the rule in one bench module: a framewire import outside the public set, a name the
    public module does not export, or the module's listed internals spread over several places."""
    out: list[str] = []
    internal: list[Found] = []
    for item in framewire_imports(file, source):
        if (file, item.module) in EXCEPTIONS:
            internal.append(item)
        elif item.module not in PUBLIC:
            out.append(f"bench/{file}:{item.line}: imports {item.module}, not framewire's public API")
        else:
            out += [f"bench/{file}:{item.line}: {item.module} has no public {name!r}"
                    for name in item.names if name not in PUBLIC[item.module]]  # fmt: skip
    out += [f"bench/{file}:{line}: framewire has no public {name!r}" for line, name in _attributes(source)
            if name not in PUBLIC["framewire"] | {"components"}]  # fmt: skip
    blocks = {item.block for item in internal}
    places = sorted(item.index for item in internal)
    if len(blocks) > 1 or (places and places[-1] - places[0] >= len(places)):
        lines = ", ".join(str(item.line) for item in internal)
        out.append(f"bench/{file}: its internal imports are in several places (lines {lines}): keep them in one")
    return out


def _attributes(source: str) -> list[tuple[int, str]]:
    """Each `framewire.<name>` read from the module `import framewire` binds: (line, name)."""
    return [(node.lineno, node.attr) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "framewire"]  # fmt: skip


def _bench_files() -> list[Path]:
    return sorted(BENCH.glob("*.py"))


@pytest.mark.parametrize("path", _bench_files(), ids=lambda p: p.name)
def test_bench_imports_only_the_public_api(path: Path) -> None:
    assert problems(path.name, path.read_text()) == []


def test_every_exception_is_still_needed() -> None:
    used = {(path.name, item.module) for path in _bench_files()
            for item in framewire_imports(path.name, path.read_text())}  # fmt: skip
    assert set(EXCEPTIONS) - used == set()


def test_the_exceptions_are_documented() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    for file, module in EXCEPTIONS:
        assert f"`bench/{file}`" in text and f"`{module}`" in text, (file, module)


def test_the_check_fails_on_an_internal_import() -> None:
    source = "def f():\n    from framewire.app.compose import build_task\n"
    assert problems("loop.py", source) == [
        "bench/loop.py:2: imports framewire.app.compose, not framewire's public API"
    ]
    assert problems("loop.py", "import framewire.stages.detections\n") == [
        "bench/loop.py:1: imports framewire.stages.detections, not framewire's public API"
    ]
    assert problems("loop.py", "from framewire.components import build_task\n") == [
        "bench/loop.py:1: framewire.components has no public 'build_task'"
    ]
    assert problems("loop.py", "import framewire\nframewire.start\nframewire.registry.TASKS\n") == [
        "bench/loop.py:3: framewire has no public 'registry'"
    ]
    assert problems("lipsync.py", "from framewire.pipeline.wire.audioring import AudioRing\n") == []


def test_the_check_fails_on_internals_in_several_places() -> None:
    source = (
        "from framewire.pipeline.wire import messages\n"
        "import os\n"
        "from framewire.pipeline.wire.framepool import FramePool\n"
    )
    assert problems("transport_hops.py", source) == [
        "bench/transport_hops.py: its internal imports are in several places (lines 1, 3): keep them in one"
    ]


def test_every_component_resolves_and_says_what_it_is() -> None:
    for name in framewire.components.__all__:
        value = getattr(framewire.components, name)
        if callable(value):
            assert (value.__doc__ or "").strip(), name


def test_the_components_load_lazily() -> None:
    code = (
        "import sys, framewire.components as c\n"
        "assert 'cv2' not in sys.modules and 'framewire.app.compose' not in sys.modules\n"
        "c.Frame\n"
        "assert 'cv2' not in sys.modules, 'Frame pulled OpenCV'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_the_guides_components_example_runs_as_written() -> None:
    """docs/guides/python.md's loop of one's own: the default job's face detector, one face a frame."""
    text = (ROOT / "docs" / "guides" / "python.md").read_text()
    code = text.split("<!-- components example -->\n```python\n", 1)[1].split("```", 1)[0]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.splitlines() == [f"{seq} 1 faces" for seq in range(5)]
