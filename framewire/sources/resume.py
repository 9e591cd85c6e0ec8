"""Where a file job that was stopped (killed, drained, run again) goes on: the last frame its outputs hold.

A source with `resume: true` reads its outputs before its first frame: each JSONL file holds frame
records 0..J-1 (a torn last line is dropped), each recording whole fragments holding frames 0..V-1
(media.fragments). The job goes on at the largest frame K that every output holds and that starts a
fragment of every recording; each output is cut back to exactly K frames, so the files agree, and
the outputs append from frame K (its seq stays the frame's index). The decode worker seeks to the
key frame before K (the pts of frame K-1 is in the JSONL) instead of decoding from the start.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

from framewire.media import fragments
from framewire.media.fragments import Recovered
from framewire.media.segments import PART
from framewire.pipeline.errors import FramewireError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResumeTargets:
    """The files a source's outputs write (rendered for it): what a resumed source reads and cuts."""

    jsonl: tuple[str, ...] = ()
    video: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResumePoint:
    """The first frame still to do, and the pts of the frame before it when an output says."""

    frame: int
    after_pts: int | None = None


@dataclass
class JsonlHeld:
    """A JSONL file's frame records: where each ends (bytes) and its pts, in seq order from 0."""

    path: str
    ends: list[int] = field(default_factory=list)
    pts: list[int] = field(default_factory=list)
    size: int = 0

    @property
    def frames(self) -> int:
        return len(self.ends)

    def end_of(self, frames: int) -> int:
        return self.ends[frames - 1] if frames else 0


def read_jsonl(path: str) -> JsonlHeld:
    """The frame records at the start of `path`, seq 0, 1, 2...: a torn last line (no newline) and
    anything after a record out of order are left out; event lines (no seq) go with the frames."""
    held = JsonlHeld(path)
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return held
    except OSError as err:
        raise FramewireError(f"jsonl output {path}: cannot read to resume: {err.strerror or err}") from err
    held.size = len(data)
    offset = 0
    while True:
        newline = data.find(b"\n", offset)
        if newline < 0:
            if offset < len(data):
                log.info("jsonl output %s: dropping a torn last line (%d bytes)", path, len(data) - offset)
            return held
        line, offset = data[offset:newline], newline + 1
        try:
            record = json.loads(line)
        except ValueError:
            log.warning("jsonl output %s: a line that is not JSON at byte %d; resuming before it", path, offset)
            return held
        if not isinstance(record, dict) or "event" in record:
            if held.ends:  # an event goes with the frames before it
                held.ends[-1] = offset
            continue
        seq, pts = record.get("seq"), record.get("pts")
        if seq != held.frames or type(pts) is not int:
            log.warning("jsonl output %s: record with seq %r where %d was due; resuming before it", path, seq, held.frames)
            return held
        held.ends.append(offset)
        held.pts.append(pts)


def recover(source_id: str, targets: ResumeTargets) -> ResumePoint:
    """Find the frame every output holds, cut every output back to it, and say where to go on."""
    jsonls = [read_jsonl(path) for path in targets.jsonl]
    videos: list[tuple[str, Recovered | None]] = [(path, fragments.scan(path)) for path in targets.video]
    counts = [j.frames for j in jsonls] + [v.frames() if v is not None else 0 for _, v in videos]
    frame = min(counts) if counts else 0
    while True:  # down to a fragment boundary of every recording (each step only lowers it)
        lowered = min([frame, *(v.boundary(frame)[0] for _, v in videos if v is not None)])
        if lowered == frame:
            break
        frame = lowered
    for held in jsonls:
        _cut(held.path, held.size, held.end_of(frame))
    for path, recovered in videos:
        _cut_video(path, recovered, frame)
    after = next((j.pts[frame - 1] for j in jsonls if frame), None)
    log.info(
        "source %s: resuming at frame %d (outputs held %s)", source_id, frame, ", ".join(str(c) for c in counts) or "nothing"
    )
    return ResumePoint(frame, after)


def _cut(path: str, size: int, offset: int) -> None:
    if offset >= size:
        return
    log.info("resume: cutting %s back from %d to %d bytes", path, size, offset)
    fragments.cut(path, offset)


def _cut_video(path: str, recovered: Recovered | None, frame: int) -> None:
    """Cut a recording back to the fragments holding `frame` frames; with none, remove it (and a
    `.part` a killed run left), so the output starts it again."""
    if recovered is None or frame == 0:
        for stale in (path, path + PART):
            if os.path.exists(stale):
                log.info("resume: removing %s (no frame to keep)", stale)
                os.remove(stale)
        return
    _, count = recovered.boundary(frame)
    _cut(path, recovered.size, recovered.end_of(count))
