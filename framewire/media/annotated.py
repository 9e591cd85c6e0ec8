"""The composited frames of a source encoded as they come, into a packet ring: what an annotated
event clip (boxes burned in) is cut from, as the camera's own clips are cut from its packets.

The pre-roll must be there before the event, so every frame is encoded while the source runs: x264
ultrafast, zerolatency (no frame held back), a key frame a second, one thread; the cost of a
video_file output of the same frames at that preset.
"""

from __future__ import annotations

import io
from fractions import Fraction

import av
import av.container
import av.stream
import numpy as np

from framewire.media.clips import PacketRing
from framewire.media.remux import header_of


class AnnotatedEncoder:
    """One source's composited frames, encoded into `ring` (whose templates it is)."""

    def __init__(self, ring: PacketRing, width: int, height: int, fps: Fraction, time_base: Fraction) -> None:
        self.ring = ring
        self.time_base = time_base
        self._container: av.container.OutputContainer = av.open(
            io.BytesIO(), mode="w", format="mp4", options={"movflags": "empty_moov"}
        )
        stream = self._container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width - width % 2, height - height % 2, "yuv420p"
        stream.time_base = time_base
        stream.codec_context.gop_size = max(1, round(fps))
        stream.codec_context.options = {"preset": "ultrafast", "tune": "zerolatency", "threads": "1"}
        self._container.start_encoding()  # the stream's parameters (SPS, PPS) are known from here
        self.stream = stream
        self.streams: list[av.stream.Stream] = [stream]
        self._open = True
        ring.use(self)

    def write(self, bgr: np.ndarray, pts: int) -> None:
        """One composited BGR frame at `pts` (the source's time base)."""
        height, width = self.stream.height, self.stream.width
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(bgr[:height, :width]), format="bgr24")
        frame.pts, frame.time_base = pts, self.time_base
        for packet in self.stream.encode(frame):
            self.ring.add(header_of("video", packet), bytes(packet))

    def close(self) -> None:
        """Flush the encoder into the ring; harmless to call twice."""
        if not self._open:
            return
        self._open = False
        for packet in self.stream.encode(None):
            self.ring.add(header_of("video", packet), bytes(packet))
        self._container.close()
