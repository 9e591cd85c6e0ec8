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
from framewire.runner import Job, start

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

        start_early(PRELOAD)  # the workers' imports run while the config is checked (start does it too)
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
        self._job: Job | None = None
        self._started = False
        self._stops = 0
        self._lock = threading.Lock()

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
        return resolve_inputs(validate_config(raw, name), roots, None if isinstance(config, dict) else Path(config))

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
        if self._started:
            raise RuntimeError("a Pipeline runs once; make another one to run the job again")
        self._started = True
        client = Client(self.endpoint, mode="pull", decode_images=self.images)
        job: Job | None = None
        try:
            job = start(self.config, log_level=self.log_level)
            with self._lock:
                self._job = job
                for _ in range(self._stops):
                    job.stop()
            while not job.done:
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
            if job is not None:
                if not job.done:
                    job.stop(drain=False)
                self.report = job.wait()
            client.close()
            shutil.rmtree(self._dir, ignore_errors=True)

    def stop(self, *, drain: bool = True) -> None:
        """Stop reading the sources and finish the frames in flight (`drain=False`: stop now).
        Safe from any thread, before the job has started too."""
        with self._lock:
            self._stops += 1 if drain else 2
            if self._job is not None:
                self._job.stop(drain=drain)


def default_config() -> Path:
    """The shipped default job (configs/default.yaml of the checkout)."""
    return ROOT / "configs" / "default.yaml"
