"""The loop every stage worker process runs (preprocess, infer, postprocess, composite, outputs).

A worker connects to the hub, says READY with the frames it may hold (its credits) and what its
stage declares (what it runs on), and then handles what the
hub sends: WORK (one frame: exactly one RESULT or FAILED goes back, which is also the credit coming
back), STREAM (a source's info, before its first frame), POOL with `drop` (a retired source's pool:
unmap it), EOS (a source ended: flush and answer CLOSED) and STOP. A stage with `max_batch > 1`
gets the WORK that is waiting as one batch (dynamic batching). Everything that talks to the
hardware (sessions, encoders, sockets) is created here, inside the spawned process.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections import deque
from typing import Any

import numpy as np

from framewire.pipeline.wire import messages as msg
from framewire.pipeline.errors import one_line
from framewire.pipeline.frame import Frame, Stage, StageContext
from framewire.pipeline.wire.framepool import PoolCache
from framewire.pipeline.worker.configure import configure
from framewire.pipeline.worker.hub_link import HubConnection, SupervisorWatch, WorkerSpec, setup_process

log = logging.getLogger(__name__)

POLL_MS = 200
COUNTS_INTERVAL_S = 1.0
"""How often, at most, an output's running totals (`Stage.counters`) go to the hub when they change."""
Message = tuple[dict[str, Any], dict[str, np.ndarray]]


def worker_main(spec: WorkerSpec, loop: type[Loop] | None = None) -> None:
    """Entry point of a stage worker process; `loop`: its message loop (a live-layout worker's:
    worker.live_loop.live_main), else `Loop`."""
    loop = loop or Loop
    setup_process(spec)
    conn = HubConnection.open(spec)
    context = StageContext(
        spec.stage,
        spec.index,
        emit=lambda event: conn.send({"type": msg.EVENT, "event": event}),
        status=lambda status: conn.send({**status, "type": msg.STATUS}),
        gone=SupervisorWatch(spec.supervisor_pid).gone,  # a stage waiting for its backend asks it
    )
    try:
        stage: Stage = spec.factory()
        stage.start(context)
    except BaseException as exc:  # start-up failures stop the worker loudly
        code = getattr(exc, "exit_code", 1)
        log.debug("start-up failed", exc_info=True)
        conn.send({"type": msg.FATAL, "error": one_line(exc), "exit": code})
        conn.close()
        os._exit(3)
    watch = SupervisorWatch(spec.supervisor_pid)
    conn.send(_ready(spec, stage))
    pools = PoolCache(on_attach=stage.pool_added, on_detach=stage.pool_removed)
    try:
        loop(conn, stage, pools, context.streams, watch, spec).run()
    finally:
        try:
            pools.close()
            stage.stop()
        finally:
            conn.close()


def _ready(spec: WorkerSpec, stage: Stage) -> dict[str, Any]:
    ready: dict[str, Any] = {"type": msg.READY, "stage": spec.stage, "index": spec.index, "credits": spec.credits}
    ready.update(stage.describe())  # e.g. the execution provider an infer worker ended up with
    return ready


