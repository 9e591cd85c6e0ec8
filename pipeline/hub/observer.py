"""What the hub tells whoever watches it: each frame's way, and the workers' troubles.

The hub calls these in its own thread, as things happen; it imports no metrics. The daemon's
metrics implement them (pipeline.ops.telemetry.Telemetry); a test can give a recording fake.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol

from framewire.pipeline.hub.inputs import Inputs
from framewire.pipeline.hub.peers import Roster
from framewire.pipeline.hub.routing import Router
from framewire.pipeline.wire.framepool import FramePool


class HubObserver(Protocol):
    """Called by the hub loop; must be quick and must not raise."""

    def on_stage_done(self, source: str, stage: str, seconds: float | None) -> None:
        """A stage finished a frame (each member of a fused stage is reported); `seconds`: the time
        it spent on it, when it stamped its span."""

    def on_done(self, source: str, latency_s: float | None) -> None:
        """Every output wrote a frame; `latency_s`: from the start of its decode, when known."""

    def on_failed(self, source: str, stage: str) -> None:
        """A stage failed on a frame, which goes on unprocessed (`skip` on frame errors)."""

    def on_bad_message(self, reason: str) -> None:
        """A message broke the wire format, came from an unknown peer or carried a bad event: dropped."""

    def on_worker_restarted(self, stage: str) -> None:
        """A worker of `stage` died and will be started again."""

    def on_worker_stalled(self, stage: str) -> None:
        """A worker of `stage` held a frame past `stall_timeout_s` and was killed."""

    def on_provider(self, stage: str, index: int, provider: str) -> None:
        """The execution provider a worker says it runs on."""

    def on_backend(self, stage: str, index: int, available: bool) -> None:
        """Worker `index` of `stage` found its backend (an inference server) gone, or back."""

    def on_backend_times(self, stage: str, model: str, times: Mapping[str, Any]) -> None:
        """The backend's own totals for `model` (Triton's requests, queue and compute seconds)."""

    def on_segment(self, source: str, output: str, size: int, deleted: int) -> None:
        """An output closed a video segment of `size` bytes; retention deleted `deleted` older files."""

    def on_output_counts(self, output: str, counts: Mapping[str, int]) -> None:
        """An output's running totals as they are now (`Stage.counters`: a sink's sent, dropped...)."""

    def on_track_result(self, source: str, result: Any) -> None:
        """The stage that tracks (alone or in a fused stage) returned a frame: its `result`, whose
        `analytics` the metrics count (pipeline.ops.track_counts); once a frame, in order per source."""

    def on_tick(self, router: Router, roster: Roster, inputs: Inputs, pids: Mapping[str, int]) -> None:
        """Once a tick: the hub's state as it is now (queues, workers, sources, worker pids by name)."""


class FrameTap(Protocol):
    """Sees each finished frame in its slot before the slot goes back (the console's previews,
    pipeline.ops.preview); must return at once when it does not want the frame."""

    def frame_done(self, source: str, pool: FramePool, slot: int, written: Collection[str]) -> None:
        """Every output is done with the frame in `slot` of `pool`; `written`: its regions written."""
