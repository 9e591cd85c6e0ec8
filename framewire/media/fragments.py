"""Fragmented MP4 recordings cut back and appended to: what a resumed job needs of its recording.

A recording written as fragmented MP4 (media.video_writer, `fmp4`) is an init segment (ftyp, moov)
and then fragments (moof + mdat); a killed writer leaves a torn fragment at the end at most. `scan`
reads the boxes (never the pictures) and lists the complete fragments with the samples of each
track; `cut` truncates the file after a fragment. `FragmentAppender` is the file a second muxer
writes into: its init segment is checked against the recording's and dropped, and each fragment is
appended with its sequence number and decode times moved on, so the file plays as one recording
from its first frame to its last (checked with PyAV: every frame once, timestamps increasing).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from framewire.pipeline.errors import FramewireError

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">I4s")
_TRUN_FLAG_BYTES = ((0x100, 4), (0x200, 4), (0x400, 4), (0x800, 4))  # duration, size, flags, cts
_TFHD_FIELDS = ((0x1, 8), (0x2, 4))  # base data offset, sample description index: before the duration


def boxes(data: bytes | bytearray | memoryview, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, str, int]]:
    """(offset, size, type, header size) of each box between `start` and `end`; a box that does not
    fit (a torn one at the end of a killed recording) ends the walk, as does a size under its header."""
    end = len(data) if end is None else end
    offset = start
    while offset + 8 <= end:
        size, kind = _HEADER.unpack_from(data, offset)
        header = 8
        if size == 1:
            if offset + 16 > end:
                return
            size = struct.unpack_from(">Q", data, offset + 8)[0]
            header = 16
        if size < header or offset + size > end:
            return
        yield offset, size, kind.decode("latin-1"), header
        offset += size


def _child(data: bytes | bytearray, start: int, end: int, kind: str) -> tuple[int, int] | None:
    """(offset, size) of the first `kind` box directly inside [start, end)."""
    for offset, size, found, _ in boxes(data, start, end):
        if found == kind:
            return offset, size
    return None


def _path(data: bytes | bytearray, start: int, end: int, *kinds: str) -> tuple[int, int] | None:
    """(offset, size) of the box at the end of the path `kinds` inside [start, end)."""
    found: tuple[int, int] | None = None
    for kind in kinds:
        found = _child(data, start, end, kind)
        if found is None:
            return None
        start, end = found[0] + 8, found[0] + found[1]
    return found


@dataclass(frozen=True)
class Track:
    """One track of the init segment: how its samples are timed and described."""

    track_id: int
    handler: str
    """vide, soun, ..."""
    timescale: int
    description: bytes
    """The stsd box: codec and its parameters (SPS/PPS); appended fragments must share it."""
    default_duration: int
    """trex's default sample duration, for fragments that give none."""


@dataclass(frozen=True)
class Fragment:
    """One complete moof + mdat."""

    start: int
    end: int
    sequence: int
    samples: dict[int, int]
    """Samples per track id."""
    decode_end: dict[int, int]
    """Per track id, the decode time after its last sample (track timescale)."""


@dataclass
class Recovered:
    """What a fragmented MP4 holds: its init segment's end, tracks and complete fragments."""

    path: str
    init_end: int
    tracks: dict[int, Track]
    fragments: list[Fragment] = field(default_factory=list)
    size: int = 0

    @property
    def video(self) -> Track | None:
        return next((t for t in self.tracks.values() if t.handler == "vide"), None)

    def frames(self, upto: int | None = None) -> int:
        """Video frames in the first `upto` complete fragments (all of them when None)."""
        video = self.video
        if video is None:
            return 0
        return sum(f.samples.get(video.track_id, 0) for f in self.fragments[:upto])

    def boundary(self, frames: int) -> tuple[int, int]:
        """(frames, fragments) of the longest run of whole fragments holding at most `frames`."""
        held, count = 0, 0
        video = self.video
        for fragment in self.fragments:
            more = fragment.samples.get(video.track_id, 0) if video is not None else 0
            if held + more > frames:
                break
            held, count = held + more, count + 1
        return held, count

    def end_of(self, fragments: int) -> int:
        """The byte offset after the first `fragments` fragments."""
        return self.fragments[fragments - 1].end if fragments else self.init_end

    def decode_end(self, fragments: int | None = None) -> dict[int, int]:
        """Per track, the decode time after the first `fragments` fragments (all when None)."""
        ends = {track_id: 0 for track_id in self.tracks}
        for fragment in self.fragments[:fragments]:
            ends.update(fragment.decode_end)
        return ends


