"""The `worker` command's processes: N workers of one stage on this host, for a hub on another.

Each connects to the hub's tcp:// listener (pipeline.remote, pipeline.hub_link), takes its frames
inline and answers like a local worker. SIGINT or SIGTERM makes each leave cleanly (it says BYE,
so the frames it holds go to other workers).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from framewire.pipeline.wire import curve
from framewire.pipeline.worker.forkserver import worker_context
from framewire.pipeline.worker.hub_link import WorkerSpec
from framewire.pipeline.wire.remote import RemoteLink
from framewire.pipeline.worker.stage import worker_main

log = logging.getLogger(__name__)


def run_workers(
    stage: str,
    factory: Callable[[], Any],
    *,
    endpoint: str,
    workers: int,
    credits: int,
    server_key: str | None,
    client_key: str | None,
    preload: tuple[str, ...] = (),
    log_level: int = logging.WARNING,
    log_format: str = "text",  # pipeline.logs
) -> int:
    """Start `workers` processes of `stage` that connect to the hub at `endpoint`, and wait for them.

    Returns 0 when every one ended because the hub said STOP (or this command was told to stop by
    SIGINT/SIGTERM); 1 when one failed (its error is in the log).
    """
    for key, what in ((server_key, "--server-key"), (client_key, "--client-key")):
        if key:
            (curve.load_secret if what == "--client-key" else curve.load_public)(key, what)  # fail now, once
    mp = worker_context(preload)
    processes = []
    for index in range(workers):
        spec = WorkerSpec(
            stage=stage, index=index, generation=0, endpoint=endpoint, credits=credits, factory=factory,
            log_level=log_level, log_format=log_format,
            label=f"remote {stage}[{index}]",
            remote=RemoteLink(b"", server_key, client_key),
        )
        process = mp.Process(target=worker_main, args=(spec,), name=spec.title, daemon=False)
        process.start()
        processes.append(process)
    log.info("%d %s worker(s) connecting to %s", workers, stage, endpoint)
    stopping = False

    def stop(signum: int, _: Any) -> None:
        nonlocal stopping
        stopping = True
        for p in processes:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGTERM)  # each leaves: says BYE, so its frames go elsewhere

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while any(p.is_alive() for p in processes):
            time.sleep(0.2)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    codes = [p.exitcode for p in processes]
    failed = [i for i, code in enumerate(codes) if code not in (0, -signal.SIGTERM if stopping else 0)]
    if failed:
        log.error("%s worker(s) %s failed (exit codes %s)", stage, failed, [codes[i] for i in failed])
        return 1
    return 0
