"""A new version of some stages while the job runs (a model's new version): new workers start beside
the old ones, warm up, then take over; the old ones finish what they hold and stop.

The layer that knows models builds the new specs (`Plan.update_model` -> `StageUpdate`); this room
knows workers only. A swap goes through its phases on the hub's thread, once a tick (`step`):

- `starting`: a new generation of each stage's workers is started (new identities, `held`: READY
  does not make them take work), beside the old ones, which go on working.
- `taking_over`: every new worker is READY. The stages swap at one frame for every source: with one
  stage (the fused default) at once; with several (preprocess, infer, postprocess unfused), the
  first one's old workers take no new frame until no frame is between the first and the last
  (a frame made by a new preprocess must meet a new infer), then all of them swap.
- `retiring`: the new workers take the work; the old ones take none, finish the frames they hold
  and get STOP once empty (killed past RETIRE_TIMEOUT_S). A retiring worker that dies hands its
  frames on to the new ones (`on_death`); nothing restarts it. Restarts of the old generation still
  due are cancelled.
- `done`, or `failed`: a new worker that cannot start (its FATAL, its death, or no READY within
  `start_timeout_s`) ends the swap before any frame reached the new generation; the new workers are
  stopped and the old ones never stopped working. The reason is logged in one line and kept for
  `describe()` (GET /model).

No frame is lost: every frame goes to exactly one worker of each stage, held frames come back as
results or, from a dead worker, go to the next. No frame is reordered: the outputs take frames in
`seq` order per source (pipeline.hub.routing), and a source's frames all reach the old generation
before the first reaches the new one (the queues are first in, first out). An ordered stage
(a tracker fused into the model's process) starts its per-source state afresh on the new workers.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from framewire.pipeline.hub.lifecycle import Lifecycle
from framewire.pipeline.hub.peers import Roster, StageWorker
from framewire.pipeline.hub.routing import Router
from framewire.pipeline.plan import ModelVersion, Plan, StageUpdate
from framewire.pipeline.wire import messages as msg

log = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0
"""The most a new worker may take to say READY (a TensorRT engine build counts): then the swap fails."""
RETIRE_TIMEOUT_S = 10.0
"""How long a retiring worker told to STOP may take to exit before it is killed."""
GENERATION_STEP = 1 << 20
"""Swap n's workers have generation n * GENERATION_STEP: their identities never meet those of the
restarts before them (a restart adds 1)."""

STARTING, TAKING_OVER, RETIRING, DONE, FAILED = "starting", "taking_over", "retiring", "done", "failed"


class SwapRefused(Exception):
    """A swap that cannot begin (one is under way, or a stage it names cannot be swapped): HTTP 409."""


@dataclass
class Swap:
    """One swap: what it brings, its new workers, the old ones it retires, where it stands."""

    update: StageUpdate
    started_at: float
    new: dict[str, list[StageWorker]] = field(default_factory=dict)
    old: list[StageWorker] = field(default_factory=list)
    stopped: dict[bytes, float] = field(default_factory=dict)
    """The retiring workers told to STOP, and when."""
    phase: str = STARTING
    error: str | None = None
    took_s: float | None = None
    """From the start to the new workers taking over."""

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.update.stages)

    @property
    def under_way(self) -> bool:
        return self.phase in (STARTING, TAKING_OVER)

    def new_workers(self) -> list[StageWorker]:
        return [peer for peers in self.new.values() for peer in peers]

    def describe(self) -> dict[str, Any]:
        return {
            "version": self.update.model.version,
            "path": self.update.model.path,
            "state": self.phase,
            "error": self.error,
            "took_s": None if self.took_s is None else round(self.took_s, 3),
        }


class Swaps:
    """The job's swaps, one at a time, carried out on the hub's thread."""

    def __init__(
        self,
        plan: Plan,
        lifecycle: Lifecycle,
        roster: Roster,
        router: Router,
        *,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.plan = plan
        self.lifecycle = lifecycle
        self.roster = roster
        self.router = router
        self.start_timeout_s = start_timeout_s
        self.model: ModelVersion | None = plan.model
        """The model the job runs now: the new one once it took over."""
        self.last: Swap | None = None
        self._count = 0
        self._discarded: set[bytes] = set()
        """The identities of failed swaps' new workers: a FATAL they sent before they were stopped
        may still arrive, and must not end the job."""

    @property
    def busy(self) -> bool:
        """A swap is starting or taking over (a second one waits for it to end)."""
        return self.last is not None and self.last.under_way

    def describe(self) -> dict[str, Any]:
        """The model in use and the last swap (GET /model)."""
        model = self.model
        return {
            "version": model.version if model else None,
            "path": model.path if model else None,
            "swap": self.last.describe() if self.last is not None else None,
        }

    # --- the phases ----------------------------------------------------------------------------

    def begin(self, update: StageUpdate, now: float | None = None) -> Swap:
        """Start the new workers of every stage `update` names, held, beside the old ones."""
        if self.busy:
            assert self.last is not None
            raise SwapRefused(f"a swap to {self.last.update.model.version} is under way")
        for spec in update.stages:
            self._check(spec.name, spec)
        self._count += 1
        swap = Swap(update, time.monotonic() if now is None else now)
        generation = self._count * GENERATION_STEP
        for spec in update.stages:
            swap.new[spec.name] = []
            for index in range(spec.workers):
                peer = self.lifecycle.start_stage(
                    spec.name, index, spec.factory, generation=generation, beside=True
                )
                peer.held = True
                swap.new[spec.name].append(peer)
        self.last = swap
        count, stages = len(swap.new_workers()), ", ".join(swap.stages)
        log.info(
            "model %s: starting %d worker(s) of %s beside the old ones", update.model.version, count, stages
        )
        return swap

    def step(self, now: float) -> None:
        """Move the swap on as far as it can (once a tick)."""
        swap = self.last
        if swap is None:
            return
        if swap.phase == STARTING:
            if all(peer.ready for peer in swap.new_workers()):
                self._take_over(swap, now)
            elif now - swap.started_at > self.start_timeout_s:
                self.fail(swap, f"its workers did not start within {self.start_timeout_s:.0f} s")
        if swap.phase == TAKING_OVER and self._between_empty(swap):
            self._commit(swap, now)
        if swap.phase == RETIRING:
            self._retire(swap, now)

    def _take_over(self, swap: Swap, now: float) -> None:
        swap.phase = TAKING_OVER
        if len(swap.stages) > 1:  # nothing new enters until the frames between the stages are out
            for peer in self._old_of(swap, swap.stages[0]):
                peer.held = True

    def _between_empty(self, swap: Swap) -> bool:
        """No frame is past the first swapped stage and not yet past the last, or held by the first:
        every frame then meets one generation at all of them."""
        if len(swap.stages) == 1:
            return True
        positions = [self.router.stages.index(name) for name in swap.stages]
        first, last = min(positions), max(positions)
        return not any(
            first < state.stage_pos <= last or (state.stage_pos == first and state.held)
            for state in self.router.frames.values()
        )

    def _commit(self, swap: Swap, now: float) -> None:
        for stage in swap.stages:
            old = self._old_of(swap, stage)
            for peer in old:
                peer.held = True
                self.roster.remove(peer)
            swap.old.extend(old)
            cancelled = self.lifecycle.cancel_restarts(stage)
            if cancelled:
                log.info("%s: %d restart(s) of the old generation cancelled", stage, cancelled)
        for peer in swap.new_workers():
            peer.held = False
        swap.phase, swap.took_s = RETIRING, now - swap.started_at
        log.warning(
            "model %s took over from %s (%.1f s after the swap began; %d old worker(s) retiring)",
            swap.update.model.version,
            self._current(),
            swap.took_s,
            len(swap.old),
        )
        self.model = swap.update.model

    def _retire(self, swap: Swap, now: float) -> None:
        """STOP to each old worker that holds nothing; killed when it outstays RETIRE_TIMEOUT_S."""
        for peer in swap.old:
            if not peer.process.is_alive():
                continue  # the hub's check of the dead hands on what it held (on_death)
            asked = swap.stopped.get(peer.identity)
            if asked is None and not peer.inflight:
                peer.finished = True  # its exit is not a death
                swap.stopped[peer.identity] = now
                if not peer.send({"type": msg.STOP}):
                    peer.process.kill()
            elif asked is not None and now - asked > RETIRE_TIMEOUT_S:
                log.warning("%s did not stop after the swap; killing it", peer.name)
                peer.process.kill()
                swap.stopped[peer.identity] = float("inf")
        if all(self.lifecycle.get(peer.identity) is not peer for peer in swap.old):  # each exit handled
            swap.phase = DONE
            log.info("model %s: the old workers are gone", swap.update.model.version)

    def fail(self, swap: Swap, why: str) -> None:
        """The swap ends: its new workers go, the old ones go on (they never stopped)."""
        for peer in swap.new_workers():
            peer.finished = True
            peer.held = True
            self.roster.remove(peer)
            self._discarded.add(peer.identity)
            if peer.process.is_alive():
                peer.process.kill()
        for stage in swap.stages:
            for peer in self._old_of(swap, stage):
                peer.held = False
        swap.phase, swap.error = FAILED, why
        log.error("model %s not loaded, %s goes on: %s", swap.update.model.version, self._current(), why)

    # --- the hub's hooks -----------------------------------------------------------------------

    def on_fatal(self, peer: StageWorker, error: str) -> bool:
        """A worker could not start: True when it was one of a swap's new workers (the swap fails;
        the job goes on), False when the hub's usual rule applies (the job ends)."""
        if peer.identity in self._discarded:  # its swap failed already (its sibling's FATAL came first)
            peer.finished = True
            return True
        swap = self.last
        if swap is None or not swap.under_way or peer not in swap.new_workers():
            return False
        peer.finished = True
        self.fail(swap, f"{peer.name}: {error}")
        return True

    def on_death(self, peer: StageWorker, how: str) -> bool:
        """A worker died: True when it belongs to a swap (a new one before taking over: the swap
        fails; an old one retiring: its frames go to the new ones), and nothing restarts it."""
        swap = self.last
        if swap is None:
            return False
        if swap.under_way and peer in swap.new_workers():
            peer.finished = True
            self.fail(swap, f"{peer.name} died while starting ({how})")
            return True
        if peer in swap.old:
            peer.finished = True
            held = len(peer.inflight)
            log.warning(
                "%s died while retiring (%s); the %d frame(s) it held go to the new workers",
                peer.name,
                how,
                held,
            )
            return True
        return False

    # --- inside --------------------------------------------------------------------------------

    def _check(self, stage: str, spec: Any) -> None:
        try:
            current = self.plan.spec(stage)
        except KeyError:
            raise SwapRefused(f"the job has no stage {stage!r}") from None
        if current.writes_output:
            raise SwapRefused(f"stage {stage}: an output's worker cannot be swapped")
        if current.decodes_sources:
            raise SwapRefused(f"stage {stage}: its workers read the live sources (stages.layout: live): a new model needs a restart there")
        if spec.facts != current.facts:
            raise SwapRefused(f"stage {stage}: the new spec does other things ({spec.describe()})")

    def _old_of(self, swap: Swap, stage: str) -> list[StageWorker]:
        """The stage's workers that are not the swap's: the old generation (restarts included)."""
        new = swap.new.get(stage, [])
        return [peer for peer in self.roster.of(stage) if peer not in new]

    def _current(self) -> str:
        return self.model.version if self.model is not None else "the old version"
