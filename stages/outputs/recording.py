"""`kind: recording`: event clips of the source's own packets, snapshots, and the event history.

The passthrough recording itself is written in each source's decode worker (sources.packets says
why); this output does what needs the events, which are found after the model: it keeps a ring of
each source's packets (sent by its decode worker: pipeline.wire.packets), reads the events of each
frame's record as the broker outputs do (stages.outputs.events), and for each event a rule in
`clips.events` names: stores it (media.history), takes its snapshot, and opens or extends its source's
clip (media.clips). Each closed clip is announced to every output (`{"event": "clip", "path": ...}`:
the jsonl file, the zmq output, the brokers) and the history's retention runs for its source.
"""

from __future__ import annotations

import logging
import os
import time
import functools
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from framewire.config.recording import ClipRule, RecordingOutput

from framewire.media import yuv
from framewire.media.annotated import AnnotatedEncoder
from framewire.media.clips import Clip, ClipCutter, PacketRing
from framewire.media.history import DB, History
from framewire.pipeline.frame import Frame, Stage, StageContext
from framewire.pipeline.ops.recordings import clip_url
from framewire.pipeline.stagespec import Facts
from framewire.pipeline.wire.packets import STREAMS, PacketPull, endpoint_for
from framewire.stages import detections
from framewire.stages.outputs.events import EventDetector
from framewire.stages.outputs.record import RECORD_VERSION, composited_image, frame_record
from framewire.stages.outputs.snapshots import Snapshots

log = logging.getLogger(__name__)


def matches(rule: ClipRule, event: Mapping[str, Any]) -> bool:
    """Whether an event is one the rule names (every key it gives matches)."""
    return (
        event.get("event") == rule.event
        and (rule.labels is None or str(event.get("label")) in rule.labels)
        and (rule.line is None or event.get("line") == rule.line)
        and (rule.zone is None or event.get("zone") == rule.zone)
        and (rule.sources is None or event.get("source") in rule.sources)
    )