class Loop:
    """One worker's message loop."""

    def __init__(
        self,
        conn: HubConnection,
        stage: Stage,
        pools: PoolCache,
        streams: dict[str, dict[str, Any]],
        watch: SupervisorWatch,
        spec: WorkerSpec,
    ) -> None:
        self.conn = conn
        self.stage = stage
        self.pools = pools
        self.streams = streams
        self.watch = watch
        self.spec = spec
        self.batch_limit = max(1, int(stage.max_batch))
        self.delay_s = float(stage.max_delay_ms) / 1000.0
        self.backlog: deque[Message] = deque()
        self._counts: dict[str, dict[str, int]] = {}
        self._counts_at = 0.0

    def run(self) -> None:
        while True:
            self._send_counts()
            received = self._next()
            if received is None:
                if self.watch.gone():
                    log.warning("supervisor is gone; exiting")
                    return
                continue
            if not self.handle(*received):
                return

    def handle(self, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> bool:
        """One message from the hub; False when it says STOP."""
        kind = header["type"]
        if kind == msg.WORK and self.batch_limit > 1:
            batch = [(header, tensors)]
            self._collect(batch)
            self._work_batch(batch)
        elif kind == msg.WORK:
            self._work(header, tensors)
        elif kind == msg.STREAM:
            self.streams[str(header["source"])] = dict(header["info"])
        elif kind == msg.POOL and header.get("drop"):  # a retired source's pool: unmap it
            self.pools.drop(str(header["drop"]))
            self.streams.pop(str(header.get("source")), None)
        elif kind == msg.EVENT:
            self._event(header.get("event"))
        elif kind == msg.EOS:
            source = str(header["source"])
            for _ in self.stage.flush(source):
                pass
            self._send_counts(force=True)  # the totals after the flush reach the hub before CLOSED
            self.conn.send({"type": msg.CLOSED, "source": source})
        elif kind == msg.CONFIGURE:
            configure(self.stage, header)
        elif kind == msg.STOP:
            return False
        return True

    def _send_counts(self, force: bool = False) -> None:
        """The stage's running totals to the hub (STATS) when they changed, at most once a
        COUNTS_INTERVAL_S unless `force`; a stage that cannot say them is logged, never fatal."""
        now = time.monotonic()
        if not force and now - self._counts_at < COUNTS_INTERVAL_S:
            return
        self._counts_at = now
        try:
            counts = self.stage.counters()
        except Exception as exc:
            log.error("%s: cannot read its counters: %s", self.spec.stage, one_line(exc))
            return
        if counts and counts != self._counts:
            self._counts = {name: dict(values) for name, values in counts.items()}
            self.conn.send({"type": msg.STATS, "counters": counts})

    def _event(self, event: Any) -> None:
        """An output's announcement, to record: a failure to write it is logged, never fatal."""
        if not isinstance(event, dict):
            return
        try:
            self.stage.event(event)
        except Exception as exc:
            log.error("%s: cannot record the event %s of source %s: %s",
                      self.spec.stage, event.get("event"), event.get("source"), one_line(exc))

    def _next(self) -> Message | None:
        """The next message: what waits in the backlog first; None after a quiet poll."""
        if self.backlog:
            return self.backlog.popleft()
        while self.conn.poll(POLL_MS):
            received = self.conn.receive()
            if received is not None:
                return received
        return None

    def _collect(self, batch: list[Message]) -> None:
        """Dynamic batching: add waiting WORK to `batch` until it is full or `delay_s` has passed since
        its first frame. Other messages keep their order in the backlog, after the batch."""
        backlog = self.backlog
        while backlog and len(batch) < self.batch_limit and backlog[0][0]["type"] == msg.WORK:
            batch.append(backlog.popleft())
        if backlog:
            return
        deadline = time.monotonic() + self.delay_s
        while len(batch) < self.batch_limit:
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            if not self.conn.poll(remaining_ms):
                return
            received = self.conn.receive()
            if received is None:
                continue
            if received[0]["type"] != msg.WORK:
                backlog.append(received)  # e.g. EOS: it must not overtake the frames before it
                return
            batch.append(received)

    def _work(self, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        if self._stale(header):
            return
        try:
            frame = self._frame(header, tensors)
            started = time.time()
            outs = list(self.stage.process(frame))
            if len(outs) > 1:
                raise RuntimeError(f"stage {self.spec.stage} returned {len(outs)} frames for one")
            out = outs[0] if outs else frame
            out.timings.setdefault(self.spec.stage, [started, time.time()])  # a fused stage stamps its own
            self._reply(out, with_tensors=bool(outs))
        except Exception as exc:
            self._failed(header.get("source"), header.get("seq"), exc)

    def _work_batch(self, batch: list[Message]) -> None:
        """`stage.process_batch` on several frames at once; one RESULT (or FAILED) per frame."""
        frames: list[Frame] = []
        for header, tensors in batch:
            if self._stale(header):
                continue
            try:
                frames.append(self._frame(header, tensors))
            except Exception as exc:
                self._failed(header.get("source"), header.get("seq"), exc)
        if not frames:
            return
        started = time.time()
        try:
            outs = list(self.stage.process_batch(frames))
            if len(outs) != len(frames):
                raise RuntimeError(f"stage {self.spec.stage} returned {len(outs)} frames for {len(frames)}")
        except Exception as exc:
            for frame in frames:
                self._failed(frame.source_id, frame.seq, exc)
            return
        finished = time.time()
        for out in outs:
            out.timings.setdefault(self.spec.stage, [started, finished])
            out.meta["batch"] = len(frames)
            self._reply(out, with_tensors=True)

    def _frame(self, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> Frame:
        """The frame a WORK describes, on its slot of the pool."""
        return Frame.from_wire(header, tensors, self.pools)

    def _reply(self, frame: Frame, *, with_tensors: bool) -> None:
        reply = frame.to_header()
        reply.update(type=msg.RESULT, stage=self.spec.stage)
        self.conn.send(reply, frame.tensors if with_tensors else None)

    def _stale(self, header: dict[str, Any]) -> bool:
        """A frame past its deadline before inference is not worth the time: say so, without
        tensors, and the hub drops it (a live source's max_staleness_ms)."""
        deadline = header.get("deadline")
        if not self.spec.skips_stale or not isinstance(deadline, int | float) or time.time() <= deadline:
            return False
        source, seq = header.get("source"), header.get("seq")
        log.debug("%s: source %s seq %s is stale; skipped", self.spec.stage, source, seq)
        self.conn.send({"type": msg.RESULT, "stage": self.spec.stage, "source": source, "seq": seq, "stale": True})
        return True

    def _failed(self, source: Any, seq: Any, exc: BaseException) -> None:
        stage = self.spec.stage
        log.error("%s failed on source %s seq %s: %s", stage, source, seq, one_line(exc))
        log.debug("%s", traceback.format_exc())
        self.conn.send({"type": msg.FAILED, "source": source, "seq": seq, "stage": stage, "error": one_line(exc)})
