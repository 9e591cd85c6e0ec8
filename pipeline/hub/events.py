"""Outputs' announcements, on the hub: checked, logged, counted, and handed to every output.

A video_file output that cuts its recording in segments announces each closed one (an EVENT
message, media.segments.Segment.event); the hub itself announces a live source going offline and
coming back (`source_state`). The hub logs it, tells its observer (the metrics) and passes
it to every output, whose `Stage.event` records it: the jsonl output as a line of the source's file, the
zmq output as a message on the source's topic. An event is checked first, like every message off
the wire: a bad one is dropped and counted like any bad message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from framewire.pipeline.hub.observer import HubObserver
from framewire.pipeline.hub.peers import Roster
from framewire.pipeline.plan import Plan
from framewire.pipeline.wire import messages as msg

log = logging.getLogger(__name__)

MAX_EVENT_KEYS = 32
ANNOUNCED = ("segment", "clip")
"""What an output may announce: a closed video segment, a closed event clip (stages.outputs.recording)."""
MAX_DELETED = 1000
MAX_COUNTERS = 32


class Events:
    """What the hub does with an EVENT from an output worker."""

    def __init__(
        self, observer: HubObserver, roster: Roster, plan: Plan, sources: Callable[[], Collection[str]]
    ) -> None:
        self.observer = observer
        self.roster = roster
        self.stages = plan.output_names
        """The output stages: who gets the events."""
        self.outputs = frozenset(plan.output_names).union(*(spec.members for spec in plan.outputs))
        """Every output's name, a fused stage's members included: what an event's `output` may say."""
        self.sources = sources
        """The sources the hub knows: what an event's `source` may say."""
        self.counts: dict[str, dict[str, int]] = {}
        """Each output's running totals as it last sent them (STATS), by output name."""
        self._online: dict[str, bool] = {}
        """Each opened live source's state as last announced (source_state)."""

    def on_event(self, stage: str, event: Any) -> None:
        problem = self._problem(event)
        if problem is not None:
            self.observer.on_bad_message("event")
            log.warning("dropped a bad event from %s: %s", stage, problem)
            return
        source, output = event["source"], event["output"]
        deleted = event.get("deleted") or []
        if event["event"] == "clip":  # a recording output's event clip: logged, not counted as a segment
            log.info(
                "source %s: clip %s closed (%d frames, %d bytes)",
                source, event["path"], event["frames"], event["bytes"],
            )  # fmt: skip
            self._to_outputs(event)
            return
        self.observer.on_segment(source, output, event["bytes"], len(deleted))
        log.info(
            "source %s: segment %s closed (%d frames, %.1f s, %d bytes)%s",
            source, event["path"], event["frames"], event.get("duration_s", 0.0), event["bytes"],
            f"; retention deleted {len(deleted)} older file(s)" if deleted else "",
        )  # fmt: skip
        self._to_outputs(event)

    def source_state(self, source: str, online: bool, opened: bool) -> None:
        """A live source's state after its decode worker's STATS. Once it has opened and been online,
        each change is announced to every output as `{"event": "source", "state": "offline" |
        "online"}` (the sinks send it on, jsonl writes it); its connecting before that is not."""
        known = self._online.get(source)
        if not opened or (known is None and not online):
            self._online.pop(source, None)  # not started (or added again): nothing to compare with yet
            return
        self._online[source] = online
        if known is None or known == online:
            return
        log.info("source %s: %s", source, "online again" if online else "offline")
        self._to_outputs({"event": "source", "source": source, "state": "online" if online else "offline",
                          "wall": round(time.time(), 6)})  # fmt: skip

    def configured(self, source: str, settings: Mapping[str, Any], change: Mapping[str, Any]) -> None:
        """A source's settings changed at run time (PATCH /sources/{id}): announced to every output as
        `{"event": "configured", "source", "settings" (the whole of them), "change" (as sent), "wall"}`;
        the jsonl output writes it among the source's records, the sinks send it on."""
        log.info("source %s: settings changed: %s", source, ", ".join(sorted(change)) or "none")
        event = {"event": "configured", "source": source, "settings": dict(settings), "change": dict(change)}
        self._to_outputs({**event, "wall": round(time.time(), 6)})

    def _to_outputs(self, event: dict[str, Any]) -> None:
        for name in self.stages:
            for peer in self.roster.of(name):
                if peer.ready:
                    peer.send({"type": msg.EVENT, "event": event})

    def on_counts(self, stage: str, counters: Any) -> None:
        """An output's running totals (`Stage.counters`), by output name: kept for the report and
        handed to the observer. Checked like an event: a bad one is dropped and counted."""
        problem = _counts_problem(counters, self.outputs)
        if problem is not None:
            self.observer.on_bad_message("stats")
            log.warning("dropped bad counters from %s: %s", stage, problem)
            return
        for output, counts in counters.items():
            self.counts[output] = dict(counts)
            self.observer.on_output_counts(output, counts)

    def _problem(self, event: Any) -> str | None:
        """Why an event cannot be taken, or None."""
        if not isinstance(event, dict) or len(event) > MAX_EVENT_KEYS:
            return "not a map of at most 32 keys"
        if event.get("event") not in ANNOUNCED:
            return f"unknown event {str(event.get('event'))[:32]!r}"
        if event.get("source") not in self.sources():
            return f"unknown source {str(event.get('source'))[:64]!r}"
        if event.get("output") not in self.outputs:
            return f"unknown output {str(event.get('output'))[:64]!r}"
        for key in ("frames", "bytes"):
            if not isinstance(event.get(key), int) or event[key] < 0:
                return f"{key} must be a count"
        if not isinstance(event.get("path"), str):
            return "path must be a string"
        deleted = event.get("deleted") or []
        if not isinstance(deleted, list) or len(deleted) > MAX_DELETED:
            return "deleted must be a list of paths"
        return None


def _counts_problem(counters: Any, outputs: Collection[str]) -> str | None:
    """Why an output's STATS cannot be taken (not {output: {counter: count}} of known outputs), or None."""
    if not isinstance(counters, dict) or len(counters) > MAX_COUNTERS:
        return "not a map of outputs"
    for output, counts in counters.items():
        if output not in outputs:
            return f"unknown output {str(output)[:64]!r}"
        if not isinstance(counts, dict) or len(counts) > MAX_COUNTERS:
            return f"{output}: not a map of at most {MAX_COUNTERS} counters"
        for name, value in counts.items():
            if not isinstance(name, str) or len(name) > 32 or type(value) is not int or value < 0:
                return f"{output}: {str(name)[:32]!r} is not a counter name with a count"
    return None
