"""Event clips cut from a bounded ring of a source's compressed packets, without re-encoding.

`PacketRing` holds the last `seconds` of a source's packets (and at most `max_bytes`), always from
a video key frame on, so a clip can start at the key frame at or before its pre-roll. `ClipCutter`
is one source's clips: an event at time t asks for [t - pre, t + post]; while a clip is open an
event extends it (clips that overlap merge) up to `max_s`, past which the event opens the next
clip once this one closes. Packets go into the open clip as they arrive, up to its end; it closes
once the frames (which come later than the packets: they went through the model) have passed its
end, since no event can extend it then, and the packets up to its end are in. The file is
fragmented MP4 (media.remux), written as it goes, so a clip cut short by a crash plays up to it.

Times are seconds on the source's timeline, the frames' and the packets' alike (sources.packets).
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from framewire.media.remux import PacketFile, Templates, packet_of

log = logging.getLogger(__name__)

MAX_WAITING = 1000
"""Events kept for a clip not open yet (its packets not in, or the open clip full), per source."""


@dataclass(slots=True)
class RingPacket:
    number: int
    """Its place in the source's packets (1, 2, ...): what a clip has written up to."""
    kind: str
    header: dict[str, Any]
    data: bytes
    time_s: float
    """Its decode time: packets arrive in this order."""
    key: bool
    streams: int
    """Which connection's streams it belongs to (`PacketRing.streams_seen`)."""


class PacketRing:
    """A source's recent packets, from a key frame on, bounded in time and bytes."""

    def __init__(self, seconds: float, max_bytes: int) -> None:
        self.seconds = seconds
        self.max_bytes = max_bytes
        self.packets: deque[RingPacket] = deque()
        self.bytes = 0
        self.count = 0
        self.templates: Any = None
        """What a clip's streams are made from: a `Templates`, or an encoder's (media.annotated)."""
        self.streams_seen = 0
        self.lost = 0
        """Packets the decode worker numbered but that never came (dropped on the way: wire.packets)."""
        self.trimmed = 0
        """Packets dropped from the ring younger than `seconds`, because it held `max_bytes`."""
        self._next: int | None = None

    def streams(self, init: bytes) -> None:
        """A new connection's streams: the packets after this are of them."""
        self.use(Templates(init))

    def use(self, templates: Any) -> None:
        """The streams of the packets after this: anything with `streams` (and `close()`)."""
        old, self.templates = self.templates, templates
        self.streams_seen += 1
        if old is not None and old is not templates:
            old.close()

    def add(self, header: dict[str, Any], data: bytes) -> RingPacket | None:
        number = header.get("n")
        if isinstance(number, int):
            if self._next is not None and number > self._next:
                self.lost += number - self._next
            self._next = number + 1
        kind = str(header.get("kind"))
        stamp = header.get("dts") if header.get("dts") is not None else header.get("pts")
        if self.templates is None or stamp is None:
            return None
        num, den = header["tb"]
        self.count += 1
        key = bool(header.get("key")) and kind == "video"
        packet = RingPacket(self.count, kind, header, data, stamp * num / den, key, self.streams_seen)
        if not self.packets and not packet.key:
            return packet  # the ring starts at a key frame
        self.packets.append(packet)
        self.bytes += len(data)
        self._trim(packet.time_s)
        return packet

    def _trim(self, newest: float) -> None:
        """Drop whole key-frame intervals from the front while the next one still covers `seconds`."""
        while True:
            following = next((p for i, p in enumerate(self.packets) if i and p.key), None)
            if following is None:
                return
            young = following.time_s > newest - self.seconds
            if young and self.bytes <= self.max_bytes:
                return
            while self.packets[0] is not following:
                self.bytes -= len(self.packets.popleft().data)
                self.trimmed += young

    def start_at(self, time_s: float) -> RingPacket | None:
        """The key frame at or before `time_s` (the oldest one when the ring does not reach back so far)."""
        found = None
        for packet in self.packets:
            if packet.key:
                if found is not None and packet.time_s > time_s:
                    break
                found = packet
        return found

    def after(self, number: int) -> list[RingPacket]:
        """The packets after packet `number`, in order."""
        return [p for p in self.packets if p.number > number]

    def close(self) -> None:
        if self.templates is not None:
            self.templates.close()
            self.templates = None


@dataclass
class Clip:
    """A clip being written, then closed."""

    path: str
    source: str
    start_s: float
    """Its first picture's time (a key frame at or before the first event's pre-roll)."""
    end_s: float
    first_event_s: float
    last_event_s: float
    file: PacketFile
    streams: int
    written: int = 0
    """The number of the last ring packet written."""
    last_s: float = 0.0
    """The time of the last video packet written, and one frame's duration: where it ends."""
    frames: int = 0
    events: list[Any] = field(default_factory=list)
    """What the caller gave with each event (the store's event ids)."""
    closed: bool = False
    id: Any = None


