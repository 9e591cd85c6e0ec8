"""A source's recording as a series of video files: rotation, numbering, retention, announcements.

`Recording` hands each frame to the current segment (a `VideoFileWriter`), starts a new one every
`segment_s` of media time (a fresh encoder, so each segment opens on a keyframe and plays alone),
and when a segment closes: flushes it to disk, deletes the oldest files past the retention limits,
and tells `on_segment` (the output announces it). Without `segment_s` the recording is one file.

A segment is written as `<path>.part` and takes its name once its first bytes are on disk: for
fragmented MP4 that is its index and first complete fragment together, so every file under a
recording's name plays, even after a SIGKILL (a `.part` left by one is removed at the next start).
"""

from __future__ import annotations

import glob
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from framewire.media.video_writer import VideoFileWriter
from framewire.pipeline import paths

log = logging.getLogger(__name__)

OpenWriter = Callable[[str, float, bool], VideoFileWriter]
"""Makes (not opens) the writer of one segment: (path, the segment's start in media seconds, whether
it is the recording's first: a later one takes the audio from its start on)."""


@dataclass(frozen=True)
class Retention:
    """The files a recording keeps, oldest deleted first; the newest segment is always kept."""

    keep_segments: int | None = None
    keep_bytes: int | None = None
    keep_age_s: float | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.keep_segments, self.keep_bytes, self.keep_age_s))

    def expired(self, files: list[tuple[str, float, int]], now: float) -> list[str]:
        """Which of `files` (path, mtime, bytes; oldest first) to delete."""
        doomed: list[str] = []
        count, total = len(files), sum(size for _, _, size in files)
        for path, mtime, size in files[:-1]:  # never the newest
            over = (
                (self.keep_segments is not None and count > self.keep_segments)
                or (self.keep_bytes is not None and total > self.keep_bytes)
                or (self.keep_age_s is not None and now - mtime > self.keep_age_s)
            )
            if not over:
                break
            doomed.append(path)
            count, total = count - 1, total - size
        return doomed


@dataclass(frozen=True)
class Segment:
    """A closed segment, as an output announces it."""

    path: str
    index: int
    start_s: float
    """When its first frame was read (epoch seconds)."""
    first_pts: int
    frames: int
    duration_s: float
    bytes: int
    deleted: tuple[str, ...] = ()
    """Older files retention deleted when this one closed."""

    def event(self, source_id: str, output: str) -> dict[str, Any]:
        """The announcement (the output adds the record format's version `v`): on the ZeroMQ output,
        in the JSONL file, in the hub's log and metrics."""
        return {
            "source": source_id,
            "event": "segment",
            "output": output,
            "path": self.path,
            "index": self.index,
            "start": format(paths.start_of(self.start_s), "%Y-%m-%dT%H:%M:%S.%fZ"),
            "first_pts": self.first_pts,
            "frames": self.frames,
            "duration_s": round(self.duration_s, 6),
            "bytes": self.bytes,
            "deleted": list(self.deleted),
        }


PART = ".part"


@dataclass
class _Open:
    writer: VideoFileWriter
    path: str
    """Its name; the writer writes `path + PART` until `named`."""
    index: int
    start_s: float
    first_pts: int
    last_pts: int = 0
    frames: int = 0
    named: bool = False

    def name_when_written(self) -> None:
        """Rename `.part` to the segment's name once anything is on disk (see the module's docstring)."""
        if not self.named and _size(self.writer.path) > 0:
            os.replace(self.writer.path, self.path)
            self.named = True


