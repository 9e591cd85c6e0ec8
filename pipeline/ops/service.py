"""The daemon's operations side: its HTTP server, the control commands, and the health it reports.

Kept out of the supervisor, which runs frames: this room answers an operator. Liveness and
readiness are separate questions (a Kubernetes liveness probe restarts a daemon; a readiness probe
only stops sending it work): live is "the hub loop turns", ready is "every stage has a worker and
the daemon is not stopping", so a daemon whose workers are still starting is live but not ready.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from framewire.pipeline.ops.actions import Commands
from framewire.pipeline.ops.console import Console
from framewire.pipeline.ops.control import ControlServer
from framewire.pipeline.ops.fleet import Fleet, FleetCommands
from framewire.pipeline.ops.live import LiveStats
from framewire.pipeline.ops.preview import Previews
from framewire.pipeline.ops.settings import Settings
from framewire.pipeline.errors import JobFailed
from framewire.pipeline.hub.inputs import Inputs
from framewire.pipeline.hub.swap import Swaps
from framewire.pipeline.plan import HttpSettings, Plan
from framewire.pipeline.ops.metrics import Metrics
from framewire.pipeline.hub.peers import Roster

LIVE_WITHIN_S = 5.0
"""Live: the hub loop turned this recently (a tick is 50 ms; a scrape of /metrics takes the lock)."""


class Health:
    """Liveness and readiness, read from the hub's state; cheap and safe from the HTTP threads."""

    def __init__(self, plan: Plan, roster: Roster, inputs: Inputs, stopping: Callable[[], bool]) -> None:
        self.plan = plan
        self.roster = roster
        self.inputs = inputs
        self.stopping = stopping
        self.last_tick = time.monotonic()

    def tick(self) -> None:
        self.last_tick = time.monotonic()

    def __call__(self) -> dict[str, Any]:
        live = time.monotonic() - self.last_tick < LIVE_WITHIN_S
        reason = self._not_ready(live)
        state: dict[str, Any] = {"live": live, "ready": reason is None}
        if reason is not None:
            state["reason"] = reason
        return state

    def _not_ready(self, live: bool) -> str | None:
        """Why not ready, or None. Until the sources get their slots every stage needs a worker up;
        after that a worker that died does not make it unready (it is restarted in a moment, and its
        frames wait meanwhile)."""
        if not live:
            return "the hub loop is not turning"
        if self.stopping():
            return "stopping"
        granting = self.inputs.granting
        waiting = [n for n in self.roster.by_stage if not granting and not self.roster.has_ready(n)]
        if waiting:
            return f"waiting for a worker of {', '.join(waiting)}"
        for name, peers in self.roster.by_stage.items():  # e.g. no Triton answers any infer worker
            up = [p for p in peers if not p.finished]
            if up and all(p.backend_down for p in up):
                return f"{name}: {up[0].backend_down}"
        return None if granting else "starting"


class Operations:
    """The HTTP server and its commands, run on the hub loop (`run_queued` once a tick)."""

    def __init__(
        self,
        plan: Plan,
        http: HttpSettings,
        metrics: Metrics,
        health: Health,
        inputs: Inputs,
        request_stop: Callable[[], None],
        forget: Callable[[str], None],
        live: LiveStats | None = None,
        fleet: Fleet | None = None,
        swaps: Swaps | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.previews: Previews | None = None
        """The console's preview frames (the hub's frame tap); None when the console or previews are off."""
        console = None
        if http.console:
            if http.encode_preview is not None:
                self.previews = Previews(http.encode_preview, http.preview_fps, metrics)
            console = Console(live or LiveStats(), self.previews)
        try:
            self.server = ControlServer(http.host, http.port, http.token, metrics, health, console=console,
                                        hls_folders=http.hls, stores=http.recordings,
                                        openapi=http.openapi)
        except OSError as exc:
            raise JobFailed(f"http.port: cannot listen on {http.host}:{http.port}: {exc.strerror or exc}") from None
        forgetting = self._forgetting(forget)
        how = (plan, inputs, request_stop, health.stopping, forgetting, swaps, settings)
        self.commands = Commands(*how) if fleet is None else FleetCommands(fleet, *how)
        self.server.start()

    @property
    def url(self) -> str:
        return self.server.url

    def run_queued(self) -> None:
        self.commands.run_queued(self.server)

    def stop(self) -> None:
        self.server.stop()
        if self.previews is not None:
            self.previews.close()

    def _forgetting(self, forget: Callable[[str], None]) -> Callable[[str], None]:
        """`forget`, and the source's preview goes too."""

        def both(source_id: str) -> None:
            forget(source_id)
            if self.previews is not None:
                self.previews.forget(source_id)

        return both
