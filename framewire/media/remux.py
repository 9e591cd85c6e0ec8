"""A source's own compressed packets copied into fragmented MP4 files: no decoder, no encoder.

`PacketFile` is one such file: its streams are copied from the source's (codec, parameters, SPS and
PPS), and each packet is muxed as it came, with its timestamps moved onto the source's timeline.
It is fragmented MP4 like the video_file output's (media.video_writer): a fragment at each key
frame and the file flushed after it, so a file cut short by a crash plays up to its last complete
fragment.

`PassthroughRecording` is a source's continuous recording in such files: a new segment at the first
key frame after `segment_s` of media time and at every reconnect (a camera's parameters may change
with it), each written as `<path>.part` and named once its first fragment is on disk, as
media.segments does, and the oldest deleted past the retention limits.
"""

from __future__ import annotations

import glob
import io
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import av
import av.container
import av.stream

from framewire.media.adts import adts, copy_stream, with_data, without_adts
from framewire.media.segments import PART, Retention, expire_segments
from framewire.pipeline import paths

log = logging.getLogger(__name__)

FRAGMENTED = {"movflags": "frag_keyframe+empty_moov+delay_moov+default_base_moof", "flush_packets": "1"}
"""A fragment at each key frame, the index with the first one (delay_moov: a file with bytes in it
has a fragment that plays), each written through to the file as it closes."""


def kind_of(stream: av.stream.Stream) -> str:
    """`video` or `audio` (the only streams copied)."""
    return str(stream.type)


class PacketFile:
    """One fragmented MP4 of copied packets, its streams made from `templates` (demuxer streams)."""

    def __init__(self, path: str, templates: Sequence[av.stream.Stream]) -> None:
        self.path = path
        self.templates = [t for t in templates if kind_of(t) in ("video", "audio")]
        self.packets = 0
        self.frames = 0
        self._container: av.container.OutputContainer | None = None
        self._streams: dict[str, av.stream.Stream] = {}
        self._adts = {kind_of(t) for t in self.templates if adts(t)}
        """The kinds whose packets lose their ADTS headers here (the passthrough's; a clip's come without)."""

    def open(self) -> None:
        """Create the file; OSError or av.FFmpegError when it cannot be."""
        self._container = av.open(self.path, mode="w", format="mp4", options=dict(FRAGMENTED))
        for template in self.templates:
            kind = kind_of(template)
            if kind not in self._streams:
                self._streams[kind] = copy_stream(self._container, template)

    def write(self, kind: str, packet: av.Packet) -> None:
        """Mux `packet` (its pts and dts already on the file's timeline, in `packet.time_base`)."""
        stream = self._streams.get(kind)
        if self._container is None or stream is None:
            return
        if kind in self._adts:
            packet = with_data(packet, without_adts(bytes(packet)))
        packet.stream = stream
        self._container.mux(packet)
        self.packets += 1
        self.frames += kind == "video"

    def close(self) -> None:
        """Finish the file (its last fragment); harmless to call twice."""
        container, self._container = self._container, None
        if container is not None:
            container.close()


@dataclass(frozen=True)
class ClosedSegment:
    """A passthrough segment once closed: what the log says of it."""

    path: str
    index: int
    frames: int
    bytes: int
    deleted: tuple[str, ...] = ()


class PassthroughRecording:
    """A source's packets in key-frame segments of `segment_s` media seconds, under `template`
    (media paths: `{source_id}`, `{index}`, `{start}`)."""

    def __init__(
        self,
        template: str,
        source_id: str,
        *,
        segment_s: float,
        retention: Retention | None = None,
        on_segment: Callable[[ClosedSegment], None] | None = None,
    ) -> None:
        self.template = template
        self.source_id = source_id
        self.segment_s = segment_s
        self.retention = retention or Retention()
        self.on_segment = on_segment or (lambda segment: None)
        self._templates: Sequence[av.stream.Stream] = ()
        self._file: PacketFile | None = None
        self._name = ""
        self._index: int | None = None
        self._start_s = 0.0
        self._named = False

    def begin(self, templates: Sequence[av.stream.Stream]) -> None:
        """A connection's streams: the segment in progress closes; the next starts at its first key frame."""
        self.close()
        self._templates = templates

    def write(self, kind: str, packet: av.Packet, time_s: float, key: bool) -> None:
        """One packet at `time_s` on the source's timeline; a segment opens only at a video key frame."""
        current = self._file
        if kind == "video" and key and (current is None or time_s - self._start_s >= self.segment_s):
            self.close()
            current = self._open(time_s)
        if current is None:
            return  # before the connection's first key frame: nothing could decode it
        current.write(kind, packet)
        if not self._named and _size(current.path) > 0:
            os.replace(current.path, self._name)
            current.path, self._named = self._name, True

    def close(self) -> None:
        """Close the segment in progress; harmless to call twice."""
        current, self._file = self._file, None
        if current is None:
            return
        current.close()
        if not self._named and os.path.exists(current.path):
            if current.packets:
                os.replace(current.path, self._name)
            else:
                _remove(current.path)
                return
        assert self._index is not None
        segment = ClosedSegment(self._name, self._index, current.frames, _size(self._name))
        deleted = tuple(self._expire(self._name))
        self.on_segment(ClosedSegment(segment.path, segment.index, segment.frames, segment.bytes, deleted))

    def _open(self, time_s: float) -> PacketFile:
        if self._index is None:
            self._index = self._first_index()
        else:
            self._index += 1
        self._name = paths.render(self.template, self.source_id, self._index, time.time())
        os.makedirs(os.path.dirname(self._name) or ".", exist_ok=True)
        self._file = PacketFile(self._name + PART, self._templates)
        self._file.open()
        self._start_s, self._named = time_s, False
        return self._file

    def _first_index(self) -> int:
        """After the highest index on disk; a `.part` a killed run left (no fragment in it) is removed."""
        for stale in glob.glob(paths.pattern(self.template, self.source_id) + PART):
            _remove(stale)
        last = paths.last_index(self.template, self.source_id, paths.matching(self.template, self.source_id))
        return 0 if last is None else last + 1

    def _expire(self, newest: str) -> list[str]:
        return expire_segments(self.template, self.source_id, self.retention, newest, "recording")


