"""framewire installs as one package and embeds in a program that has packages of the generic names
framewire's folders have (`app`, `pipeline`, `sources`, `stages`, `engines`, `media`).

The wheel is built from the checkout (setuptools' package-dir maps pipeline/, stages/ and engines/ to
framewire.pipeline, .stages and .engines). A working editable install proves nothing about the wheel
(a folder left out of `packages` imports from a checkout and is missing from the wheel), so its file
list is checked against the checkout, and the embedding program runs on the wheel alone: `python -S`
skips the site hooks (the checkout's editable link tree among them) and PYTHONPATH holds the wheel's
install, the program's folder and the venv's packages for the dependencies, in that order.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.e2e.helpers import ROOT, VIDEOS

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

MAPPED = {"framewire": ROOT / "framewire", "framewire/pipeline": ROOT / "pipeline",
          "framewire/stages": ROOT / "stages", "framewire/engines": ROOT / "engines"}  # fmt: skip
USER_PACKAGES = ("app", "pipeline", "sources", "stages", "engines", "media")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of the checkout's files as a fresh clone has them (tracked, or new and not ignored):
    setuptools builds through build/lib and keeps what an earlier build left there, such as a module
    since moved, so the checkout's own build/ would hide a stale file or add one."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True, timeout=60).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_file() and not name.startswith(("assets/", "tests/", "docs/", "bench/")):
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--verbose", "--no-deps", "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (out / "build.log").write_text(built.stdout + built.stderr)  # the backend's own lines (--verbose)
    (found,) = out.glob("framewire-*.whl")
    return found


def checkout_files() -> set[str]:
    """Every module and typed marker of the checkout, at the path it must have in the wheel."""
    files = set()
    for prefix, folder in MAPPED.items():
        for path in folder.rglob("*"):
            if path.suffix in (".py", ".typed") and "__pycache__" not in path.parts:
                inner = path.relative_to(folder)
                if prefix == "framewire" and inner.parts[0] in ("pipeline", "stages", "engines"):
                    continue
                files.add(f"{prefix}/{inner.as_posix()}")
    return files


def test_the_wheel_holds_one_top_level_package_and_every_module(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"framewire"}
    shipped = {name for name in names if name.endswith((".py", ".typed"))}
    assert shipped == checkout_files()
    dist_info = next(top for top in tops if top.endswith(".dist-info"))
    entry_points = zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    assert "framewire = framewire.cli:main" in entry_points
    top_level = [name for name in names if name.endswith("top_level.txt")]
    if top_level:
        assert zipfile.ZipFile(wheel).read(top_level[0]).decode().split() == ["framewire"]



def test_the_wheel_holds_the_web_consoles_files(wheel: Path) -> None:
    """The console's page is package data: no build step, nothing fetched at run time."""
    names = set(zipfile.ZipFile(wheel).namelist())
    static = {f"framewire/pipeline/ops/static/{name}" for name in ("index.html", "console.js", "console.css", "favicon.svg")}
    assert static <= names

def test_the_build_says_nothing_about_packages_left_out(wheel: Path) -> None:
    """Issue 39: the console's static/ folder was package data of framewire.pipeline.ops, and every
    build (a fresh editable install too) printed setuptools' "Package 'framewire.pipeline.ops.static'
    is absent from the `packages` configuration", about 40 lines of it."""
    log = (wheel.parent / "build.log").read_text()
    assert "building wheel" in log.lower()  # the backend's output is there to be read
    assert "is absent from the `packages` configuration" not in log


def test_the_wheel_holds_the_openvino_accuracy_gate(wheel: Path) -> None:
    """The precisions each shipped model passed are package data: `precision: auto` reads them."""
    assert "framewire/engines/openvino_gate.json" in set(zipfile.ZipFile(wheel).namelist())


def user_project(tmp: Path, clip: Path, out: Path) -> Path:
    """A program with packages of its own named like framewire's folders, importing them first."""
    project = tmp / "project"
    for name in USER_PACKAGES:
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text(f"OWNER = 'the user'\nNAME = {name!r}\n")
    (project / "app" / "plan.py").write_text("def build_plan():\n    return 'the user plan'\n")
    model = ROOT / "assets" / "models" / "yunet" / "face_detection_yunet_2023mar.onnx"
    (project / "job.yaml").write_text(textwrap.dedent(f"""\
        sources:
          - id: clip
            uri: {clip}
        model:
          path: {model}
          task: face_detection
        outputs:
          - kind: jsonl
            path: {out}/{{source_id}}.jsonl
        """))
    (project / "main.py").write_text(textwrap.dedent("""\
        import app, app.plan, engines, media, pipeline, sources, stages
        from framewire import FrameRecord, Pipeline

        if __name__ == "__main__":
            seqs = []
            report = Pipeline("job.yaml").run(lambda m: seqs.append(m.seq) if isinstance(m, FrameRecord) else None)
            import framewire
            mine = [m.OWNER for m in (app, engines, media, pipeline, sources, stages)]
            print(report.exit_code, report.frames["clip"], seqs == sorted(seqs), len(seqs), app.plan.build_plan())
            print(set(mine), framewire.__file__)
        """))
    return project


def test_a_program_with_packages_named_like_framewires_folders_embeds_it(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "installed"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert {p.name for p in target.iterdir() if not p.name.endswith(".dist-info") and p.name != "bin"} == {"framewire"}
    project = user_project(tmp_path, VIDEOS / "carphone_pristine.mp4", tmp_path / "out")
    path = [str(target), str(project), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    done = subprocess.run(
        [sys.executable, "-S", "main.py"], cwd=project, capture_output=True, text=True, timeout=240,
        env={"PYTHONPATH": ":".join(path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    first, second = done.stdout.splitlines()[-2:]
    assert first == "0 120 True 120 the user plan", done.stdout
    assert second == f"{{'the user'}} {target / 'framewire' / '__init__.py'}"
