"""The frame record stages work on, and the small lifecycle every stage follows."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import os

import numpy as np

from framewire.pipeline.stagespec import Facts
from framewire.pipeline.wire.audioring import AudioRing
from framewire.pipeline.wire.framepool import FramePool, PoolCache


IMAGE = "image"
"""The slot region that holds the frame as decoded."""
SHOWS = "shows"
"""The `meta` key that names the slot region holding the frame as the outputs and the console's preview
show it, set by a stage that drew on a copy of the image (the composite stage's `output`); absent: the
image as decoded."""


def traceparent() -> str:
    """A new W3C trace context (`00-<trace id>-<root span id>-01`) for a frame that is traced: chosen
    where the frame enters (its decode), carried in its header by every stage (`Frame.trace`), and
    read when every output wrote it (framewire.app.tracing exports its spans under these ids)."""
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"


def shown_region(meta: Mapping[str, Any] | None) -> str:
    """The slot region a frame with this `meta` is shown from (`SHOWS`)."""
    shown = meta.get(SHOWS) if meta else None
    return shown if isinstance(shown, str) else IMAGE


@dataclass
class Frame:
    """One frame of one source as it moves through the stages.

    The pixels stay in the frame pool (`region("image")`, `region("input")`, `region("output")`);
    `tensors` holds the small tensors that travel inline (model outputs, a matte), `meta` what
    preprocessing tells postprocessing, `result` the task's JSON answer, `timings` when each stage
    started and finished (seconds since the epoch), `error` why a stage could not process it, `trace`
    its trace context when it is traced (`traceparent`).
    """

    source_id: str
    seq: int
    pts: int
    time_s: float
    width: int
    height: int
    slot: int = -1
    pool: FramePool | None = None
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    timings: dict[str, list[float]] = field(default_factory=dict)
    error: str | None = None
    pool_wire: dict[str, Any] | None = None
    deadline: float | None = None
    """Seconds since the epoch after which the frame is stale: the worker loop skips inference for
    it and the hub drops it (a live source's `max_staleness_ms`); None: never stale."""
    inline: dict[str, np.ndarray] | None = None
    """A frame outside the daemon (a benchmark's hand-written loop, a test): its regions as plain
    arrays, in place of the pool; None: use the pool."""
    scratch: dict[str, np.ndarray] | None = None
    """Regions that live in this process only and never travel (the model input that a fused stage's
    preprocess writes for its own inference: `stages.preprocess`); looked up before the pool."""
    trace: str | None = None
    """The frame's W3C trace context (`traceparent`) when its source traces it (`tracing:`); None: not
    traced. Carried from stage to stage in the header (`trace`)."""

    def region(self, name: str) -> np.ndarray:
        """Region `name` (image, input, output) of this frame's slot: a view of shared memory, or
        the array `inline` (or `scratch`) holds."""
        if self.scratch is not None and name in self.scratch:
            return self.scratch[name]
        if self.inline is not None:
            try:
                return self.inline[name]
            except KeyError:
                raise RuntimeError(f"frame {self.source_id}#{self.seq}: no region {name!r} in `inline`") from None
        if self.pool is None:
            raise RuntimeError(f"frame {self.source_id}#{self.seq} has no frame pool")
        return self.pool.view(self.slot, name)

    def has_region(self, name: str) -> bool:
        if self.scratch is not None and name in self.scratch:
            return True
        if self.inline is not None:
            return name in self.inline
        return self.pool is not None and self.pool.has(name)

    # --- wire --------------------------------------------------------------------------------

    def to_header(self) -> dict[str, Any]:
        head: dict[str, Any] = {
            "source": self.source_id,
            "seq": self.seq,
            "pts": self.pts,
            "time": self.time_s,
            "w": self.width,
            "h": self.height,
            "slot": self.slot,
            "ts": self.timings,
        }
        if self.pool_wire is not None:
            head["pool"] = self.pool_wire
        if self.meta:
            head["meta"] = self.meta
        if self.result is not None:
            head["result"] = self.result
        if self.error is not None:
            head["error"] = self.error
        if self.deadline is not None:
            head["deadline"] = self.deadline
        if self.trace is not None:
            head["trace"] = self.trace
        return head

    @classmethod
    def from_wire(
        cls, header: Mapping[str, Any], tensors: dict[str, np.ndarray], pools: PoolCache | None
    ) -> Frame:
        pool_wire = header.get("pool")
        pool = pools.get(pool_wire) if (pools is not None and pool_wire) else None
        return cls(
            source_id=str(header["source"]),
            seq=int(header["seq"]),
            pts=int(header.get("pts", 0)),
            time_s=float(header.get("time", 0.0)),
            width=int(header.get("w", 0)),
            height=int(header.get("h", 0)),
            slot=int(header.get("slot", -1)),
            pool=pool,
            tensors=tensors,
            meta=dict(header.get("meta") or {}),
            result=header.get("result"),
            timings={k: list(v) for k, v in (header.get("ts") or {}).items()},
            error=header.get("error"),
            pool_wire=pool_wire,
            deadline=float(header["deadline"]) if header.get("deadline") is not None else None,
            trace=_trace(header.get("trace")),
        )


def _trace(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _unheard(event: dict[str, Any]) -> None:
    return None


def _never() -> bool:
    return False


@dataclass
class StageContext:
    """What a stage gets in its worker process: who it is and what the sources look like."""

    stage: str
    index: int
    streams: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Stream info per source id (size, frame rate, time base, uri), known before its first frame."""
    emit: Callable[[dict[str, Any]], None] = _unheard
    """Announce an event (a JSON-able map with `source` and `event`, e.g. a closed video segment):
    the hub logs and counts it and hands it to every output (`Stage.event`)."""
    status: Callable[[dict[str, Any]], None] = _unheard
    """Tell the hub how the stage's backend is: `{"available": False, "reason": ...}` while an
    inference server does not answer (the daemon is then not ready), `{"available": True}` when it
    does again, and `{"times": {...}}` the server's own counters for the metrics."""
    gone: Callable[[], bool] = _never
    """True once the worker's supervisor is gone: a stage that waits (for a backend) gives up."""


class Stage(Protocol):
    """A stage: built cheaply, started inside its worker, one frame in and zero or more out.

    A stage subclasses this and overrides what it needs: the lifecycle (`start`, `process`,
    `flush`, `stop`) and the capabilities the runtime reads from it instead of probing for them.
    """

    max_batch: int = 1
    """Frames `process_batch` takes at once; above 1 the worker loop gathers batches (of any source)."""
    max_delay_ms: float = 0.0
    """How long the worker loop waits for a batch to fill once its first frame is in."""
    facts: ClassVar[Facts] = Facts()
    """What every stage of the class does, as the runtime acts on it (ordered, sheds, skips stale
    frames, writes outputs...): the composition root copies it into the stage's `StageSpec`, so
    nothing builds a stage to ask. A class whose parameters decide says so in a `declare` classmethod."""

    def start(self, ctx: StageContext) -> None:
        """In the worker process: open sessions, encoders, sockets."""
        return None

    def process(self, frame: Frame) -> Iterable[Frame]: ...

    def process_batch(self, frames: Sequence[Frame]) -> list[Frame]:
        """Several frames at once (`max_batch > 1`), the same frames back in order. By default one
        `process` each."""
        out: list[Frame] = []
        for frame in frames:
            done = list(self.process(frame))
            out.append(done[0] if done else frame)
        return out

    def flush(self, source_id: str) -> Iterable[Frame]:
        """That source ended: close what is kept for it (an output's files, a tracker's tracks)."""
        return ()

    def stop(self) -> None:
        return None

    def event(self, event: dict[str, Any]) -> None:
        """Another output's announcement (`StageContext.emit`): an output that records events (jsonl,
        zmq) writes it; the others ignore it."""
        return None

    def describe(self) -> dict[str, Any]:
        """What this worker runs on, for READY and the metrics (e.g. the execution provider)."""
        return {}

    def configure(self, source_id: str, settings: dict[str, Any]) -> None:
        """That source's settings changed while the job runs (its lines, zones, score threshold...):
        the whole of them, as JSON, validated; they apply from its next frame here. Most stages
        ignore them."""
        return None

    def counters(self) -> dict[str, dict[str, int]]:
        """An output's running totals by output name (a sink's sent, dropped, reconnects...): the
        worker sends them to the hub as they change and before each CLOSED; the job's report and
        metrics carry them (`Report.outputs`). Most stages have none."""
        return {}

    def pool_added(self, pool: FramePool) -> None:
        """A source's frame pool was mapped in this worker (e.g. to register it as pinned memory)."""
        return None

    def pool_removed(self, pool: FramePool) -> None:
        """A source's pool is about to be unmapped (its source retired): let go of it first."""
        return None


class PendingPixels(Protocol):
    """A frame a source has decoded but not converted: it writes its BGR pixels into `out` (a
    frame-pool slot) itself, so the decode worker writes each frame once instead of twice; its I420
    planes where `out` has two dimensions (a job that keeps YUV frames, framewire.media.yuv)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    def write_into(self, out: np.ndarray) -> None: ...


class FrameSource(Protocol):
    """A source the decode worker reads: open it, then frames in order until it ends."""

    def open(self) -> dict[str, Any]:
        """Stream info (JSON-able): width, height, fps, time_base, frame_count, uri, ..."""
        ...

    def frames(self) -> Iterator[tuple[np.ndarray | PendingPixels, int, float]]:
        """(BGR image, pts in time-base units, time in seconds) for each frame; the image is an
        HxWx3 uint8 array, or `PendingPixels` that write themselves into the slot."""
        ...

    def close(self) -> None: ...


class SourceInterrupted(Exception):
    """A live source was told to stop while it waited (to connect, or for its first frame): the
    source ends without an error."""


@runtime_checkable
class LiveFrameSource(FrameSource, Protocol):
    """A FrameSource that waits on the network, a device or a producer, and may reconnect.

    The decode worker hands it `interrupted` before `open()`: the source calls it while it waits
    (between attempts, for a first frame) and gives up when it says True, with SourceInterrupted
    from `open()` or by ending `frames()`. `stats()` are its counters, sent on to the hub.
    """

    def set_interrupt(self, interrupted: Callable[[], bool]) -> None: ...

    def stats(self) -> dict[str, Any]:
        """Running totals: reconnects, offline_s, online, corrupt, rejected {reason: count}."""
        ...


@runtime_checkable
class AudioFrameSource(FrameSource, Protocol):
    """A FrameSource with audio (`sources[].audio`): its `open()` info asks for an audio ring
    (`"audio": {"rate": ..., "capacity_s": ...}`), the hub makes it beside the frame pool, and the
    decode worker hands it over before the first frame; the source writes its audio there."""

    def attach_audio(self, ring: AudioRing) -> None: ...
