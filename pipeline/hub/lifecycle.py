"""The worker processes: started, watched, killed when hung, restarted when they die.

`Lifecycle` starts every stage worker and decode worker of this host (with the `start` it is given:
the runner's fork server, pipeline.worker.forkserver; a fake in tests), keeps them by the identity they connect with, and answers for them: which
ended (`exited`), which have held a frame past `stall_timeout_s` (`kill_stalled`), and whether a
dead stage worker may come back (`schedule_restart`: after a backoff that doubles, unless its stage
keeps dying). What a death means for the frames and sources is the hub's business (pipeline.hub.core).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from framewire.pipeline.wire import messages as msg
from framewire.pipeline.backoff import Backoff
from framewire.pipeline.errors import JobFailed
from framewire.pipeline.worker.hub_link import WorkerSpec
from framewire.pipeline.plan import Plan, Policy, SourcePlan
from framewire.pipeline.stagespec import DECODE
from framewire.pipeline.hub.peers import DecodeWorker, StageWorker, Roster, Send
from framewire.pipeline.worker.decode import source_main
from framewire.pipeline.worker.live_loop import live_main
from framewire.pipeline.worker.stage import worker_main

log = logging.getLogger(__name__)

RESTART_WINDOW_S = 60.0
"""`max_restarts` counts the deaths of a stage's workers in this window."""

StartProcess = Callable[[Callable[[WorkerSpec], None], WorkerSpec], Any]
"""Start `target(spec)` in a new process; returns a `multiprocessing.Process`-like object
(pipeline.worker.forkserver.starter)."""