class Recording:
    """One source's video output, in one file or in segments of `segment_s` (media time)."""

    def __init__(
        self,
        template: str,
        source_id: str,
        open_writer: OpenWriter,
        *,
        time_base: Fraction,
        fps: Fraction,
        segment_s: float | None = None,
        retention: Retention | None = None,
        on_segment: Callable[[Segment], None] | None = None,
        append: bool = False,
    ) -> None:
        """`append`: the first file goes on with the recording at its path (a resumed job, whose
        `open_writer` then appends: media.fragments) instead of starting one as `.part`."""
        self.template = template
        self.source_id = source_id
        self.open_writer = open_writer
        self.time_base = time_base
        self.fps = fps
        self.segment_s = segment_s
        self.retention = retention or Retention()
        self.on_segment = on_segment or (lambda segment: None)
        self._current: _Open | None = None
        self._next_index: int | None = None
        self._opened = 0
        self.append = append

    def write(self, image: np.ndarray, pts: int, read_at: float | None = None) -> None:
        """One frame; `read_at` (epoch seconds) dates a segment that starts with it."""
        current = self._current
        if current is not None and self.segment_s is not None and current.frames:
            if float((pts - current.first_pts) * self.time_base) >= self.segment_s:
                current.writer.audio_until_s = float(pts * self.time_base)  # the rest is the next one's
                self._close_current()
                current = None
        if current is None:
            current = self._open(pts, read_at if read_at is not None else time.time())
        current.writer.write(image, pts)
        current.last_pts = pts
        current.frames += 1
        current.name_when_written()

    def close(self) -> None:
        """Close the segment in progress (announced like the others); harmless to call twice."""
        self._close_current()

    def _open(self, pts: int, read_at: float) -> _Open:
        if self._next_index is None:
            self._next_index = self._first_index()
        index = self._next_index
        self._next_index += 1
        path = paths.render(self.template, self.source_id, index, read_at)
        append = self.append and self._opened == 0
        writer = self.open_writer(path if append else path + PART, float(pts * self.time_base), self._opened == 0)
        self._opened += 1
        writer.open()
        self._current = _Open(writer, path, index, read_at, pts, named=append)
        return self._current

    def _first_index(self) -> int:
        """Go on after the highest index already on disk: a restarted recording never writes over
        its own earlier segments (a template without {index} numbers from 0)."""
        ours = paths.regex(self.template, self.source_id)
        for stale in glob.glob(paths.pattern(self.template, self.source_id) + PART):
            if ours.match(stale.removesuffix(PART)):  # killed before its first fragment: nothing to play
                log.info("video_file output %s: removing what a killed run left", stale)
                _remove(stale)
        last = paths.last_index(self.template, self.source_id, paths.matching(self.template, self.source_id))
        return 0 if last is None else last + 1

    def _close_current(self) -> None:
        current, self._current = self._current, None
        if current is None:
            return
        current.writer.close()
        if not current.named and os.path.exists(current.writer.path):
            os.replace(current.writer.path, current.path)
        path = current.path
        _sync(path)
        frame_s = float(1 / self.fps) if self.fps else 0.0
        segment = Segment(
            path=path,
            index=current.index,
            start_s=current.start_s,
            first_pts=current.first_pts,
            frames=current.frames,
            duration_s=float((current.last_pts - current.first_pts) * self.time_base) + frame_s,
            bytes=_size(path),
            deleted=tuple(self._apply_retention(path)),
        )
        self.on_segment(segment)

    def _apply_retention(self, newest: str) -> list[str]:
        return expire_segments(self.template, self.source_id, self.retention, newest, "video_file output")


def expire_segments(
    template: str, source_id: str, retention: Retention | None, newest: str, owner: str
) -> list[str]:
    """Delete a source's files of `template` that `retention` lets go, oldest first, never `newest`
    (the segment just closed sorts last whatever the clock says); the paths deleted."""
    if not retention:
        return []
    files = []
    for path in paths.matching(template, source_id):
        try:
            st = os.stat(path)
        except OSError:
            continue
        files.append((path, st.st_mtime, st.st_size))
    files.sort(key=lambda f: (f[0] == newest, f[1], f[0]))
    deleted = []
    for path in retention.expired(files, time.time()):
        try:
            os.remove(path)
            deleted.append(path)
        except OSError as exc:
            log.warning("%s %s: cannot delete an old segment: %s", owner, path, exc.strerror or exc)
    return deleted


def _sync(path: str) -> None:
    """Push a closed segment to the disk: after a power cut it is whole or absent, not half written."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        log.debug("fsync %s failed: %s", path, exc)
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError as exc:
        log.warning("cannot remove %s: %s", path, exc.strerror or exc)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
