"""A real Triton Inference Server started by a test (or the benchmark): pytriton's tritonserver in a
venv of its own (tests.support.components.triton_venv), serving ONNX models through
tests/support/triton_server.py on ports the caller picks, protected by a known access token.

`TritonServer.kill()` SIGKILLs the whole process group (pytriton's Python, tritonserver and its
backend stubs) and removes the /dev/shm files a killed pytriton leaves behind; `start()` again serves
on the same ports, as a restarted server would.
"""

from __future__ import annotations

import functools
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.components import triton_venv
from tests.support.ports import free_port

SERVER = Path(__file__).with_name("triton_server.py")
TOKEN_HEADER = "triton-grpc-protocol-triton-access-token"
FAILED = "Triton Inference Server exited with failure"
"""What pytriton logs when tritonserver could not start (it then waits instead of exiting)."""


@functools.lru_cache(maxsize=1)
def _libdir(python: str) -> str:
    """The folder of libpython that Triton's Python backend stub links against."""
    done = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return done.stdout.strip()


class ServerExited(RuntimeError):
    """The server process ended while it was starting (its log's tail in the message)."""


class TritonServer:
    """One Triton serving `models` ({name: path of an .onnx}); `url` is its gRPC address."""

    def __init__(
        self,
        models: Mapping[str, str | Path],
        *,
        max_batch: int = 8,
        delay_us: int = 2000,
        instances: int = 1,
        threads: int = 1,
        token: str = "framewire-test-token",
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        self.models = {name: str(path) for name, path in models.items()}
        self.max_batch, self.delay_us, self.instances, self.threads = max_batch, delay_us, instances, threads
        self.token = token
        self.tls = tls
        """(certificate, key) PEM files: gRPC over TLS (the readiness check then trusts the certificate)."""
        self._pick_ports()
        self.process: subprocess.Popen[bytes] | None = None
        self._workspace = tempfile.TemporaryDirectory(prefix="fw-triton-")
        self._log = Path(self._workspace.name) / "server.log"
        self.pids: list[int] = []
        self._log_start = 0

    @property
    def headers(self) -> dict[str, str]:
        """The header that opens the shared-memory and statistics endpoints."""
        return {TOKEN_HEADER: self.token}

    def start(self, timeout: float = 90.0) -> TritonServer:
        """Start (or start again) and wait until every model is ready. A server that exits while it
        starts is started again, up to 3 times: a port that free_port() picked may be taken by
        another process before Triton binds it. A first start then picks new ports; a restart keeps
        its ports (its clients know them)."""
        first = not self.pids
        for attempt in range(3):
            self._launch()
            try:
                self.wait_ready(timeout)
                return self
            except ServerExited:
                self.kill()
                if attempt == 2:
                    raise
                if first:
                    self._pick_ports()
                time.sleep(0.5)
            except BaseException:  # never ready, or the caller gave up: nothing is left running
                self.kill()
                raise
        return self

    def _pick_ports(self) -> None:
        self.grpc_port, self.http_port, self.metrics_port = free_port(), free_port(), free_port()
        self.url = f"127.0.0.1:{self.grpc_port}"

    def _launch(self) -> None:
        python = str(triton_venv())
        env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [_libdir(python), os.environ.get("LD_LIBRARY_PATH")]))}
        env.pop("PYTHONPATH", None)
        cmd = [python, str(SERVER), "--grpc-port", str(self.grpc_port), "--http-port", str(self.http_port),
               "--metrics-port", str(self.metrics_port), "--token", self.token, "--max-batch", str(self.max_batch),
               "--delay-us", str(self.delay_us), "--instances", str(self.instances), "--threads", str(self.threads),
               "--workspace", str(Path(self._workspace.name) / f"ws{len(self.pids)}")]  # fmt: skip
        for name, path in self.models.items():
            cmd += ["--model", f"{name}={path}"]
        if self.tls is not None:
            cmd += ["--tls", str(self.tls[0]), str(self.tls[1])]
        with open(self._log, "ab") as log:
            self._log_start = log.tell()
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.pids.append(self.process.pid)

    def wait_ready(self, timeout: float) -> None:
        """Until every model answers ready; the server's log in the error if it never does."""
        deadline = time.monotonic() + timeout
        client = self.client()
        try:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    raise ServerExited(f"Triton exited with {self.process.returncode}: {self.log_tail()}")
                if FAILED in self._since_launch():  # tritonserver died (a port taken); pytriton's Python waits on
                    raise ServerExited(f"Triton failed to start: {self.log_tail()}")
                try:
                    if client.is_server_ready() and all(client.is_model_ready(m) for m in self.models):
                        return
                except Exception:  # noqa: BLE001 - not listening yet
                    pass
                time.sleep(0.2)
            raise RuntimeError(f"Triton not ready within {timeout:.0f} s: {self.log_tail()}")
        finally:
            client.close()

    def client(self) -> Any:
        import tritonclient.grpc as grpcclient

        if self.tls is None:
            return grpcclient.InferenceServerClient(self.url)
        return grpcclient.InferenceServerClient(self.url, ssl=True, root_certificates=str(self.tls[0]))

    def _since_launch(self) -> str:
        try:
            with open(self._log, "rb") as log:
                log.seek(self._log_start)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 15) -> str:
        try:
            return " | ".join(self._log.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def statistics(self, model: str) -> Any:
        """The model's inference statistics (needs the token): a ModelStatisticsResponse."""
        client = self.client()
        try:
            return client.get_inference_statistics(model, headers=self.headers)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL every process of the server (a crash), then remove what it left in /dev/shm."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)
        self._wait_group_gone(self.process.pid)
        self._clean_shm()
        self.process = None

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 20 s); the ports are free after it."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=20)
            self._wait_group_gone(self.process.pid, 10)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    @staticmethod
    def _wait_group_gone(pgid: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _clean_shm(self) -> None:
        for pid in self.pids:
            for leftover in glob.glob(f"/dev/shm/pytrtion{pid}-*"):
                try:
                    os.unlink(leftover)
                except OSError:
                    pass

    def close(self) -> None:
        self.stop()
        self._clean_shm()
        self._workspace.cleanup()

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def serving_model(path: str | Path, out_dir: Path, dynamic_axes: Mapping[str, tuple[int, ...]], name: str) -> Path:
    """The model file as the daemon loads it (its task's dynamic axes and a dynamic batch, the same
    rewrite framewire.engines.onnx_model makes), written to `out_dir/<name>.onnx` for Triton to serve."""
    from framewire.engines.onnx_model import load_model_bytes

    target = out_dir / f"{name}.onnx"
    target.write_bytes(load_model_bytes(path, dynamic_axes))
    return target


def main() -> None:
    """`python -m tests.support.triton -c configs/default.yaml`: serve the configs' primary models
    (as the daemon loads them, under their file names) until Ctrl-C; prints the URL and token."""
    import argparse

    from framewire.app.compose.model import build_task
    from framewire.config import load_config
    from framewire.engines.batch_rewrite import with_batch_axis

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("-c", "--config", action="append", required=True)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--delay-us", type=int, default=2000)
    parser.add_argument("--instances", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fw-triton-models-"))
    models = {}
    for path in args.config:
        config = load_config(path)
        task = build_task(config)
        name = Path(config.model.path).stem
        models[name] = serving_model(config.model.path, folder, with_batch_axis(task.dynamic_axes(), task.input_name), name)
    server = TritonServer(models, max_batch=args.max_batch, delay_us=args.delay_us, instances=args.instances,
                          threads=args.threads)  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` too stops the server's process group
    with server:
        print(f"Triton at {server.url} serving {', '.join(models)}; {TOKEN_HEADER}={server.token}", flush=True)
        try:
            while server.process is not None and server.process.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
