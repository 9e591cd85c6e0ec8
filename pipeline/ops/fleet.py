"""A daemon as one replica of a fleet: the sources it runs are those it holds a lease on in the store.

The fleet's wanted sources, its live replicas and who runs each source live in the coordination
store (pipeline.ops.fleet_store). Two rooms here:

- the agent, a thread, talks to the store once every third of a lease (and at once when a lease it
  waits for runs out): it renews this replica's membership and leases, publishes how its sources
  are doing, and claims each unclaimed source that rendezvous hashing gives it among the live
  replicas (or any source left unclaimed for a whole lease: the replica it prefers may be stuck);
- the hub loop's side (`tick`) carries out what the agent decided (start a source it claimed, stop
  one whose lease it lost or that a DELETE removed) and tells the agent which sources retired.

A replica that dies stops renewing; its leases run out within `lease_s` and the others claim its
sources, file sources with `resume: true` so they continue where its outputs stop. A replica that
stops on purpose (SIGTERM, POST /drain) drains, then lets its leases go at once. One that cannot
reach the store for a lease stops its sources, since the others will have taken them over. The
sources of a live replica never move: a replica that joins takes only sources nobody runs.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from framewire.pipeline.errors import ConfigError, FramewireError, JobFailed
from framewire.pipeline.hub.inputs import Inputs
from framewire.pipeline.ops import rendezvous
from framewire.pipeline.ops.actions import Commands
from framewire.pipeline.ops.control import Command
from framewire.pipeline.ops.fleet_settings import FleetSourceSettings
from framewire.pipeline.ops.fleet_store import RedisStore, StoreError, replica_of
from framewire.pipeline.plan import FleetSettings, Plan
from framewire.pipeline.uris import redact

log = logging.getLogger(__name__)

STATUS_EVERY_S = 1.0
"""How often the hub loop hands the agent a fresh `GET /sources` entry of each source it runs."""


class Fleet:
    """This replica's membership of the fleet; `start`, then `tick` once a hub tick, `close` at the end."""

    def __init__(self, settings: FleetSettings, plan: Plan, inputs: Inputs, stopping: Callable[[], bool],
                 forget: Callable[[str], None]) -> None:  # fmt: skip
        self.settings = settings
        self.plan = plan
        self.inputs = inputs
        self.stopping = stopping
        self.forget = forget
        self.replica = settings.replica
        self.lease_s = settings.lease_s
        self.interval = max(0.05, settings.lease_s / 3)
        if plan.make_source is None:
            raise JobFailed("a replica of a fleet needs a job that can add sources (Plan.make_source)")
        self.make_source = plan.make_source
        try:
            self.store = RedisStore(settings.store, settings.namespace, settings.replica, settings.lease_s)
        except StoreError as exc:
            raise JobFailed(str(exc)) from None
        self.running: set[str] = set()
        """Sources started here that have not retired (hub loop)."""
        self.removed: set[str] = set()
        """Running sources a DELETE stopped: they end for good, not handed over (hub loop)."""
        self.held: set[str] = set()
        """Sources whose lease this replica holds (agent; read at `close`, after the agent ended)."""
        self._actions: queue.SimpleQueue[tuple[str, str, Any]] = queue.SimpleQueue()
        self._retired: queue.SimpleQueue[tuple[str, dict[str, Any], bool]] = queue.SimpleQueue()
        self._statuses: dict[str, dict[str, Any]] = {}
        self._next_status = 0.0
        self._unclaimed_since: dict[str, float] = {}
        self._wake = threading.Event()
        self._quit = threading.Event()
        self.source_settings = FleetSourceSettings(self.store, None)
        """The sources' settings in the store (its `settings` set by the commands)."""
        self._thread = threading.Thread(target=self._agent, name="framewire-fleet", daemon=True)
        self._joined = 0.0
        self._renewed = 0.0
        self._store_down_logged = 0.0

    # --- the supervisor's calls (hub loop) ------------------------------------------------------------

    def start(self) -> None:
        """Add the config's sources to the wanted ones and join; JobFailed when the store cannot be
        reached. A replica id still held by a live process (this replica's predecessor, killed less
        than a lease ago) is waited for, up to a lease and a half."""
        try:
            for source_id, item in self.settings.seed:
                self.store.add(source_id, item)
            deadline = time.monotonic() + 1.5 * self.lease_s + 1.0
            while self.store.heartbeat(()) is None:
                if time.monotonic() > deadline:
                    raise JobFailed(f"fleet.replica: {self.replica!r} is held by another live replica: "
                                    "give each replica an id of its own")  # fmt: skip
                time.sleep(min(0.5, self.interval))
        except StoreError as exc:
            raise JobFailed(str(exc)) from None
        self._joined = self._renewed = time.monotonic()
        log.info("fleet: replica %s joined %s (lease %g s)", self.replica, redact(self.settings.store),
                 self.lease_s)  # fmt: skip
        self._thread.start()

    def tick(self) -> None:
        """Carry out the agent's decisions and tell it which sources retired."""
        for _ in range(self._actions.qsize()):  # what is put back (a start that must wait) waits a tick
            action, source_id, arg = self._actions.get_nowait()
            if action == "start":
                self._start(source_id, *arg)
            elif action == "configure":
                if source_id in self.running:
                    self.source_settings.apply(source_id, arg)
            else:
                self._stop(source_id, arg)
        self._notice_retired()
        now = time.monotonic()
        if now >= self._next_status:
            self._next_status = now + STATUS_EVERY_S
            self._statuses = {sid: self.entry(sid) for sid in self.running if sid in self.inputs.sources}

    def close(self) -> None:
        """Stop the agent; record the sources that ended, hand over the others, leave the fleet."""
        self._quit.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(self.lease_s + 5.0)
        self._notice_retired()
        try:
            self._report_retired()
            for source_id in sorted(self.held):
                ended = source_id in self.removed
                self.store.finish(source_id, self.entry(source_id), ended=ended)
                log.info("fleet: source %s %s", source_id, "ended" if ended else "handed over")
            self.held.clear()
            self.store.leave()
        except StoreError as exc:
            log.warning("fleet: could not let go of the leases (they run out within %g s): %s",
                        self.lease_s, exc)  # fmt: skip
        self.store.close()

    def wake(self) -> None:
        """Have the agent look at the store now (a source was added or removed here)."""
        self._wake.set()

    def entry(self, source_id: str) -> dict[str, Any]:
        """A source as `GET /sources` shows it, with the replica that runs it."""
        record = self.inputs.sources.get(source_id) or self.inputs.ended.get(source_id)
        entry = self.inputs.describe(record) if record is not None else {"id": source_id, "state": "waiting"}
        entry["replica"] = self.replica
        return entry

    # --- the hub loop's side --------------------------------------------------------------------------

    def _start(self, source_id: str, item: dict[str, Any], resume: bool) -> None:
        if self.stopping():  # claimed just before a drain began: hand it straight over
            self._retired.put((source_id, self.entry(source_id), False))
            self._wake.set()
            return
        if source_id in self.inputs.sources:  # still draining here from an earlier lease: later
            self._actions.put(("start", source_id, (item, resume)))
            return
        started, settings = self.source_settings.split(self.settings.resume(item) if resume else item)
        try:
            source = self.make_source(started)
        except FramewireError as exc:
            log.warning("fleet: source %s cannot start here: %s", source_id, exc)
            self._retired.put((source_id, {"id": source_id, "state": "failed", "error": str(exc),
                                           "replica": self.replica}, True))  # fmt: skip
            self._wake.set()
            return
        if self.inputs.forget(source_id):  # ran here before and ended: its old counts go
            self.forget(source_id)
        if resume and not started.get("resume"):  # a live source: its new files go beside the old ones
            source = dataclasses.replace(source, ran_before=True)
        self.inputs.add(source)
        self.running.add(source_id)
        if settings:  # before its first frame: its decode worker has just been started
            self.source_settings.seen[source_id] = settings
            self.source_settings.apply(source_id, settings)
        again = " (it ran before: a file resumes where its outputs stop)" if resume else ""
        log.info("fleet: source %s runs here%s", source_id, again)

    def _stop(self, source_id: str, why: str) -> None:
        record = self.inputs.sources.get(source_id)
        if record is None or source_id not in self.running:
            return
        if why == "removed":
            self.removed.add(source_id)
        else:
            log.warning("fleet: stopping source %s: %s", source_id, why)
        self.inputs.stop(record)

    def _notice_retired(self) -> None:
        """Sources whose outputs have closed: ended for good when they came to their end (or a DELETE
        stopped them), handed over when this replica stopped them (a drain, a lost lease)."""
        for source_id in [sid for sid in self.running if sid not in self.inputs.sources]:
            self.running.discard(source_id)
            record = self.inputs.ended.get(source_id)
            ended = record is not None and (not record.stopping or source_id in self.removed)
            self.removed.discard(source_id)
            self._retired.put((source_id, self.entry(source_id), ended))
            self._wake.set()

    # --- the agent (its own thread) -------------------------------------------------------------------

    def _agent(self) -> None:
        while not self._quit.is_set():
            wait = self.interval
            try:
                wait = self._cycle()
            except StoreError as exc:
                self._store_down(exc)
            except Exception:  # the agent must go on: a bug here would silently stop the takeovers
                log.exception("fleet: the agent's round failed")
            self._wake.wait(wait)
            self._wake.clear()

    def _cycle(self) -> float:
        """One round: report retired sources, renew, publish, claim. Returns the wait until the next."""
        self._report_retired()
        lost = self.store.heartbeat(sorted(self.held))
        if lost is None:
            self._fence(f"replica id {self.replica!r} was taken by another process")
            return self.interval
        self._renewed = time.monotonic()
        for source_id in lost:
            self.held.discard(source_id)
            self._actions.put(("stop", source_id, "its lease ran out and another replica may run it"))
        self.store.publish({sid: entry for sid, entry in self._statuses.items() if sid in self.held})
        if self.stopping():
            return self.interval
        scan = self.store.scan()
        for source_id in sorted(self.held):
            item = scan.wanted.get(source_id)
            changed = self.source_settings.changed(source_id, item) if item is not None else None
            if changed is not None:
                self._actions.put(("configure", source_id, changed))
            if source_id in scan.stopping:
                self._actions.put(("stop", source_id, "removed"))
            elif source_id not in scan.wanted:
                self.held.discard(source_id)
                self._actions.put(("stop", source_id, "it is no longer wanted"))
        settle = self._joined + self.lease_s - time.monotonic()
        if settle > 0:  # replicas started together see each other before they share the sources out
            return min(self.interval, settle)
        return self._claim(scan)

    def _claim(self, scan: Any) -> float:
        live = set(scan.live) | {self.replica}
        now = time.monotonic()
        wait = self.interval
        for source_id in [sid for sid in self._unclaimed_since if sid not in scan.wanted]:
            del self._unclaimed_since[source_id]
        for source_id, item in sorted(scan.wanted.items()):
            holder = scan.holders.get(source_id)
            if holder is not None:
                self._unclaimed_since.pop(source_id, None)
                ttl = scan.ttl_ms.get(source_id, -1)
                if replica_of(holder) != self.replica and ttl > 0:  # look again as it runs out
                    wait = min(wait, ttl / 1000.0 + 0.02)
                continue
            since = self._unclaimed_since.setdefault(source_id, now)
            if rendezvous.owner(source_id, live) != self.replica and now - since < self.lease_s:
                continue
            got = self.store.claim(source_id)
            if got >= 0:
                self.held.add(source_id)
                self._unclaimed_since.pop(source_id, None)
                self._actions.put(("start", source_id, (item, got == 0)))
        return wait

    def _report_retired(self) -> None:
        while True:
            try:
                source_id, entry, ended = self._retired.get_nowait()
            except queue.Empty:
                return
            try:
                if source_id in self.held or ended:
                    self.store.finish(source_id, entry, ended=ended)
            except StoreError:
                self._retired.put((source_id, entry, ended))  # again next round
                raise
            self.held.discard(source_id)

    def _store_down(self, exc: StoreError) -> None:
        """The store did not answer: once this replica's leases may have run out, others may be running
        its sources, so it stops them (they are theirs now)."""
        now = time.monotonic()
        if now - self._store_down_logged > self.lease_s:
            log.warning("fleet: %s", exc)
            self._store_down_logged = now
        if self.held and now - self._renewed > self.lease_s - self.interval / 2:
            self._fence(f"the store has not answered for {now - self._renewed:.1f} s")

    def _fence(self, why: str) -> None:
        for source_id in sorted(self.held):
            self._actions.put(("stop", source_id, why))
        self.held.clear()


