"""The control API's commands, carried out on the hub loop (the one writer of its state).

The HTTP threads (pipeline.control) queue a `Command`; the hub loop takes the queue between two
messages, runs each command here and hands its answer back: list, add or remove a source, show or
change a source's settings (pipeline.ops.settings), drain (stop reading, finish what is in flight)
or stop now, show the model or start a new version of it (pipeline.hub.swap). An ended or failed source stays listed, with
its counts and last error, until a DELETE removes it for good (its metric series go with it).
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable

from framewire.pipeline.ops.control import Command, ControlServer
from framewire.pipeline.ops.settings import Settings
from framewire.pipeline.errors import ConfigError, FramewireError
from framewire.pipeline.hub.inputs import Inputs
from framewire.pipeline.hub.swap import SwapRefused, Swaps
from framewire.pipeline.plan import Plan

log = logging.getLogger(__name__)


class Commands:
    """Runs the queued control commands against the job's sources."""

    def __init__(
        self,
        plan: Plan,
        inputs: Inputs,
        request_stop: Callable[[], None],
        stopping: Callable[[], bool],
        forget: Callable[[str], None] = lambda source_id: None,
        swaps: Swaps | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.plan = plan
        self.inputs = inputs
        self.request_stop = request_stop
        self.stopping = stopping
        self.forget = forget
        """Drops a removed source's metric series."""
        self.swaps = swaps
        """The hub's model swaps; None: this server cannot change the model."""
        self.settings = settings
        """Sources' settings changed at run time; None: this job cannot change them."""

    def run_queued(self, server: ControlServer) -> None:
        while True:
            try:
                command = server.commands.get_nowait()
            except queue.Empty:
                return
            try:
                self.run(command)
            except FramewireError as exc:
                command.answer(400, {"error": str(exc)})
            except Exception as exc:  # an API call must never take the daemon down
                log.exception("control command %s failed", command.action)
                command.answer(500, {"error": f"{type(exc).__name__}: {exc}"})

    def run(self, command: Command) -> None:
        if command.action == "list":
            command.answer(200, {"sources": [self.inputs.describe(s) for s in self.inputs.every()]})
        elif command.action == "add":
            self._add(command)
        elif command.action == "remove":
            self._remove(command, str(command.body))
        elif command.action == "model":
            self._model(command)
        elif command.action == "swap_model":
            self._swap_model(command)
        elif command.action in ("settings", "configure"):
            self._settings(command, *command.body)
        elif command.action in ("drain", "stop"):
            self.request_stop()
            if command.action == "stop":
                self.request_stop()
            command.answer(202, {command.action: True})
        else:
            command.answer(404, {"error": f"unknown command {command.action!r}"})

    def _remove(self, command: Command, source_id: str) -> None:
        """A running source stops reading (202: its outputs close once its frames are done); an
        ended one is forgotten (200)."""
        record = self.inputs.sources.get(source_id)
        if record is not None:
            self.inputs.stop(record)
            command.answer(202, {"removing": source_id})
        elif self.inputs.forget(source_id):
            self.forget(source_id)
            if self.settings is not None:
                self.settings.forget(source_id)
            command.answer(200, {"removed": source_id})
        else:
            command.answer(404, {"error": f"no source {source_id!r}"})

    def _add(self, command: Command) -> None:
        if self.plan.make_source is None:
            command.answer(501, {"error": "this job cannot add sources"})
            return
        if self.stopping():
            command.answer(409, {"error": "the daemon is stopping"})
            return
        if not isinstance(command.body, dict):
            raise ConfigError("the body must be a JSON object with the keys of a sources: item")
        item, change = self.settings.split(command.body) if self.settings is not None else (command.body, {})
        source = self.plan.make_source(item)
        if source.source_id in self.inputs.sources:
            command.answer(409, {"error": f"source {source.source_id!r} already exists"})
            return
        if source.source_id in self.inputs.ended:
            command.answer(409, {"error": f"source {source.source_id!r} has ended and is still listed: "
                                          f"DELETE /sources/{source.source_id} forgets it"})
            return
        settings = self.settings.check(source.source_id, change) if self.settings and change else None
        record = self.inputs.add(source)
        if self.settings is not None and settings is not None:  # before its first frame: no worker has it yet
            self.settings.apply(source.source_id, settings, change)
        log.info("source %s added", source.source_id)
        command.answer(201, self.inputs.describe(record))

    def _model(self, command: Command) -> None:
        if self.swaps is None:
            command.answer(501, {"error": "this job cannot change its model"})
            return
        command.answer(200, self.swaps.describe())

    def _swap_model(self, command: Command) -> None:
        """Check the new model as the config's is (400 naming the key, logged in one line), then
        start its workers beside the old ones (202; GET /model follows the swap)."""
        if self.swaps is None or self.plan.update_model is None:
            command.answer(501, {"error": "this job cannot change its model"})
            return
        if self.stopping():
            command.answer(409, {"error": "the daemon is stopping"})
            return
        if self.swaps.busy:
            command.answer(409, {"error": f"a model swap is under way: {self.swaps.describe()['swap']['version']}"})
            return
        if not isinstance(command.body, dict):
            raise ConfigError("model: the body must be a JSON object with a path (and a version)")
        try:
            update = self.plan.update_model(command.body)
            self.swaps.begin(update)
        except ConfigError as exc:
            log.error("model not changed, the job goes on with %s: %s", self.swaps.describe()["version"], exc)
            raise
        except SwapRefused as exc:
            command.answer(409, {"error": str(exc)})
            return
        command.answer(202, self.swaps.describe())
    def _settings(self, command: Command, source_id: str, change: object = None) -> None:
        """GET (`settings`) or PATCH (`configure`) of a source's settings."""
        if self.settings is None:
            command.answer(501, {"error": "this job's sources have no settings to change"})
        elif source_id not in self.inputs.sources and source_id not in self.inputs.ended:
            command.answer(404, {"error": f"no source {source_id!r}"})
        elif command.action == "settings":
            command.answer(200, self.settings.describe(source_id))
        elif source_id not in self.inputs.sources:
            ended = f"source {source_id!r} has ended: its settings can no longer change"
            command.answer(409, {"error": ended})
        else:
            self.settings.change(source_id, change)
            command.answer(200, self.settings.describe(source_id))
