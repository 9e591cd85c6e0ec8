"""What a source's decode worker does with the compressed packets it demuxes: the passthrough
recording, and the packets an event-clip output keeps in its ring.

The remux runs here, in the decode worker, because this is the process that already holds every
packet: the recording costs a mux of bytes already in memory (no decoder, no encoder, no copy to
another process), and it misses nothing the decoder gets, whatever the source's drop policy does
to the frames later (a `drop_oldest` camera's recording still has every packet). The clips need
the events, found after the model in the output worker, so their packets go there
(pipeline.wire.packets), a message each, never waiting.

Timestamps: a file's packets keep theirs. A live source's connection starts its clock over; its
packets are moved onto the source's timeline as media.live moves its frames: after a reconnect
they go on from the end of the last packet plus the time offline, so the recording's time is
continuous (its gap is the camera's) and a clip's times compare with the frames'.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import av
import av.stream

from framewire.media.adts import adts, without_adts
from framewire.media.remux import (
    PassthroughRecording,
    annex_b,
    header_of,
    init_segment,
    kind_of,
    length_prefixed,
    packet_of,
    shifted,
)
from framewire.media.segments import Retention
from framewire.pipeline.frame import FrameSource
from framewire.pipeline.plan import SourcePlan
from framewire.pipeline.wire.packets import PacketPush

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TapSpec:
    """What a job asks of its sources' packets (built from the `recording` outputs: app.compose)."""

    passthrough: tuple[tuple[str, float, Retention], ...] = ()
    """(path template, segment_s, retention) of each passthrough recording."""
    clip_endpoints: tuple[str, ...] = ()
    """The ipc:// endpoint of each output that cuts clips."""

    def __bool__(self) -> bool:
        return bool(self.passthrough or self.clip_endpoints)


class PacketTap:
    """The `PacketSink` of one source's readers (one reader a connection)."""

    def __init__(
        self, source_id: str, recordings: Sequence[PassthroughRecording], pushes: Sequence[PacketPush]
    ) -> None:
        self.source_id = source_id
        self.recordings = list(recordings)
        self.pushes = list(pushes)
        self.packets = 0
        self._kinds: dict[Any, str] = {}
        self._offset: Fraction | None = None
        self._end: Fraction | None = None
        """The end of the last video packet on the source's timeline (seconds)."""
        self._lost_at: float | None = None
        self._held: list[tuple[dict[str, Any], bytes]] = []
        self._last_dts: int | None = None
        self._step = 1
        self._annex_b = False
        """The connection's video packets have start codes: the clips' get lengths (remux.length_prefixed)."""
        self._adts = False
        """Its AAC packets have ADTS headers: the clips' lose them (their init segment has the config)."""

    @classmethod
    def build(cls, source_id: str, spec: TapSpec) -> PacketTap:
        recordings = [
            PassthroughRecording(
                path,
                source_id,
                segment_s=segment_s,
                retention=retention,
                on_segment=functools.partial(_logged, source_id),
            )  # fmt: skip
            for path, segment_s, retention in spec.passthrough
        ]
        return cls(source_id, recordings, [PacketPush(e, source_id) for e in spec.clip_endpoints])

    def begin(self, streams: Sequence[av.stream.Stream]) -> None:
        """A connection's streams: its timestamps are placed on the source's at its first video packet."""
        self._kinds = {s: kind_of(s) for s in streams}
        self._annex_b = any(annex_b(s) for s in streams)
        self._adts = any(adts(s) for s in streams)
        self._offset = None
        self._held = []
        self._last_dts = None
        video = next((s for s in streams if kind_of(s) == "video"), None)
        rate = (video.average_rate or video.guessed_rate or 25) if video is not None else 25
        self._step = max(1, round(1 / (Fraction(rate) * video.time_base))) if video and video.time_base else 1
        for recording in self.recordings:
            recording.begin(streams)
        if self.pushes:
            init = init_segment(streams)
            for push in self.pushes:
                push.streams(init)

    def packet(self, packet: av.Packet) -> None:
        kind = self._kinds.get(packet.stream)
        if kind is None:
            return
        header, data = header_of(kind, packet), bytes(packet)  # the demuxer's packet stays the reader's
        if kind == "video" and header["dts"] is None:
            # An RTSP camera's first packets come before its clock is known, and with B-frames
            # FFmpeg gives the next few a pts but no dts: they wait for the first dts (_release).
            if self._last_dts is None:
                self._held.append((header, data))
                return
            header["dts"] = self._last_dts + self._step
            if header["pts"] is None:
                header["pts"] = header["dts"]
        if kind == "video":
            if self._held:
                self._release(header)
            self._last_dts = header["dts"]
        if header["dts"] is None or header["pts"] is None:
            return  # an audio packet FFmpeg gives no time: nothing could place it
        self._timed(kind, header, data)

    def _release(self, first: dict[str, Any]) -> None:
        """The packets held before `first`, the first with a dts: theirs are its less a frame each, in
        decode order; a missing pts is its dts, moved past them to the earliest pts known less a frame
        (the key frame of a stream with B-frames shows first, before the pictures decoded after it)."""
        held, self._held = self._held, []
        for back, (header, _) in enumerate(reversed(held), start=1):
            header["dts"] = first["dts"] - back * self._step
        known = [p for p in (*(h["pts"] for h, _ in held), first["pts"]) if p is not None] or [first["dts"]]
        timeless = [h for h, _ in held if h["pts"] is None]
        if timeless:
            delay = max(0, min(known) - self._step - timeless[-1]["dts"])
            for header in timeless:
                header["pts"] = header["dts"] + delay
        for header, data in held:
            self._timed("video", header, data)

    def _timed(self, kind: str, header: dict[str, Any], data: bytes) -> None:
        """A packet with its times, on the source's timeline, to the recordings and the clips."""
        if self._offset is None:
            if kind != "video" and self._end is not None:
                return  # audio before a new connection's first picture: its place is not known yet
            self._offset = self._place(header) if kind == "video" else Fraction(0)
        shifted(header, self._offset)
        num, den = header["tb"]
        if kind == "video":
            end = Fraction((header["dts"] + max(header["duration"], 1)) * num, den)
            self._end = end if self._end is None else max(self._end, end)
        time_s = header["pts"] * num / den
        for recording in self.recordings:
            recording.write(kind, packet_of(data, header), time_s, header["key"])
        if self.pushes:
            wired = data
            if kind == "video" and self._annex_b:
                wired = length_prefixed(data)
            elif kind == "audio" and self._adts:
                wired = without_adts(data)
            for push in self.pushes:
                push.packet(header, wired)
        self.packets += 1

    def _place(self, header: dict[str, Any]) -> Fraction:
        """The offset (seconds) that puts this connection's first packet after the last one's end,
        past the time offline; 0 for the source's first connection."""
        if self._end is None:
            return Fraction(0)
        gap = Fraction(time.monotonic() - self._lost_at) if self._lost_at is not None else Fraction(0)
        num, den = header["tb"]
        return self._end + gap - Fraction(header["dts"] * num, den)

    def end(self) -> None:
        """The reader closed (the source ended, or its connection was lost): the segments close."""
        self._lost_at = time.monotonic()
        for recording in self.recordings:
            recording.close()

    def close(self) -> None:
        self.end()
        for push in self.pushes:
            if push.dropped:
                log.warning("source %s: %d packet(s) dropped for the clips (the output fell behind)",
                            self.source_id, push.dropped)  # fmt: skip
            push.close()