class ClipCutter:
    """One source's clips, from its ring; `name(start_s)` gives the path of a clip starting then."""

    def __init__(
        self, source: str, ring: PacketRing, *, pre_s: float, post_s: float, max_s: float,
        name: Callable[[float], str], on_open: Callable[[Clip], None] = lambda clip: None,
    ) -> None:  # fmt: skip
        self.source = source
        self.ring = ring
        self.pre_s, self.post_s, self.max_s = pre_s, post_s, max_s
        self.name = name
        self.on_open = on_open
        """Told of each clip as it opens (the store's row, which its events are linked to)."""
        self.open: Clip | None = None
        self.waiting: list[tuple[float, Any]] = []
        """Events past the open clip's maximum length: the next clip's, opened when this one closes."""
        self.frame_s = float("-inf")
        self.finished: list[Clip] = []

    def event(self, time_s: float, tag: Any = None) -> Clip | None:
        """An event at `time_s`: the clip it is in (opened, or extended), or None when it waits
        for the next clip (past `max_s`) or for its packets (the ring has no key frame yet)."""
        clip = self.open
        if clip is not None and time_s - self.pre_s <= clip.end_s:
            limit = clip.start_s + self.max_s
            if time_s + self.post_s <= limit:  # overlapping: they merge
                clip.end_s = max(clip.end_s, time_s + self.post_s)
                clip.last_event_s = max(clip.last_event_s, time_s)
                clip.events.append(tag)
                self._write(clip)
                return clip
            clip.end_s = limit  # as long as a clip may be: the event goes on in the next one
        if clip is not None:
            self.waiting.append((time_s, tag))
            return None
        return self._open(time_s, tag)

    def _open(self, time_s: float, tag: Any) -> Clip | None:
        start = self.ring.start_at(time_s - self.pre_s)
        if start is None or self.ring.templates is None:
            # Its packets have not come yet (they travel beside the frames): it waits for them.
            self.waiting = [*self.waiting[-MAX_WAITING + 1 :], (time_s, tag)]
            return None
        path = self.name(start.time_s)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        file = PacketFile(path, self.ring.templates.streams)
        file.open()
        num, den = start.header["tb"]
        first_s = start.header["pts"] * num / den
        clip = Clip(
            path, self.source, first_s, time_s + self.post_s, time_s, time_s, file, start.streams,
            written=start.number - 1, events=[tag],
        )  # fmt: skip
        clip.end_s = min(clip.end_s, clip.start_s + self.max_s)
        self.open = clip
        self.on_open(clip)
        self._write(clip)
        return clip

    def packets_arrived(self) -> list[Clip]:
        """Write what came into the ring since (an event waiting for its first packets gets its clip
        now); the clips that closed."""
        if self.open is None and self.waiting and self.ring.packets:
            waiting, self.waiting = self.waiting, []
            for time_s, tag in waiting:
                self.event(time_s, tag)
        if self.open is not None:
            self._write(self.open)
        return self.take()

    def frame(self, time_s: float) -> list[Clip]:
        """The output has reached `time_s`: a clip ending before it closes (once its packets are in)."""
        self.frame_s = max(self.frame_s, time_s)
        return self.packets_arrived()

    def take(self) -> list[Clip]:
        """The clips closed since the last call."""
        finished, self.finished = self.finished, []
        return finished

    def _write(self, clip: Clip) -> None:
        done = False
        for packet in self.ring.after(clip.written):
            if packet.streams != clip.streams:
                done = True  # the camera reconnected: its new streams go in the next clip
                break
            if packet.time_s > clip.end_s:
                # No event can reach it any more once the frames are a pre-roll past its end.
                done = self.frame_s > clip.end_s + self.pre_s
                break
            clip.file.write(packet.kind, packet_of(packet.data, packet.header))
            clip.written = packet.number
            if packet.kind == "video":
                clip.frames += 1
                num, den = packet.header["tb"]
                clip.last_s = max(
                    clip.last_s, (packet.header["pts"] + max(packet.header["duration"], 1)) * num / den
                )
        if done:
            self._close()

    def end(self) -> list[Clip]:
        """The source ended: the open clip closes with what it has."""
        while self.open is not None:  # an event waiting for the next clip gets what there is
            self._close()
        return self.take()

    def _close(self) -> None:
        clip, self.open = self.open, None
        if clip is None:
            return
        clip.file.close()
        clip.closed = True
        self.finished.append(clip)
        waiting, self.waiting = self.waiting, []
        for time_s, tag in waiting:
            self.event(time_s, tag)
