"""The supervisor: how one job runs, from its plan to its report.

`Supervisor(plan)` builds the job whole before any process starts: it checks that the addresses the
outputs will bind are free, and binds the hub (pipeline.hub.core.Hub, which runs the frames) and
the HTTP server (pipeline.ops). An address in use fails there, in one line that
names it and its config key. `run()` then removes the pools that killed daemons left behind, starts
the workers, turns the hub until every source is done, drains on `request_stop`, stops everything
and returns the `Report`. The metrics watch the hub as its observer (pipeline.ops.telemetry.Telemetry).

`run()` turns on whichever thread calls it (`framewire.start` gives it the `framewire-hub` thread)
and leaves the process's signal handlers alone: only the main thread can install one, so the owner
of the main thread maps SIGINT/SIGTERM to `request_stop` (the command line does, with
`framewire.runner.stop_on_signals`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import zmq

from framewire.pipeline.errors import JobFailed
from framewire.pipeline.hub.core import Hub, Progress
from framewire.pipeline.ops.fleet import Fleet
from framewire.pipeline.ops.service import Health, Operations
from framewire.pipeline.ops.settings import Settings
from framewire.pipeline.ops.telemetry import Telemetry
from framewire.pipeline.plan import Plan, Report
from framewire.pipeline.wire.shm import sweep_orphans
from framewire.pipeline.worker.forkserver import starter

log = logging.getLogger(__name__)


class Supervisor:
    """Runs one job to its end (or until stopped) and says how it went. The constructor raises
    JobFailed (exit code 1) when an address the job listens on is taken; nothing has started then."""

    def __init__(self, plan: Plan, progress: Progress | None = None) -> None:
        self.plan = plan
        self.report = Report()
        self.telemetry = Telemetry(process=plan.http is not None)
        self.metrics = self.telemetry.metrics
        self._stops = 0
        self._stop_deadline: float | None = None
        """Set when the first stop request starts the drain."""
        check_free(plan.binds)
        self._ipc_dir = plan.ipc_dir or tempfile.mkdtemp(prefix="framewire-")
        self._owns_ipc_dir = not plan.ipc_dir
        os.makedirs(self._ipc_dir, exist_ok=True)
        self.endpoint = f"ipc://{self._ipc_dir}/hub-{os.getpid()}.sock"
        try:
            self._hub = Hub(
                plan,
                self.endpoint,
                self.telemetry,
                self.report,
                start=starter(plan.preload),
                stopping=self.stopping,
                progress=progress,
            )
        except BaseException:
            self._remove_ipc_dir()
            raise
        self._health = Health(plan, self._hub.roster, self._hub.inputs, self.stopping)
        self._fleet: Fleet | None = None
        """This replica's membership of a fleet (pipeline.ops.fleet); None: alone."""
        self._ops: Operations | None = None
        """The HTTP server and control API; None when `http` is off."""
        if plan.http is not None:
            try:
                if plan.fleet is not None:
                    self._fleet = Fleet(
                        plan.fleet, plan, self._hub.inputs, self.stopping, self.telemetry.forget
                    )
                self._ops = Operations(
                    plan,
                    plan.http,
                    self.metrics,
                    self._health,
                    self._hub.inputs,
                    self.request_stop,
                    self.telemetry.forget,
                    self.telemetry.live,
                    self._fleet,
                    self._hub.swaps,
                    self._settings(),
                )
                self._hub.tap = self._ops.previews
            except BaseException:
                self._close()
                raise
        self.http_url = self._ops.url if self._ops is not None else None

    # --- public --------------------------------------------------------------------------------

    def request_stop(self, *_: Any) -> None:
        """Stop reading the sources and drain what is in flight; a second request stops hard."""
        self._stops += 1

    def stopping(self) -> bool:
        return self._stops > 0

    def run(self) -> Report:
        """Start the workers, run the job to its end, stop everything; the report says how it went."""
        started = time.monotonic()
        try:
            orphans = sweep_orphans()
            if orphans:
                log.warning(
                    "removed %d frame pool(s) left in /dev/shm by a daemon that was killed", len(orphans)
                )
            self._spawn_all()
            self._hub.run(each_turn=self._each_turn, each_tick=self._each_tick)
        except JobFailed as exc:
            self.report.exit_code = exc.exit_code
            self.report.error = str(exc)
        finally:
            self.telemetry.live.tick(self._hub.inputs, force=True)  # the sources' final states
            self._close()
            self.report.elapsed_s = time.monotonic() - started
        self._hub.fold_into(self.report)
        self.report.conclude()
        return self.report

    def health(self) -> dict[str, Any]:
        """Live: the hub loop turns. Ready: every stage has a worker and it is not stopping (ops.service)."""
        return self._health()

    # --- how it runs ---------------------------------------------------------------------------

    def _settings(self) -> Settings | None:
        """The sources' settings changed at run time (pipeline.ops.settings), when the job has them."""
        hooks, hub = self.plan.settings, self._hub
        return Settings(hooks, hub.settings, hub.inputs, hub.events) if hooks is not None else None

    def _spawn_all(self) -> None:
        plan, hub = self.plan, self._hub
        for spec in plan.middle:
            for index in range(spec.workers):
                hub.lifecycle.start_stage(spec.name, index, spec.factory)
        for index, spec in enumerate(plan.outputs):
            hub.lifecycle.start_stage(spec.name, 0, spec.factory, label=f"output[{index}]")
        for source in plan.sources:
            hub.inputs.add(source)
        if self._fleet is not None:
            self._fleet.start()

    def _each_turn(self) -> None:
        self._health.tick()
        self._check_stop()

    def _each_tick(self) -> None:
        if self._fleet is not None:
            self._fleet.tick()
        if self._ops is not None:
            self._ops.run_queued()

    def _check_stop(self) -> None:
        """The drain: the first stop request stops the sources; a second one, or the drain outlasting
        `shutdown_timeout_s`, ends the job at once (exit code 1)."""
        if not self._stops:
            return
        if self._stop_deadline is None:
            self.report.stopped = True
            self._stop_deadline = time.monotonic() + self.plan.shutdown_timeout_s
            log.warning("stopping: no new frames; draining the ones in flight")
            self._hub.stop_sources()
        elif self._stops > 1 or time.monotonic() > self._stop_deadline:
            raise JobFailed("stopped before every frame in flight was done", 1)

    def _close(self) -> None:
        if self._ops is not None:
            self._ops.stop()
        if self._fleet is not None:
            self._fleet.close()
        self._hub.close()
        self._remove_ipc_dir()

    def _remove_ipc_dir(self) -> None:
        if self._owns_ipc_dir:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)


def check_free(binds: Sequence[tuple[str, str]]) -> None:
    """Each tcp:// address a worker will bind, `(config key, endpoint)`, bound here a moment and let
    go: one in use fails the job before any process starts (JobFailed, naming the key). ipc:// is not
    tried: binding it takes the path over from whoever holds it."""
    ctx = zmq.Context()
    try:
        for key, endpoint in binds:
            if not endpoint.startswith("tcp://"):
                continue
            sock = ctx.socket(zmq.PUB)
            sock.setsockopt(zmq.LINGER, 0)
            try:
                sock.bind(endpoint)
            except zmq.ZMQError as exc:
                raise JobFailed(f"{key}: cannot bind {endpoint}: {zmq.strerror(exc.errno or 0)}") from None
            finally:
                sock.close(linger=0)
    finally:
        ctx.term()  # waits for the listeners to close: the addresses are free again on return
