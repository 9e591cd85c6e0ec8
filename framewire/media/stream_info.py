"""What a video source holds (`StreamInfo`, found when it opens), and what may watch its packets.

Split from media.video_reader, which reads the source; `StreamInfo` goes over the wire as JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

import av
import av.stream


class PacketSink(Protocol):
    """Sees every compressed packet a reader demuxes, before it is decoded (framewire.sources.packets:
    the passthrough recording and the event clips' ring). `begin` at each open with the streams
    whose packets follow, `end` when the reader closes."""

    def begin(self, streams: Sequence[av.stream.Stream]) -> None: ...

    def packet(self, packet: av.Packet) -> None: ...

    def end(self) -> None: ...


@dataclass(frozen=True)
class StreamInfo:
    """What a source holds, found at open; sent over the wire, so `to_dict()` is plain JSON."""

    source_id: str
    uri: str  # redacted: safe to log and to send
    width: int
    height: int
    fps: Fraction  # average frame rate, or a guess when the container has none
    time_base: Fraction  # unit of every pts of this source
    frame_count: int | None  # from the container; None when it does not say (mkv, live)
    duration_s: float | None
    has_audio: bool
    audio_codec: str | None
    is_file: bool

    @property
    def frame_duration(self) -> int:
        """One frame's duration in time_base units (at least 1)."""
        return max(1, round(1 / (self.fps * self.time_base)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: Fractions become "num/den" strings."""
        return {
            "source_id": self.source_id,
            "uri": self.uri,
            "width": self.width,
            "height": self.height,
            "fps": f"{self.fps.numerator}/{self.fps.denominator}",
            "time_base": f"{self.time_base.numerator}/{self.time_base.denominator}",
            "frame_count": self.frame_count,
            "duration_s": self.duration_s,
            "has_audio": self.has_audio,
            "audio_codec": self.audio_codec,
            "is_file": self.is_file,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamInfo:
        """Inverse of `to_dict()`; a missing key or a bad fraction raises ValueError naming it."""
        try:
            return cls(
                source_id=str(data["source_id"]),
                uri=str(data["uri"]),
                width=int(data["width"]),
                height=int(data["height"]),
                fps=Fraction(data["fps"]),
                time_base=Fraction(data["time_base"]),
                frame_count=None if data["frame_count"] is None else int(data["frame_count"]),
                duration_s=None if data["duration_s"] is None else float(data["duration_s"]),
                has_audio=bool(data["has_audio"]),
                audio_codec=data["audio_codec"],
                is_file=bool(data["is_file"]),
            )
        except KeyError as err:
            raise ValueError(f"StreamInfo: missing key {err.args[0]!r}") from err
        except (TypeError, ValueError, ZeroDivisionError) as err:
            raise ValueError(f"StreamInfo: bad value in {dict(data)!r}: {err}") from err