class Lifecycle:
    """The worker processes of this host."""

    def __init__(
        self, plan: Plan, endpoint: str, send: Send, roster: Roster, start: StartProcess
    ) -> None:
        self.plan = plan
        self.endpoint = endpoint
        self.send = send
        self.roster = roster
        self._start = start
        self.processes: dict[bytes, StageWorker | DecodeWorker] = {}
        self.restarts: dict[str, int] = {}
        """Restarts per stage, for the report."""
        self._deaths: dict[str, list[float]] = {}
        self._pending: list[tuple[float, StageWorker]] = []

    def get(self, identity: bytes) -> StageWorker | DecodeWorker | None:
        return self.processes.get(identity)

    def start_stage(self, stage: str, index: int, factory: Callable[[], Any], *, generation: int = 0,
                    label: str | None = None, beside: bool = False) -> StageWorker:
        """Start a worker of `stage`; `beside`: next to the worker of that index, not replacing it
        in the roster (a new generation: pipeline.hub.swap)."""
        spec = self._spec(stage, index, generation, factory, label=label)
        peer = StageWorker(spec, self._start(live_main if spec.decodes_sources else worker_main, spec), self.send)
        self.processes[spec.identity] = peer
        self.roster.add(peer, beside=beside)
        log.debug("started %s (pid %s)", spec.title, peer.process.pid)
        return peer

    def start_decode(self, source: SourcePlan, index: int) -> DecodeWorker:
        spec = self._spec(DECODE, index, 0, source.factory, source=source)
        worker = DecodeWorker(spec, self._start(source_main, spec), self.send)
        self.processes[spec.identity] = worker
        log.debug("started %s (pid %s)", spec.title, worker.process.pid)
        return worker

    def _spec(self, stage: str, index: int, generation: int, factory: Callable[[], Any], *,
              label: str | None = None, source: SourcePlan | None = None) -> WorkerSpec:
        extra: dict[str, Any] = {}
        if source is not None:
            extra = {"source_id": source.source_id, "source_options": source.options}
        elif self.plan.spec(stage).decodes_sources:  # the live layout: it reads sources the hub shares out
            live = tuple(s for s in self.plan.sources if s.options.policy != Policy.BLOCK)
            extra = {"decodes_sources": True, "live_sources": live, "make_source": self.plan.make_source}
        return WorkerSpec(
            stage=stage,
            index=index,
            generation=generation,
            endpoint=self.endpoint,
            credits=self.plan.credits_per_worker if source is not None else self.plan.credits_for(stage),
            skips_stale=source is None and self.plan.spec(stage).skips_stale,
            factory=factory,
            log_level=self.plan.log_level,
            log_format=self.plan.log_format,
            label=label,
            init=self.plan.worker_init,
            **extra,
        )

    def exited(self) -> Iterator[StageWorker | DecodeWorker]:
        """The processes that ended since the last call (each once)."""
        for worker in list(self.processes.values()):
            if not worker.process.is_alive():
                yield worker

    def forget(self, worker: StageWorker | DecodeWorker) -> bool:
        """Stop tracking an ended process; False if it was already forgotten (or replaced)."""
        if self.processes.get(worker.identity) is not worker:
            return False
        del self.processes[worker.identity]
        return True

    def kill_stalled(self, now: float) -> list[StageWorker]:
        """Kill every worker that has held a frame past `stall_timeout_s`: a stage stuck in a
        driver call or a deadlock never dies on its own. Its death then goes the usual way."""
        limit = self.plan.stall_timeout_s
        killed: list[StageWorker] = []
        if limit is None:
            return killed
        for worker in self.processes.values():
            if not isinstance(worker, StageWorker) or worker.stalled or worker.backend_down:
                continue
            if worker.spec.decodes_sources and worker.ready and now - worker.heard > limit:
                worker.stalled = f"hung: silent for {now - worker.heard:.1f} s, over stages.stall_timeout_s"
            elif not worker.inflight:
                continue
            else:
                key, sent = min(worker.inflight.items(), key=lambda item: item[1])
                if now - sent <= limit:
                    continue
                worker.stalled = (
                    f"hung: held frame {key.seq} of source {key.source} for {now - sent:.1f} s, "
                    "over stages.stall_timeout_s"
                )
            log.error("%s %s; killing it", worker.name, worker.stalled)
            worker.process.kill()
            killed.append(worker)
        return killed

    def schedule_restart(self, peer: StageWorker, how: str) -> float:
        """A stage worker died: start it again after a backoff (returned, in seconds). Raises
        JobFailed when its stage is not restartable (an output) or keeps dying."""
        if self.plan.spec(peer.stage).writes_output:
            raise JobFailed(f"{peer.name} worker died ({how})")
        now = time.monotonic()
        recent = [t for t in self._deaths.get(peer.stage, []) if now - t < RESTART_WINDOW_S]
        if len(recent) >= self.plan.max_restarts:
            raise JobFailed(f"{peer.stage} workers keep dying ({len(recent) + 1} times in a minute, last {how})")
        self._deaths[peer.stage] = recent + [now]
        self.restarts[peer.stage] = self.restarts.get(peer.stage, 0) + 1
        delay = Backoff(*self.plan.restart_backoff_s).delay(len(recent) + 1)
        self.roster.remove(peer)
        self._pending.append((now + delay, peer))
        return delay

    def restart_due(self, now: float) -> None:
        due = [peer for at, peer in self._pending if at <= now]
        if not due:
            return
        self._pending = [(at, peer) for at, peer in self._pending if at > now]
        for peer in due:
            spec = peer.spec
            self.start_stage(spec.stage, spec.index, spec.factory, generation=spec.generation + 1, label=spec.label)

    def cancel_restarts(self, stage: str) -> int:
        """Forget the restarts still due for `stage`'s workers (a new generation took the stage
        over: pipeline.hub.swap); returns how many."""
        kept = [(at, peer) for at, peer in self._pending if peer.stage != stage]
        cancelled = len(self._pending) - len(kept)
        self._pending = kept
        return cancelled

    def stop_all(self, timeout_s: float = 5.0) -> None:
        """STOP to every live worker, wait for them (bounded), kill what is left."""
        for worker in list(self.processes.values()):
            if worker.process.is_alive():
                worker.send({"type": msg.STOP})
        deadline = time.monotonic() + timeout_s
        for worker in list(self.processes.values()):
            worker.process.join(max(0.0, deadline - time.monotonic()))
        for worker in list(self.processes.values()):
            if worker.process.is_alive():
                log.warning("%s did not stop; killing it", worker.spec.title)
                worker.process.kill()
                worker.process.join(2.0)


def exit_text(code: int | None) -> str:
    """How a process ended, in words: `exit code 3`, `killed by SIGKILL`."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
