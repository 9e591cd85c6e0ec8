"""Waiting out an inference server that does not answer: the infer and secondary stages try the
same batch again with backoff until it does, so a `block` source loses nothing to an outage (its
frames wait; a live source drops at the source meanwhile, counted as usual). The hub hears of the
outage (the daemon is then not ready, and the worker is not taken as hung) and of its end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from framewire.engines.base import Engine
from framewire.pipeline.backoff import Backoff
from framewire.pipeline.errors import BackendUnavailable
from framewire.pipeline.frame import StageContext

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_WAIT_S = 0.1
DEFAULT_MAX_WAIT_S = 2.0


class BackendWait:
    """Runs engine calls for one stage worker, retrying while the backend is unavailable."""

    def __init__(self, ctx: StageContext, max_wait_s: float = DEFAULT_MAX_WAIT_S) -> None:
        self.ctx = ctx
        self.max_wait_s = max_wait_s
        self.down_since: float | None = None
        self._times: dict[str, dict[str, float]] = {}
        self.sleep: Callable[[float], None] = time.sleep

    def call(self, attempt: Callable[[], T]) -> T:
        """`attempt()` until it does not raise BackendUnavailable; raises it only once the
        worker's supervisor is gone (nobody is left to hand the result to)."""
        backoff = Backoff(FIRST_WAIT_S, self.max_wait_s)
        while True:
            try:
                result = attempt()
            except BackendUnavailable as exc:
                self._down(str(exc))
                if self.ctx.gone():
                    raise
                self.sleep(backoff.next())
                continue
            self._up()
            return result

    def started(self, engine: Engine) -> None:
        """An engine that talks to a server opened: its backend answers."""
        self.max_wait_s = engine.retry_max_s
        if engine.served:
            self.ctx.status({"available": True})

    def report_times(self, engine: Engine) -> None:
        """The server's own counters for its model, when they changed since last sent."""
        read = engine.server_times()
        if read is None:
            return
        model, times = read
        if times != self._times.get(model):
            self._times[model] = dict(times)
            self.ctx.status({"model": model, "times": times})

    def _down(self, reason: str) -> None:
        if self.down_since is not None:
            return
        self.down_since = time.monotonic()
        log.warning("%s[%d]: %s; trying again until it answers", self.ctx.stage, self.ctx.index, reason)
        self.ctx.status({"available": False, "reason": reason})

    def _up(self) -> None:
        if self.down_since is None:
            return
        log.warning(
            "%s[%d]: the backend answers again after %.1f s",
            self.ctx.stage,
            self.ctx.index,
            time.monotonic() - self.down_since,
        )
        self.down_since = None
        self.ctx.status({"available": True})