def _logged(source_id: str, segment: Any) -> None:
    log.info(
        "source %s: passthrough segment %s closed (%d frames, %d bytes)%s",
        source_id,
        segment.path,
        segment.frames,
        segment.bytes,
        f"; retention deleted {len(segment.deleted)}" if segment.deleted else "",
    )


class Tapped:
    """A source whose readers show their packets to a `PacketTap` (FileSource and LiveSource, with
    audio or not: their `packet_sink`); any other source is read as it is (its frames are not
    PyAV's packets)."""

    def __init__(self, inner: FrameSource, tap: PacketTap) -> None:
        self.inner = inner
        self.tap = tap
        video: Any = inner
        while hasattr(video, "inner"):
            video = video.inner  # a source with audio (sources.audio.WithAudio) around its video source
        target = getattr(video, "reader", video)  # a FileSource's VideoReader, or a LiveSource itself
        if hasattr(target, "packet_sink"):
            target.packet_sink = tap
        else:
            log.warning(
                "source %s: a %s source has no packets to record", tap.source_id, type(inner).__name__
            )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # stats, set_interrupt, attach_audio: the source's own

    def open(self) -> dict[str, Any]:
        info: dict[str, Any] = self.inner.open()
        return info

    def frames(self) -> Any:
        return self.inner.frames()

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            self.tap.close()


def tapped(factory: Callable[[], FrameSource], source_id: str, spec: TapSpec) -> FrameSource:
    """The decode worker's source: built by `factory`, its packets shown to the tap (in the worker)."""
    return Tapped(factory(), PacketTap.build(source_id, spec))  # type: ignore[return-value]


def tap_plan(plan: SourcePlan, spec: TapSpec) -> SourcePlan:
    """`plan` whose source is tapped, when the job records or cuts clips; else `plan` as it is."""
    if not spec:
        return plan
    return replace(plan, factory=functools.partial(tapped, plan.factory, plan.source_id, spec))