def scan(path: str) -> Recovered | None:
    """The complete fragments of the fragmented MP4 at `path`; None when it has no complete init
    segment (absent, empty, torn before its moov) or is not fragmented."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise FramewireError(f"video_file output {path}: cannot read to resume: {err.strerror or err}") from err
    recovered: Recovered | None = None
    moof: tuple[int, int] | None = None
    for offset, size, kind, header in boxes(data):
        if kind == "moov":
            tracks = _tracks(data, offset, size)
            if not tracks:
                return None
            recovered = Recovered(path, offset + size, tracks, size=len(data))
        elif recovered is None:
            continue
        elif kind == "moof":
            moof = (offset, size)
        elif kind == "mdat" and moof is not None:
            fragment = _fragment(data, moof[0], moof[1], offset + size, recovered.tracks)
            if fragment is None:
                break
            recovered.fragments.append(fragment)
            moof = None
    return recovered


def cut(path: str, offset: int) -> None:
    """Truncate the file at `path` to `offset` bytes and push that to the disk."""
    with open(path, "r+b") as file:
        file.truncate(offset)
        file.flush()
        os.fsync(file.fileno())


def _tracks(data: bytes, offset: int, size: int) -> dict[int, Track]:
    defaults: dict[int, int] = {}
    mvex = _child(data, offset + 8, offset + size, "mvex")
    if mvex is not None:
        for o, s, kind, _ in boxes(data, mvex[0] + 8, mvex[0] + mvex[1]):
            if kind == "trex" and s >= 32:
                track_id, _, duration = struct.unpack_from(">III", data, o + 12)
                defaults[track_id] = duration
    tracks: dict[int, Track] = {}
    for o, s, kind, _ in boxes(data, offset + 8, offset + size):
        if kind != "trak":
            continue
        tkhd, mdhd = _child(data, o + 8, o + s, "tkhd"), _path(data, o + 8, o + s, "mdia", "mdhd")
        hdlr, stsd = _path(data, o + 8, o + s, "mdia", "hdlr"), _path(data, o + 8, o + s, "mdia", "minf", "stbl", "stsd")
        if tkhd is None or mdhd is None or hdlr is None or stsd is None:
            continue
        track_id = struct.unpack_from(">I", data, tkhd[0] + (28 if data[tkhd[0] + 8] == 1 else 20))[0]
        timescale = struct.unpack_from(">I", data, mdhd[0] + (28 if data[mdhd[0] + 8] == 1 else 20))[0]
        handler = data[hdlr[0] + 16 : hdlr[0] + 20].decode("latin-1")
        tracks[track_id] = Track(track_id, handler, timescale, bytes(data[stsd[0] : stsd[0] + stsd[1]]), defaults.get(track_id, 0))
    return tracks


def _fragment(data: bytes, start: int, size: int, end: int, tracks: dict[int, Track]) -> Fragment | None:
    """The moof at `start` and the mdat ending at `end`, or None when the moof does not parse."""
    mfhd = _child(data, start + 8, start + size, "mfhd")
    if mfhd is None:
        return None
    samples: dict[int, int] = {}
    decode_end: dict[int, int] = {}
    for o, s, kind, _ in boxes(data, start + 8, start + size):
        if kind != "traf":
            continue
        timed = _traf(data, o, s, tracks)
        if timed is None:
            return None
        track_id, count, base, duration = timed
        samples[track_id] = samples.get(track_id, 0) + count
        decode_end[track_id] = base + duration
    return Fragment(start, end, struct.unpack_from(">I", data, mfhd[0] + 12)[0], samples, decode_end)


def _traf(data: bytes, offset: int, size: int, tracks: dict[int, Track]) -> tuple[int, int, int, int] | None:
    """(track id, samples, tfdt, their total duration) of a traf."""
    tfhd, tfdt = _child(data, offset + 8, offset + size, "tfhd"), _child(data, offset + 8, offset + size, "tfdt")
    if tfhd is None or tfdt is None:
        return None
    flags = struct.unpack_from(">I", data, tfhd[0] + 8)[0] & 0xFFFFFF
    track_id = struct.unpack_from(">I", data, tfhd[0] + 12)[0]
    track = tracks.get(track_id)
    if track is None:
        return None
    position = tfhd[0] + 16 + sum(n for bit, n in _TFHD_FIELDS if flags & bit)
    default = struct.unpack_from(">I", data, position)[0] if flags & 0x8 else track.default_duration
    base = struct.unpack_from(">Q" if data[tfdt[0] + 8] == 1 else ">I", data, tfdt[0] + 12)[0]
    count = duration = 0
    for o, _, kind, _ in boxes(data, offset + 8, offset + size):
        if kind != "trun":
            continue
        run_flags, run = struct.unpack_from(">II", data, o + 8)
        run_flags &= 0xFFFFFF
        position = o + 16 + (4 if run_flags & 0x1 else 0) + (4 if run_flags & 0x4 else 0)
        stride = sum(n for bit, n in _TRUN_FLAG_BYTES if run_flags & bit)
        if run_flags & 0x100:
            duration += sum(struct.unpack_from(">I", data, position + i * stride)[0] for i in range(run))
        else:
            duration += default * run
        count += run
    return track_id, count, base, duration


class FragmentAppender:
    """The file a fragmented-MP4 muxer writes into to go on with an existing recording.

    Its init segment (ftyp, moov) is checked against the recording's tracks and dropped; each moof
    gets the next sequence number and every track's decode times moved on to continue the
    recording's; moof and mdat are appended together; the muxer's closing index (mfra, whose
    offsets would point into a file of its own) is left out. Not seekable, so the muxer streams.
    """

    def __init__(self, recovered: Recovered) -> None:
        self.path = recovered.path
        self.recovered = recovered
        self._sequence = recovered.fragments[-1].sequence if recovered.fragments else 0
        self._ends = recovered.decode_end()
        self._shift: dict[int, int] | None = None
        self._buffer = bytearray()
        self._moof: bytes | None = None
        self.fragments = 0
        try:
            self._file = open(self.path, "r+b")  # noqa: SIM115 (closed by close())
            self._file.seek(recovered.end_of(len(recovered.fragments)))
            self._file.truncate()
        except OSError as err:
            raise FramewireError(f"video_file output {self.path}: cannot append: {err.strerror or err}") from err

    def write(self, data: bytes) -> int:
        self._buffer += data
        taken = 0
        for offset, size, kind, _ in boxes(self._buffer):
            self._box(kind, bytearray(self._buffer[offset : offset + size]))
            taken = offset + size
        del self._buffer[:taken]
        return len(data)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if self._file.closed:
            return
        if self._buffer:
            log.warning("video_file output %s: %d bytes of a torn box left out", self.path, len(self._buffer))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def _box(self, kind: str, box: bytearray) -> None:
        if kind == "moov":
            self._check(box)
        elif kind == "moof":
            self._moof = self._renumber(box)
        elif kind == "mdat" and self._moof is not None:
            # One write per fragment: a kill leaves at most this fragment torn, and `scan` drops it.
            self._file.write(self._moof + box)
            self._file.flush()
            self._moof = None
            self.fragments += 1

    def _check(self, moov: bytearray) -> None:
        """The new init segment must describe the same tracks: same codec parameters, same clock."""
        tracks = _tracks(bytes(moov), 0, len(moov))
        mine = self.recovered.tracks
        for track_id, track in tracks.items():
            old = mine.get(track_id)
            if old is None or (old.handler, old.timescale, old.description) != (track.handler, track.timescale, track.description):
                raise FramewireError(
                    f"video_file output {self.path}: cannot resume: its {track.handler} track differs from the "
                    "recording's (codec, size, crf or preset changed since it was written?)"
                )

    def _renumber(self, moof: bytearray) -> bytes:
        self._sequence += 1
        mfhd = _child(moof, 8, len(moof), "mfhd")
        if mfhd is not None:
            struct.pack_into(">I", moof, mfhd[0] + 12, self._sequence)
        first = self._shift is None
        shift = self._shift if self._shift is not None else {}
        for o, s, kind, _ in boxes(moof, 8, len(moof)):
            if kind != "traf":
                continue
            tfhd, tfdt = _child(moof, o + 8, o + s, "tfhd"), _child(moof, o + 8, o + s, "tfdt")
            if tfhd is None or tfdt is None:
                continue
            track_id = struct.unpack_from(">I", moof, tfhd[0] + 12)[0]
            wide = moof[tfdt[0] + 8] == 1
            base = struct.unpack_from(">Q" if wide else ">I", moof, tfdt[0] + 12)[0]
            if track_id not in shift:  # this track's first fragment: it starts where the recording's ends
                shift[track_id] = self._ends.get(track_id, 0) - base
            moved = base + shift[track_id]
            if not wide and moved >= 2**32:
                raise FramewireError(f"video_file output {self.path}: cannot resume: decode time past 32 bits")
            struct.pack_into(">Q" if wide else ">I", moof, tfdt[0] + 12, moved)
        if first:
            self._shift = shift
        return bytes(moof)
