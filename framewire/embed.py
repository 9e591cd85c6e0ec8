"""Run a framewire job from Python and take each result as it comes.

    from framewire import Pipeline

    pipeline = Pipeline("configs/default.yaml", overrides=["sources.0.realtime=true"])
    report = pipeline.run(lambda message: print(message))      # a callback per result
    # or:  for message in pipeline.results(): ...               # an iterator
    # and from any thread: pipeline.stop()                      # drain, as SIGTERM does

The job runs as it does from the command line (its own processes, its own outputs); its results
also reach this process through one more output, a `push` ZeroMQ output on a private ipc://
socket, read by a `framewire.client.Client`. So the results arrive in order per source, and a slow
callback slows the job down rather than losing results (push applies backpressure).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

from framewire.app.commands import ROOT, input_roots
from framewire.client import Client, Message
from framewire.config import Config, load_raw, resolve_inputs, validate_config
from framewire.pipeline.plan import Report

log = logging.getLogger(__name__)

DRAIN_S = 1.0
"""After the job ends, the wait for results still on their way (its outputs have sent them all)."""


class Pipeline:
    """A config, run from Python. `config`: a YAML file, or a mapping of the same keys."""

    def __init__(
        self,
        config: str | os.PathLike[str] | dict[str, Any],
        overrides: Sequence[str] = (),
        *,
        images: bool = False,
        log_level: int = logging.WARNING,
    ) -> None:
        """`images`: results carry the composited frame, decoded to a BGR array (`FrameRecord.image()`)."""
        from framewire.app.preload import PRELOAD
        from framewire.pipeline.worker.forkserver import start_early

        start_early(PRELOAD)  # the workers' imports run while the config is checked
        self._dir = tempfile.mkdtemp(prefix="framewire-embed-")
        self.endpoint = f"ipc://{self._dir}/results.sock"
        self.images = images
        self.log_level = log_level
        try:
            self.config = self._config(config, overrides)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self.report: Report | None = None
        self._supervisor: Any = None
        self._stops = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _config(self, config: str | os.PathLike[str] | dict[str, Any], overrides: Sequence[str]) -> Config:
        if isinstance(config, dict):
            import yaml

            raw = load_raw("config", overrides, text=yaml.safe_dump(config))
        else:
            raw = load_raw(Path(config), overrides)
        outputs = list(raw.get("outputs") or [])
        outputs.append({"kind": "zmq", "endpoint": self.endpoint, "mode": "push", "jpeg": self.images})
        raw["outputs"] = outputs
        name = "config" if isinstance(config, dict) else str(config)
        roots = [ROOT] if isinstance(config, dict) else input_roots(Path(config))
        return resolve_inputs(validate_config(raw, name), roots)

    def run(self, on_result: Callable[[Message], None]) -> Report:
        """Run the job to its end (or until `stop()`), calling `on_result` with each result in this
        thread. An exception from `on_result` stops the job and is raised once it has stopped."""
        results = self._results()
        for message in results:
            try:
                on_result(message)
            except BaseException:
                self.stop(drain=False)
                results.close()  # waits for the job to stop
                raise
        assert self.report is not None
        return self.report

    def results(self) -> Iterator[Message]:
        """Run the job in the background and yield its results as they come; ends with the job
        (`report` then says how it went). Ctrl-C while waiting drains the job, as SIGINT does."""
        return self._results()

    def _results(self) -> Generator[Message, None, None]:
        if self._thread is not None:
            raise RuntimeError("a Pipeline runs once; make another one to run the job again")
        client = Client(self.endpoint, mode="pull", decode_images=self.images)
        self._thread = threading.Thread(target=self._run, name="framewire-supervisor", daemon=True)
        self._thread.start()
        try:
            while self._thread.is_alive():
                try:
                    message = client.receive(timeout=0.1)
                except KeyboardInterrupt:
                    self.stop()
                    continue
                if message is not None:
                    yield message
            # The outputs have closed, so what they sent is here or on its way.
            while (message := client.receive(timeout=DRAIN_S)) is not None:
                yield message
        finally:
            self.stop(drain=False)
            self._thread.join()
            client.close()
            shutil.rmtree(self._dir, ignore_errors=True)
        if self._error is not None:
            raise self._error

    def stop(self, *, drain: bool = True) -> None:
        """Stop reading the sources and finish the frames in flight (`drain=False`: stop now).
        Safe from any thread, before the job has started too."""
        with self._lock:
            self._stops += 1 if drain else 2
            if self._supervisor is not None:
                for _ in range(1 if drain else 2):
                    self._supervisor.request_stop()

    def _run(self) -> None:
        from framewire.app.compose import build_plan
        from framewire.pipeline.run.supervisor import Supervisor

        try:
            supervisor = Supervisor(build_plan(self.config, log_level=self.log_level))
            with self._lock:
                self._supervisor = supervisor
                for _ in range(self._stops):
                    supervisor.request_stop()
            self.report = supervisor.run()
        except BaseException as exc:  # raised to the caller, in its thread
            self._error = exc


def default_config() -> Path:
    """The shipped default job (configs/default.yaml of the checkout)."""
    return ROOT / "configs" / "default.yaml"