class RecordingSink(Stage):
    """Clips, snapshots and the history of every source (one process for all of them)."""

    Config = RecordingOutput
    facts = Facts(writes_output=True)

    def __init__(self, config: RecordingOutput) -> None:
        self.config = config
        self.ctx = StageContext("output", 0)
        self.detector = EventDetector()
        self.snapshots = Snapshots(config.snapshots) if config.snapshots is not None else None
        self.history: History | None = None
        self.pull: PacketPull | None = None
        self.cutters: dict[str, ClipCutter] = {}
        self.annotated: dict[str, tuple[AnnotatedEncoder, ClipCutter]] = {}
        """`clips.annotated`: each source's encoder of its composited frames, and the clips cut from it."""
        self.http_url: str | None = None
        """The daemon's HTTP server (`http://127.0.0.1:8700`; "" where its port is picked at start), set
        by compose where HTTP is on: each clip's announcement then carries its `url` as well."""
        self._clock: dict[str, tuple[float, float]] = {}
        """Each source's latest frame: (its time on the source's timeline, when it was read, epoch)."""

    def start(self, ctx: StageContext) -> None:
        self.ctx = ctx
        if self.config.clips is None:
            return  # passthrough only: the decode workers write it
        os.makedirs(self.config.folder, exist_ok=True)
        self.history = History.open(os.path.join(self.config.folder, DB))
        self.pull = PacketPull(endpoint_for(self.config.folder))

    def process(self, frame: Frame) -> Iterable[Frame]:
        if self.history is None:
            return ()
        self._drain()
        decode = frame.timings.get("decode")
        self._clock[frame.source_id] = (frame.time_s, decode[0] if decode else time.time())
        record = frame_record(frame)
        found = detections.of(record.get("results"))
        events = [e for e in self.detector.record(record) if self._wanted(e)]
        image = composited_image(frame) if self.snapshots is not None and (events or found) else None
        for event in events:
            self._event(frame.source_id, event, image, found)
        if self.config.clips is not None and self.config.clips.annotated:
            self._annotate(frame, [float(e.get("time") or 0.0) for e in events])
        if self.snapshots is not None and image is not None:
            for event_id, path, score in self.snapshots.frame(frame.source_id, image, found):
                self.history.put_snapshot(event_id, frame.source_id, path, score)
        self._closed(self._cutter(frame.source_id).frame(frame.time_s))
        return ()

    def _annotate(self, frame: Frame, events: list[float]) -> None:
        """`clips.annotated`: the composited frame into its source's ring, the events to its clips."""
        entry = self.annotated.get(frame.source_id)
        if entry is None:
            info = self.ctx.streams.get(frame.source_id) or {}
            c = self.config.clips
            assert c is not None
            ring = PacketRing(c.ring_s, int(c.ring_bytes))
            encoder = AnnotatedEncoder(ring, frame.width, frame.height, Fraction(info.get("fps", "25")),
                                       Fraction(info.get("time_base", "1/90000")))  # fmt: skip
            name = functools.partial(self._clip_path, frame.source_id, suffix=".annotated.mp4")
            cutter = ClipCutter(
                frame.source_id,
                ring,
                pre_s=c.pre_s,
                post_s=c.post_s,
                max_s=c.max_s,
                name=name,
                on_open=self._opened,
            )
            entry = self.annotated[frame.source_id] = (encoder, cutter)
        encoder, cutter = entry
        image = composited_image(frame)
        encoder.write(yuv.to_bgr(image) if yuv.is_i420(image) else image, frame.pts)
        for time_s in events:
            cutter.event(time_s, None)
        self._closed(cutter.frame(frame.time_s), annotated=True)

    def _wanted(self, event: Mapping[str, Any]) -> bool:
        if event.get("event") == "track_ended" and self.snapshots is not None:
            self.snapshots.track_ended(str(event.get("source")), event.get("track_id"))
        assert self.config.clips is not None
        return any(matches(rule, event) for rule in self.config.clips.events)

    def _event(self, source: str, event: dict[str, Any], image: Any, found: list[dict[str, Any]]) -> None:
        assert self.history is not None
        event_id = self.history.add_event(event)
        if self.snapshots is not None and image is not None:
            path = os.path.join(self.config.folder, source, "snapshots", f"{event_id}.jpg")
            score = self.snapshots.take(image, found, event, path, event_id)
            self.history.put_snapshot(event_id, source, path, score)
        clip = self._cutter(source).event(float(event.get("time") or 0.0), event_id)
        if clip is not None and clip.id is not None:
            self.history.link(event_id, clip.id)

    def _cutter(self, source: str) -> ClipCutter:
        cutter = self.cutters.get(source)
        if cutter is None:
            c = self.config.clips
            assert c is not None
            ring = PacketRing(c.ring_s, int(c.ring_bytes))
            name = functools.partial(self._clip_path, source)
            cutter = ClipCutter(
                source, ring, pre_s=c.pre_s, post_s=c.post_s, max_s=c.max_s, name=name, on_open=self._opened
            )
            self.cutters[source] = cutter
        return cutter

    def _drain(self) -> None:
        """Take the packets the decode workers sent since, into their rings and open clips."""
        assert self.pull is not None
        touched = set()
        for kind, source, payload, data in self.pull.received():
            ring = self._cutter(source).ring
            if kind == STREAMS:
                ring.streams(payload)
            else:
                ring.add(payload, data)
            touched.add(source)
        for source in touched:
            self._closed(self.cutters[source].packets_arrived())

    def counters(self) -> dict[str, dict[str, int]]:
        """The packets the clips missed, over the sources (the metrics' framewire_output_messages_total):
        `packets_lost` dropped on the way from the decode workers (this output fell behind by
        wire.packets.HWM), `packets_trimmed` dropped from a ring before `ring_s` for `ring_bytes`."""
        if self.config.clips is None:
            return {}
        rings = [cutter.ring for cutter in self.cutters.values()]
        lost, trimmed = sum(r.lost for r in rings), sum(r.trimmed for r in rings)
        return {self.ctx.stage: {"packets_lost": lost, "packets_trimmed": trimmed}}

    def _wall(self, source: str, time_s: float) -> float:
        at, wall = self._clock.get(source, (time_s, time.time()))
        return wall + (time_s - at)

    def _clip_path(self, source: str, start_s: float, suffix: str = ".mp4") -> str:
        wall = self._wall(source, start_s)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(wall)) + f".{int(wall * 1000) % 1000:03d}"
        return os.path.join(self.config.folder, source, "clips", f"{stamp}{suffix}")

    def _opened(self, clip: Clip) -> None:
        assert self.history is not None
        clip.id = self.history.start_clip(
            clip.source, clip.path, self._wall(clip.source, clip.start_s), clip.start_s
        )
        for event_id in clip.events:
            self.history.link(event_id, clip.id)

    def _closed(self, clips: list[Clip], annotated: bool = False) -> None:
        assert self.history is not None
        for clip in clips:
            size = _size(clip.path)
            end_s = max(clip.last_s, clip.start_s)
            self.history.finish_clip(clip.id, self._wall(clip.source, end_s), end_s, clip.frames, size)
            r = self.config.retention
            pruned = self.history.prune(
                clip.source, days=r.days, max_bytes=int(r.bytes) if r.bytes is not None else None
            )
            self.ctx.emit({
                "v": RECORD_VERSION, "source": clip.source, "event": "clip", "output": self.ctx.stage,
                "path": clip.path, "id": clip.id, "start_s": round(clip.start_s, 6), "end_s": round(end_s, 6),
                "first_event_s": round(clip.first_event_s, 6), "last_event_s": round(clip.last_event_s, 6),
                "frames": clip.frames, "bytes": size, "events": [e for e in clip.events if e is not None],
                "deleted": pruned.paths, **({"annotated": True} if annotated else {}),
                **self._url(clip),
            })  # fmt: skip

    def _url(self, clip: Clip) -> dict[str, str]:
        """The clip's URL on the HTTP server, for its announcement (none where HTTP is off)."""
        if self.http_url is None or clip.id is None:
            return {}
        return {"url": self.http_url + clip_url(self.ctx.stage, clip.id)}

    def flush(self, source_id: str) -> Iterable[Frame]:
        if self.history is None:
            return ()
        self._drain()
        self.detector.ended(source_id)
        cutter = self.cutters.pop(source_id, None)
        if cutter is not None:
            self._closed(cutter.end())
            cutter.ring.close()
        entry = self.annotated.pop(source_id, None)
        if entry is not None:
            entry[0].close()  # its last frames into the ring, then the clip closes with them
            self._closed(entry[1].end(), annotated=True)
            entry[1].ring.close()
        if self.snapshots is not None:
            self.snapshots.forget(source_id)
        return ()

    def stop(self) -> None:
        for source_id in list({*self.cutters, *self.annotated}):
            try:
                self.flush(source_id)
            except Exception as exc:  # one broken clip must not keep the others open
                log.error("recording output: closing the clips of source %s failed: %s", source_id, exc)
        if self.pull is not None:
            self.pull.close()
        if self.history is not None:
            self.history.close()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
