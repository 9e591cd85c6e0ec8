"""One way to start a job: `framewire.start(config) -> Job`.

The command line (`framewire run`), `framewire.Pipeline` and the benchmarks all make this call: a
validated config goes in, a handle comes back while the job runs in its own processes, with its hub
on a thread of this one. Nothing here exits the process, and nothing touches its signal handlers
unless asked: the command line maps SIGINT/SIGTERM to `Job.stop()` (`stop_on_signals`, on its main
thread) and a Report or an error to an exit code.

    import framewire

    config = framewire.load_config("configs/default.yaml", ["sources.0.max_frames=50"])
    job = framewire.start(config)
    report = job.wait()          # a Report: frames per source, exit_code, error ...
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from framewire.config import Config
from framewire.pipeline.errors import JobFailed, JobTimeout
from framewire.pipeline.plan import Plan, Report

__all__ = ["Job", "start", "stop_on_signals"]

Progress = Callable[[int, int | None], None]


class Job:
    """A running job: `wait()` for its Report, `stop()` it, read its `stats()`. Made by `start`."""

    def __init__(self, plan: Plan, progress: Progress | None = None) -> None:
        from framewire.pipeline.run.supervisor import Supervisor

        self._progress = progress
        self._started = time.monotonic()
        self._frames = 0
        self._total: int | None = None
        self._report: Report | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._supervisor = Supervisor(plan, progress=self._count)
        self._thread = threading.Thread(target=self._run, name="framewire-hub", daemon=True)
        self._thread.start()

    def _count(self, done: int, total: int | None) -> None:
        self._frames, self._total = done, total
        if self._progress is not None:
            self._progress(done, total)

    def _run(self) -> None:
        try:
            self._report = self._supervisor.run()
        except BaseException as exc:  # handed to whoever waits, in their thread
            self._error = exc
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        """Whether the job has ended (its Report is ready)."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Report:
        """The job's Report once it has ended (its exit_code and error say how). Raises JobTimeout
        (a TimeoutError) if it is still running after `timeout` seconds, and re-raises an error
        that stopped the hub itself."""
        deadline = None if timeout is None else time.monotonic() + timeout
        # Short waits: a signal handler of the main thread (the command line's) runs between them.
        while not self._done.wait(
            0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic()))
        ):
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeout(f"the job is still running after {timeout:g} s")
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._report is None:
            raise JobFailed("the job's hub ended without a report")
        return self._report

    def stop(self, *, drain: bool = True) -> None:
        """Stop reading the sources and finish the frames in flight, as SIGTERM does; `drain=False`
        (or a second call) stops at once. Safe from any thread, and once the job has ended."""
        for _ in range(1 if drain else 2):
            self._supervisor.request_stop()

    def stats(self) -> dict[str, Any]:
        """Where the job is: frames through every output so far, the frames expected (None for
        live sources), seconds since it started, and whether it is still running."""
        return {
            "frames": self._frames,
            "total": self._total,
            "elapsed_s": round(time.monotonic() - self._started, 3),
            "running": not self.done,
        }

    def sources(self) -> list[dict[str, Any]]:
        """Each source as `GET /sources` lists it, with its `fps` and end-to-end `latency_p50_ms`
        and `latency_p99_ms` over the last seconds (pipeline.ops.live; refreshed twice a second)."""
        return list(self._supervisor.telemetry.live.snapshot.sources)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.done:
            self.stop(drain=False)
        self._done.wait()


def start(
    config: Config,
    *,
    log_level: int = logging.WARNING,
    log_format: str = "text",
    progress: Progress | None = None,
) -> Job:
    """Start the job of a validated `config` (framewire.load_config) and return its handle at once.

    Raises ConfigError (and other FramewireErrors) for what can be checked before anything starts:
    the task's and composites' keys, the model file, the backend. `progress(done, total)` is called
    from the hub's thread as frames come out."""
    from framewire.app import fleet
    from framewire.app.compose.plan import build_plan
    from framewire.app.preload import PRELOAD
    from framewire.pipeline.worker.forkserver import start_early

    start_early(PRELOAD)  # the workers' imports run while the plan is checked
    config = fleet.local_part(config)  # a static shard: this replica's sources alone (no other is opened)
    return Job(fleet.joined(build_plan(config, log_level=log_level, log_format=log_format), config), progress)


@contextlib.contextmanager
def stop_on_signals(job: Job) -> Iterator[None]:
    """SIGINT and SIGTERM stop `job` while the block runs: the first drains, a second stops at once.
    Installed here, on the main thread, the only one Python lets install a handler; the handler runs
    there between the short waits of `Job.wait` and hands the stop to the hub's own thread
    (`framewire-hub`). The handlers it replaced come back after the block."""
    handlers = {sig: signal.signal(sig, lambda *_: job.stop()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
