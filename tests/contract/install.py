"""The real packages the contract tests check, installed by the tests themselves, once.

- TensorRT: the `tensorrt-cuXX-bindings` wheels (about 1.3 MB: the Python module, whose shared
  object links libnvinfer, libnvinfer_plugin and libnvonnxparser). The `tensorrt-cuXX-libs` wheels
  that hold those libraries are placeholders that download them from NVIDIA at install time, which
  CI cannot do; so the libraries are replaced by a stub compiled here from `STUB_SOURCE`, which
  exports the nine C entry points the bindings link (every factory returns NULL, as TensorRT's do
  when CUDA cannot start). With it the real module imports, and every name, enum value and
  signature in it is real.
- cuda-python: the `cuda-bindings` wheel (and what it needs), which imports and answers without a
  driver or a GPU.

Everything goes under `.venv/contract/` (ignored by git; `FRAMEWIRE_CONTRACT_CACHE` moves it), one
folder per package and version, with pip's own cache beside it: after the first run nothing is
downloaded. An install that fails fails the test, with pip's last line: the contract is what keeps
the GPU code honest without a GPU, so it must not quietly stop being checked. A developer who is
offline on purpose can set FRAMEWIRE_SKIP_CONTRACT=1.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

STUB_SOURCE = r"""
/* Stand-ins for TensorRT's libraries, so that the real Python bindings import without them.
 * The bindings link exactly these symbols (nm -D --undefined-only tensorrt.so, TensorRT 10.16 and
 * 11.4). Every factory returns NULL, which is what TensorRT returns when CUDA cannot start. */
#include <stddef.h>
void *createInferBuilder_INTERNAL(void *logger, int version) { return NULL; }
void *createInferRefitter_INTERNAL(void *engine, void *logger, int version) { return NULL; }
void *createInferRuntime_INTERNAL(void *logger, int version) { return NULL; }
void *createNvOnnxParser_INTERNAL(void *network, void *logger, int version) { return NULL; }
void *createNvOnnxParserRefitter_INTERNAL(void *refitter, void *logger, int version) { return NULL; }
void *getBuilderPluginRegistry(int capability) { return NULL; }
void *getPluginRegistry(void) { return NULL; }
int getNvOnnxParserVersion(void) { return 0; }
int initLibNvInferPlugins(void *logger, const char *name_space) { return 0; }
"""

STUB_LIBRARIES = ("nvinfer", "nvinfer_plugin", "nvonnxparser")


def cache_dir() -> Path:
    return Path(os.environ.get("FRAMEWIRE_CONTRACT_CACHE") or ROOT / ".venv" / "contract")


def _unavailable(reason: str) -> None:
    if os.environ.get("FRAMEWIRE_SKIP_CONTRACT") == "1":
        pytest.skip(f"contract: {reason} (FRAMEWIRE_SKIP_CONTRACT=1)")
    pytest.fail(f"contract: {reason}", pytrace=False)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Several pytest processes (or sessions) installing at once install once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def ensure_package(requirement: str, *, deps: bool) -> Path:
    """`requirement` (name==version) installed into a folder of its own; returns the folder."""
    target = cache_dir() / requirement.replace("==", "-")
    done = target / ".complete"
    if done.is_file():
        return target
    with _locked(cache_dir() / ".lock"):
        if done.is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "--only-binary=:all:",
            "--cache-dir",
            str(cache_dir() / "pip-cache"),
            "--target",
            str(target),
            requirement,
        ]
        if not deps:
            command.insert(4, "--no-deps")
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            _unavailable(f"installing {requirement} took more than 600 s")
        if result.returncode != 0:
            lines = [line for line in result.stderr.splitlines() if line.strip() and "Location" not in line]
            _unavailable(f"cannot install {requirement}: {lines[-1] if lines else result.returncode}")
        done.write_text(requirement)
    return target


def stub_libraries(major: int) -> Path:
    """libnvinfer.so.N, libnvinfer_plugin.so.N and libnvonnxparser.so.N stubs for TensorRT `major`."""
    folder = cache_dir() / f"stub-tensorrt{major}"
    if all((folder / f"lib{name}.so.{major}").is_file() for name in STUB_LIBRARIES):
        return folder
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        _unavailable("no C compiler (cc or gcc) to build the TensorRT library stubs")
    with _locked(cache_dir() / ".lock"):
        folder.mkdir(parents=True, exist_ok=True)
        source = folder / "stub.c"
        source.write_text(STUB_SOURCE)
        for name in STUB_LIBRARIES:
            soname = f"lib{name}.so.{major}"
            result = subprocess.run(
                [compiler, "-shared", "-fPIC", "-O0", f"-Wl,-soname,{soname}", "-o", str(folder / soname), str(source)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if result.returncode != 0:
                _unavailable(f"cannot build {soname}: {result.stderr.strip().splitlines()[-1:]}")
    return folder


def probe(kind: str, paths: list[str], *, pythonpath: Path, libraries: Path | None = None) -> dict:
    """Run probe.py against the real module installed in `pythonpath`."""
    import json

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), str(ROOT)])
    if libraries is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libraries), env.get("LD_LIBRARY_PATH")]))
    result = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("probe.py")), kind],
        input=json.dumps(paths),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    if result.returncode != 0:
        pytest.fail(f"contract probe of {kind} failed:\n{result.stderr[-3000:]}", pytrace=False)
    return json.loads(result.stdout)  # type: ignore[no-any-return]
