"""What the broker outputs send instead of every record: the events of a stream of records.

Read from the records the pipeline already writes (stages.outputs.record), per source, in order:

- `class_appeared` / `class_left`: a label is in a frame's detections and was not, or has not been
  for `gone_after_frames` frames (or the source ended);
- `track_started` / `track_ended`: a `track_id` (tracking:) is first seen, or has not been seen for
  `gone_after_frames` frames (or the source ended); the end says how long it lived;
- the analytics' own events of the frame (`crossed`, `entered`, `left`: results.analytics.events),
  at most one per track in `min_interval_s` of video;
- `source`: a source's stream `started` (its first frame here) or `ended` (its end of stream), and
  a live source gone `offline` or back `online` (announced by the hub);
- the outputs' announcements as they come (a closed video `segment`, media.segments).

Every event is a JSON map with `v` (the record version), `event`, `source` and `wall` (Unix time at
the output); those of a frame also `frame` (its seq), `pts` and `time` (seconds of video). A record
has `seq` and no `event`, so the two are told apart. docs/guides/sinks.md lists the fields.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from framewire.stages import detections
from framewire.stages.outputs.record import RECORD_VERSION


@dataclass
class _Track:
    label: str
    class_id: int
    first_time: float
    first_seq: int
    last_seen: int
    """The source's frame count (at this output) when the track was last in a frame."""
    last_time: float
    frames: int = 1
    last_sent: float = float("-inf")
    """Video time of the latest event about this track that was sent (min_interval_s)."""


@dataclass
class _Source:
    frames: int = 0
    classes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Label -> (class id, frame count when last seen)."""
    tracks: dict[int, _Track] = field(default_factory=dict)
    last_seq: int = -1
    last_time: float = 0.0


class EventDetector:
    """The events of each source's records, in order (one detector per output, in its process)."""

    def __init__(self, classes: Collection[str] = (), min_interval_s: float = 0.0, gone_after_frames: int = 15) -> None:
        self.classes = frozenset(classes)
        self.min_interval_s = float(min_interval_s)
        self.gone_after = int(gone_after_frames)
        self.sources: dict[str, _Source] = {}
        self.suppressed = 0
        """Events about a track left out because one came less than min_interval_s before."""

    def _wanted(self, label: Any) -> bool:
        return not self.classes or str(label) in self.classes

    def record(self, record: Mapping[str, Any], wall: float | None = None) -> list[dict[str, Any]]:
        """The events a frame's record brings (the first one of a source: `source` started first)."""
        wall = time.time() if wall is None else wall
        sid = str(record.get("source"))
        state = self.sources.get(sid)
        out: list[dict[str, Any]] = []
        at = {"frame": record.get("seq"), "pts": record.get("pts"), "time": record.get("time"), "wall": round(wall, 6)}
        if state is None:
            state = self.sources[sid] = _Source()
            out.append(_event("source", sid, at, state="started"))
        state.frames += 1
        state.last_seq, state.last_time = int(record.get("seq", -1)), float(record.get("time") or 0.0)
        found = [d for d in detections.of(record.get("results")) if self._wanted(d.get("label"))]
        out += self._classes(sid, state, found, at)
        out += self._tracks(sid, state, found, at)
        out += self._analytics(sid, state, record.get("results") or {}, at)
        return out

    def _classes(self, sid: str, state: _Source, found: list[dict[str, Any]], at: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        counts: dict[str, int] = {}
        for d in found:
            counts[str(d.get("label"))] = counts.get(str(d.get("label")), 0) + 1
        for d in found:
            label = str(d.get("label"))
            if label not in state.classes:
                out.append(_event("class_appeared", sid, at, label=label, class_id=d.get("class_id"), count=counts[label]))
            state.classes[label] = (int(d.get("class_id", -1)), state.frames)
        for label, (class_id, seen) in list(state.classes.items()):
            if state.frames - seen >= self.gone_after:
                del state.classes[label]
                out.append(_event("class_left", sid, at, label=label, class_id=class_id))
        return out

    def _tracks(self, sid: str, state: _Source, found: list[dict[str, Any]], at: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        now = float(at["time"] or 0.0)
        for d in found:
            if d.get("track_id") is None:
                continue
            track_id = int(d["track_id"])
            track = state.tracks.get(track_id)
            if track is None:
                track = state.tracks[track_id] = _Track(
                    str(d.get("label")), int(d.get("class_id", -1)), now, int(at["frame"] or 0), state.frames, now
                )
                track.last_sent = now
                out.append(_event("track_started", sid, at, track_id=track_id, label=track.label,
                                  class_id=track.class_id, box=d.get("box"), score=d.get("score")))  # fmt: skip
                continue
            track.last_seen, track.last_time = state.frames, now
            track.frames += 1
        for track_id, track in list(state.tracks.items()):
            if state.frames - track.last_seen >= self.gone_after:
                out.append(self._ended(state, sid, track_id, at))
        return out

    def _ended(self, state: _Source, sid: str, track_id: int, at: Mapping[str, Any]) -> dict[str, Any]:
        track = state.tracks.pop(track_id)
        return _event("track_ended", sid, at, track_id=track_id, label=track.label, class_id=track.class_id,
                      frames=track.frames, duration_s=round(track.last_time - track.first_time, 6))  # fmt: skip

    def _analytics(self, sid: str, state: _Source, results: Mapping[str, Any], at: dict[str, Any]) -> list[dict[str, Any]]:
        analytics = results.get("analytics")
        found = analytics.get("events") if isinstance(analytics, Mapping) else None
        out: list[dict[str, Any]] = []
        now = float(at["time"] or 0.0)
        for item in found or ():
            if not isinstance(item, Mapping) or not isinstance(item.get("event"), str):
                continue
            if "label" in item and not self._wanted(item["label"]):
                continue
            track = state.tracks.get(item["track_id"]) if isinstance(item.get("track_id"), int) else None
            if track is not None:
                if now - track.last_sent < self.min_interval_s:
                    self.suppressed += 1
                    continue
                track.last_sent = now
            fields = {k: v for k, v in item.items() if k not in ("event", "source")}
            out.append(_event(str(item["event"]), sid, at, **fields))
        return out

    def ended(self, source_id: str, wall: float | None = None) -> list[dict[str, Any]]:
        """A source's end of stream: its classes leave, its tracks end, then `source` ended."""
        wall = time.time() if wall is None else wall
        state = self.sources.pop(source_id, None)
        if state is None:
            return []
        at = {"frame": state.last_seq, "pts": None, "time": state.last_time, "wall": round(wall, 6)}
        out = [_event("class_left", source_id, at, label=label, class_id=class_id)
               for label, (class_id, _) in state.classes.items()]  # fmt: skip
        out += [self._ended(state, source_id, track_id, at) for track_id in list(state.tracks)]
        out.append(_event("source", source_id, at, state="ended", frames=state.frames))
        return out

    def announced(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        """An announcement (another output's closed segment, the hub's word that a live source went
        offline or came back): passed on as it is, with `v` and `wall` where it has none."""
        return [{"v": RECORD_VERSION, "wall": round(time.time(), 6), **event}]


def _event(name: str, source: str, at: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """An event map: version, name, source, where in the stream, then its own fields."""
    return {"v": RECORD_VERSION, "event": name, "source": source, **at, **fields}
