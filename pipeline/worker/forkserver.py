"""How workers start: forked from a fork server that has imported what they need once.

Light on purpose (no numpy, no zmq): the CLI imports it first thing, to start the server before
it imports anything heavy itself, so that the server's imports and the CLI's own run side by side
on two cores instead of one after the other.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any

WORKER_SIGNALS = "framewire.pipeline.worker.signals"
"""Preloaded first: the fork server and its workers leave SIGTERM and SIGINT to the supervisor."""


def worker_context(preload: Sequence[str] = ()) -> Any:
    """How workers start: forked from a fork server, or spawned where there is none.

    The fork server is a fresh process, started once, that imports `preload` and nothing else: it
    never holds a ZeroMQ or CUDA context, a session or a thread of ours, so a worker forked from it
    inherits none (the reason workers are not forked from the supervisor), yet starts in
    milliseconds instead of importing numpy, OpenCV, PyAV and ONNX Runtime again, and shares those
    pages with its siblings (docs/benchmarks.md, "Memory" and start-up).
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # Always set, so the server ignores the stop signals whatever else it preloads (pipeline.worker_signals).
    # "__main__": the server runs the main script's imports once (as `__mp_main__`, so its `if
    # __name__ == "__main__"` block stays out), and no worker runs them again after its fork.
    context.set_forkserver_preload(["__main__", WORKER_SIGNALS, *preload])  # takes effect when the server starts
    return context


def start_early(preload: Sequence[str]) -> None:
    """Start the fork server now, in the background: it imports `preload` while the caller goes
    on (loading the config, checking the model); the supervisor then finds it running."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    from multiprocessing import forkserver

    worker_context(preload)
    forkserver.ensure_running()


def starter(preload: Sequence[str] = ()) -> Callable[[Callable[[Any], None], Any], Any]:
    """`start(target, spec)`: runs `target(spec)` in a new worker process (named by `spec.title`)
    and returns its `multiprocessing.Process`."""
    context = worker_context(preload)

    def start(target: Callable[[Any], None], spec: Any) -> Any:
        process = context.Process(target=target, args=(spec,), name=spec.title, daemon=True)
        process.start()
        return process

    return start
