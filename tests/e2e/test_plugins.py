"""A plug-in package, installed as a user would (pip, into a folder on PYTHONPATH), gives a config a
task, an output and a source without editing framewire; two distributions naming one output, and an
unknown name, are one-line config errors (exit 2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "tests" / "support" / "plugin"
FRAMES, STEP = 12, 20


def _pip_install(source: Path, target: Path) -> None:
    """`pip install --no-deps --target` from a copy (a build writes into its source folder)."""
    build = target.parent / f"src-{source.name}-{target.name}"
    shutil.copytree(source, build, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(build)],
        check=True, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("plugin") / "site"
    _pip_install(PLUGIN, target)
    return target


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """x [1, 3, 8, 8] -> mean [1]: what the plug-in's brightness task feeds and reads."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("ReduceMean", ["x"], ["mean"], axes=[1, 2, 3], keepdims=0)
    graph = helper.make_graph(
        [node], "brightness",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("mean", TensorProto.FLOAT, [1])],
    )  # fmt: skip
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(proto)
    path = tmp_path_factory.mktemp("model") / "brightness.onnx"
    onnx.save(proto, str(path))
    return path


def _config(folder: Path, model: Path, output_kind: str = "csv") -> Path:
    path = folder / "plugin.yaml"
    path.write_text(
        f"""
sources:
  - id: pat
    kind: pattern
    frames: {FRAMES}
    step: {STEP}
model:
  path: {model}
  task: brightness
  scale: 1.0
engine:
  backend: onnxruntime
  providers: [cpu]
outputs:
  - kind: {output_kind}
    path: {folder}/{{source_id}}.csv
"""
    )
    return path


def _cli(folder: Path, *args: str, path: list[Path]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in path), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "framewire.cli", *args], cwd=folder, env=env, capture_output=True, text=True,
        timeout=180, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_job_runs_on_a_plugins_task_output_and_source(tmp_path: Path, plugin_dir: Path, model: Path) -> None:
    config = _config(tmp_path, model)
    checked = _cli(tmp_path, "validate", "-c", str(config), path=[plugin_dir])
    assert checked.returncode == 0, checked.stderr
    assert "task brightness" in checked.stdout
    done = _cli(tmp_path, "run", "-c", str(config), "--no-progress", path=[plugin_dir])
    assert done.returncode == 0, done.stderr
    assert f"pat: {FRAMES} frames" in done.stderr
    lines = (tmp_path / "pat.csv").read_text().splitlines()
    assert lines[0] == "source,seq,brightness"
    expected = [f"pat,{i},{round((i * STEP) % 256 / 255.0, 4)}" for i in range(FRAMES)]
    assert lines[1:] == expected


def test_without_the_plugin_the_kind_is_unknown(tmp_path: Path, model: Path) -> None:
    done = _cli(tmp_path, "validate", "-c", str(_config(tmp_path, model)), path=[])
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "\n" not in line
    assert "plugin.yaml: sources.0.kind: unknown source 'pattern' (one of camera, file, stream, zmq)" in line


def test_an_unknown_output_names_the_ones_there_are(tmp_path: Path, plugin_dir: Path, model: Path) -> None:
    done = _cli(tmp_path, "validate", "-c", str(_config(tmp_path, model, "cvs")), path=[plugin_dir])
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "\n" not in line
    assert line.endswith("outputs.0.kind: unknown output 'cvs' (one of csv, hls, jsonl, kafka, mqtt, push, recording, video_file, webhook, zmq; did you mean csv?)")


def test_a_plugins_keys_are_validated_like_a_builtins(tmp_path: Path, plugin_dir: Path, model: Path) -> None:
    config = _config(tmp_path, model)
    config.write_text(config.read_text().replace(".csv\n", ".txt\n").replace("step: 20", "stpe: 20"))
    done = _cli(tmp_path, "validate", "-c", str(config), path=[plugin_dir])
    assert done.returncode == 2
    assert "sources.0.stpe: unknown key (did you mean step?)" in done.stderr


def test_two_distributions_naming_one_output_are_refused(tmp_path: Path, plugin_dir: Path, model: Path) -> None:
    twin = tmp_path / "twin"
    shutil.copytree(PLUGIN, twin, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    text = (twin / "pyproject.toml").read_text().replace('name = "framewire-example-plugin"', 'name = "framewire-twin-plugin"')
    (twin / "pyproject.toml").write_text(text)
    shutil.move(twin / "framewire_example_plugin", twin / "framewire_twin_plugin")
    (twin / "pyproject.toml").write_text(text.replace("framewire_example_plugin", "framewire_twin_plugin"))
    twin_dir = tmp_path / "twin-site"
    _pip_install(twin, twin_dir)
    done = _cli(tmp_path, "validate", "-c", str(_config(tmp_path, model)), path=[plugin_dir, twin_dir])
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "\n" not in line
    assert "'pattern' is registered twice in framewire.sources" in line
    assert "framewire-example-plugin (framewire_example_plugin.pattern:PatternSource)" in line
    assert "framewire-twin-plugin (framewire_twin_plugin.pattern:PatternSource)" in line