class FleetCommands(Commands):
    """The control commands of a replica: `GET /sources` shows the whole fleet, and POST and DELETE
    change the fleet's wanted sources (the replica that runs a source starts or stops it)."""

    def __init__(self, fleet: Fleet, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fleet = fleet
        fleet.source_settings.settings = self.settings

    def run(self, command: Command) -> None:
        try:
            if command.action == "list":
                self._list(command)
            elif command.action == "add":
                self._fleet_add(command)
            elif command.action == "remove":
                self._fleet_remove(command, str(command.body))
            elif command.action in ("settings", "configure"):
                source_id, *change = command.body
                here = source_id in self.fleet.running
                self.fleet.source_settings.command(command, source_id, *change, here=here)
            else:
                super().run(command)
        except StoreError as exc:
            command.answer(503, {"error": str(exc)})

    def _list(self, command: Command) -> None:
        view = self.fleet.store.view()
        entries = []
        for source_id in view["ids"]:
            runner = replica_of(view["holders"].get(source_id))
            if source_id in view["done"]:
                entry = dict(view["done"][source_id])
            elif runner == self.fleet.replica and source_id in self.inputs.sources:
                entry = self.fleet.entry(source_id)
            elif runner is not None and source_id in view["status"]:
                entry = dict(view["status"][source_id])
            else:
                entry = {"id": source_id, "state": "waiting" if runner is None else "opening"}
            entry["replica"] = runner if source_id not in view["done"] else entry.get("replica")
            if source_id in view["stop"] and entry["state"] in ("opening", "running"):
                entry["state"] = "stopping"
            entries.append(entry)
        command.answer(200, {"sources": entries, "replica": self.fleet.replica, "replicas": view["live"]})

    def _fleet_add(self, command: Command) -> None:
        if self.plan.make_source is None:
            command.answer(501, {"error": "this job cannot add sources"})
            return
        if self.stopping():
            command.answer(409, {"error": "the daemon is stopping"})
            return
        if not isinstance(command.body, dict):
            raise ConfigError("the body must be a JSON object with the keys of a sources: item")
        item, change = self.fleet.source_settings.split(command.body)
        source_id = self.plan.make_source(item).source_id  # refused here (400) if the config would
        settings = self.settings.check(source_id, change) if self.settings is not None and change else {}
        added = self.fleet.store.add(source_id, {**item, **settings})
        if added == 0:
            command.answer(409, {"error": f"source {source_id!r} already exists in the fleet"})
        elif added == 2:
            command.answer(409, {"error": f"source {source_id!r} has ended and is still listed: "
                                          f"DELETE /sources/{source_id} forgets it"})  # fmt: skip
        else:
            log.info("fleet: source %s added", source_id)
            self.fleet.wake()
            command.answer(201, {"id": source_id, "state": "waiting", "replica": None})

    def _fleet_remove(self, command: Command, source_id: str) -> None:
        unclaimed = {"id": source_id, "state": "ended", "frames": 0, "replica": None}  # how one nobody ran ends
        removed = self.fleet.store.remove(source_id, unclaimed)
        if removed == 0:
            command.answer(404, {"error": f"no source {source_id!r} in the fleet"})
        elif removed == 1:
            if self.inputs.forget(source_id):
                self.forget(source_id)
            command.answer(200, {"removed": source_id})
        else:
            self.fleet.wake()
            command.answer(202, {"removing": source_id})