START = re.compile(b"\x00\x00\x01")
LENGTH_PREFIXED = ("h264", "hevc")
"""The codecs whose MP4 samples are NAL units with 4-byte lengths (ISO 14496-15)."""


def annex_b(stream: av.stream.Stream) -> bool:
    """Whether `stream`'s packets are H.264/HEVC NAL units after start codes (RTSP, MPEG-TS, raw
    .h264) rather than with lengths (MP4, Matroska): its extradata is not an avcC/hvcC record."""
    if kind_of(stream) != "video" or stream.codec_context.name not in LENGTH_PREFIXED:
        return False
    extradata = stream.codec_context.extradata or b""
    return extradata[:1] != b"\x01"


def length_prefixed(data: bytes) -> bytes:
    """An Annex B packet's NAL units, each after its 4-byte length: what an MP4 sample holds when
    its stream's parameters are an avcC/hvcC record, as `init_segment` writes them. The muxer does
    this itself only for a stream whose own extradata is Annex B (the passthrough's)."""
    units = [unit.rstrip(b"\x00") for unit in START.split(data)]
    return b"".join(len(unit).to_bytes(4, "big") + unit for unit in units if unit)


def init_segment(templates: Sequence[av.stream.Stream]) -> bytes:
    """The streams of `templates` (video and audio) as an MP4 init segment: how a process that never
    opened the source learns its codec parameters (pipeline.wire.packets). H.264/HEVC parameters are
    written as an avcC/hvcC record, so Annex B packets go with it `length_prefixed`."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4", options={"movflags": "empty_moov"}) as container:
        for template in templates:
            if kind_of(template) in ("video", "audio"):
                copy_stream(container, template)
        container.start_encoding()
    return buffer.getvalue()


class Templates:
    """The streams an init segment describes, kept open as templates for new files."""

    def __init__(self, init: bytes) -> None:
        """av.FFmpegError when `init` is not an MP4 init segment."""
        self._container = av.open(io.BytesIO(init), mode="r")
        self.streams: list[av.stream.Stream] = [
            s for s in self._container.streams if kind_of(s) in ("video", "audio")
        ]

    def close(self) -> None:
        self._container.close()


def packet_of(data: bytes, header: dict[str, Any]) -> av.Packet:
    """A packet rebuilt from its bytes and its wire header (pipeline.wire.packets)."""
    packet = av.Packet(data)
    packet.pts, packet.dts = header.get("pts"), header.get("dts")
    packet.duration = int(header.get("duration") or 0)
    num, den = header["tb"]
    packet.time_base = Fraction(int(num), int(den))
    packet.is_keyframe = bool(header.get("key"))
    return packet


def header_of(kind: str, packet: av.Packet) -> dict[str, Any]:
    """The wire header of a packet (pipeline.wire.packets)."""
    tb = packet.time_base
    return {
        "kind": kind, "pts": packet.pts, "dts": packet.dts, "duration": packet.duration,
        "tb": [tb.numerator, tb.denominator], "key": packet.is_keyframe,
    }  # fmt: skip


def shifted(header: dict[str, Any], offset: Fraction) -> dict[str, Any]:
    """A packet's wire header (`header_of`) with `offset` seconds added to its pts and dts, in place."""
    if offset:
        num, den = header["tb"]
        ticks = round(offset * den / num)
        for key in ("pts", "dts"):
            if header[key] is not None:
                header[key] += ticks
    return header


def _remove(path: str) -> bool:
    try:
        os.remove(path)
        return True
    except OSError as exc:
        log.warning("recording %s: cannot delete: %s", path, exc.strerror or exc)
        return False


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
