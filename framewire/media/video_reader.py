"""Reading one video source with PyAV: what the stream is, then every frame as BGR in order.

No processes and no sockets here; the decode worker wraps a `VideoReader`. Files are read strictly:
corrupt data and files that end early raise `SourceError` instead of silently losing frames.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import av
import av.audio.stream
import av.container
import av.video.stream
import cv2
import numpy as np

from framewire.media import yuv
from framewire.media.seek import seek_past
from framewire.media.stream_info import PacketSink, StreamInfo
from framewire.pipeline.errors import SourceError
from framewire.pipeline.uris import local_path, redact

log = logging.getLogger(__name__)

_FALLBACK_FPS = Fraction(25)
TEXT_CODECS = frozenset({"ansi", "bintext", "xbin", "idf"})
"""What FFmpeg's text-mode demuxers (tty for .txt/.nfo/.asc, bin, xbin, idf) decode: text drawn as
frames. A text file given as a video would otherwise run as dozens of frames of coloured letters."""


@dataclass(slots=True)
class DecodedFrame:
    """One decoded frame: BGR uint8 HxWx3 (C-contiguous) and its strictly increasing pts."""

    image: np.ndarray
    pts: int  # in StreamInfo.time_base units
    time_s: float  # pts * time_base
    index: int  # 0-based, in presentation order


class VideoReader:
    """Opens one source and yields its frames in order; `close()` releases it.

    Usage: `info = reader.open()`, then `for frame in reader.frames(): ...`, then `reader.close()`
    (or use it as a context manager, which opens and closes it).
    """

    def __init__(
        self,
        source_id: str,
        uri: str,
        *,
        options: Mapping[str, str] | None = None,
        format: str | None = None,
        timeout_s: float | None = None,
        live: bool = False,
    ) -> None:
        """Cheap: nothing is opened. `options` go to FFmpeg for non-file URIs (e.g. rtsp_transport);
        `format` names the input format (v4l2 for a camera, whose path is then not read as a file);
        `timeout_s` bounds opening and each read. `live`: a packet that does not decode (lost
        datagrams) is skipped and counted in `corrupt` instead of ending the source."""
        self.source_id = source_id
        self.uri = uri
        self.options = dict(options or {})
        self.format = format
        self.timeout_s = timeout_s
        self.live = live
        self.corrupt = 0
        self.audio_sink: Callable[[av.AudioFrame], None] | None = None
        """Live streams: set before `open()`, it receives the stream's own audio, decoded, as the
        packets are demuxed beside the video (sources.audio: `audio.uri: self`)."""
        self.packet_sink: PacketSink | None = None
        """Set before `open()`: sees every packet demuxed (video, and audio where there is some),
        before it is decoded: the passthrough recording and the clips' ring (sources.packets)."""
        self.warn_derived_pts = True
        """Whether the end of a read logs how many frames had no usable pts (a template read again on
        every loop says it once, on its first)."""
        self._container: av.container.InputContainer | None = None
        self._stream: av.video.stream.VideoStream | None = None
        self._info: StreamInfo | None = None
        self._reading = False
        self._resume: tuple[int, int | None] | None = None

    def resume_at(self, frame: int, after_pts: int | None = None) -> None:
        """Start `frames()` at frame index `frame` (a resumed job: its outputs hold the frames before).
        With `after_pts`, the pts of frame `frame - 1`, it seeks to the key frame at or before that
        and decodes only from there; without it (or when the file's pts are not usable for that) it
        decodes and drops the frames before."""
        self._resume = (frame, after_pts) if frame > 0 else None

    @property
    def info(self) -> StreamInfo:
        """The StreamInfo found by `open()`."""
        if self._info is None:
            raise SourceError(f"source {self.source_id}: not open")
        return self._info

    def open(self) -> StreamInfo:
        """Open the source and describe it; raises SourceError naming the source and the URI."""
        self.close()  # opening again starts over
        self._reading = False
        shown = redact(self.uri)
        container, stream, is_file = self._open_video(shown)
        # Frame threads hold frames back (one per thread): latency a live source does not want.
        stream.thread_type = "SLICE" if self.live else "AUTO"
        self._container, self._stream = container, stream
        self._info = self._describe(container, stream, shown, is_file=is_file)
        if self.packet_sink is not None:  # the video's packets, and the first audio stream's
            self.packet_sink.begin([stream, *container.streams.audio[:1]])
        log.info(
            "source %s: opened %s: %sx%s at %s fps, %s frames, audio %s",
            self.source_id, shown, self._info.width, self._info.height, float(self._info.fps),
            self._info.frame_count, self._info.audio_codec,
        )
        return self._info

    def check(self) -> None:
        """Open and close again: SourceError, as `open()` raises it, unless the source is a video.
        What `validate` and the start of a job ask of each file before any worker starts."""
        container, _, _ = self._open_video(redact(self.uri))
        container.close()

    def _open_video(
        self, shown: str
    ) -> tuple[av.container.InputContainer, av.video.stream.VideoStream, bool]:
        """The container, its video stream, and whether it is a local file; SourceError otherwise."""
        path = local_path(self.uri) if self.format is None else None
        if path is not None and not os.path.isfile(path):
            raise SourceError(f"source {self.source_id}: {_not_a_file(path)}: {shown}")
        try:
            if path is not None:
                container = av.open(path, mode="r")
            else:
                container = av.open(
                    self.uri, mode="r", format=self.format, options=self.options, timeout=self.timeout_s
                )
        except (av.FFmpegError, OSError) as err:
            reason = error_reason(err, self.timeout_s)
            if path is None:  # never chain: FFmpeg's own message holds the URI with its password
                raise SourceError(f"source {self.source_id}: cannot open {shown}: {reason}") from None
            raise SourceError(
                f"source {self.source_id}: cannot open {shown}: not a readable video ({reason})"
            ) from err
        if not container.streams.video:
            container.close()
            raise SourceError(f"source {self.source_id}: no video stream in {shown}")
        stream = container.streams.video[0]
        if stream.codec_context.name in TEXT_CODECS:
            demuxer = container.format.name
            container.close()
            raise SourceError(
                f"source {self.source_id}: not a video: {shown} (text, which FFmpeg's {demuxer} "
                "demuxer would draw as frames)"
            )
        return container, stream, path is not None

    def frames(self) -> Iterator[DecodedFrame]:
        """Decode every frame in order as BGR, with strictly increasing pts.

        A frame without pts, or whose pts does not increase, gets the previous pts plus one frame
        duration. Corrupt data raises SourceError naming the frame index; a file that yields fewer
        frames than its container declares raises SourceError ("truncated") after the last good frame.
        """
        for frame, pts, time_s, index in self._decoded():
            yield DecodedFrame(to_bgr(frame), pts, time_s, index)

    def pending_frames(self) -> Iterator[tuple[PendingImage, int, float]]:
        """`frames()` without the conversion: (image, pts, time) where the image is converted to BGR
        only when written into its destination (the decode worker's frame-pool slot), which saves
        a copy of every frame."""
        for frame, pts, time_s, _ in self._decoded():
            yield PendingImage(frame), pts, time_s

    def _decoded(self) -> Iterator[tuple[av.VideoFrame, int, float, int]]:
        """(frame, pts, time in seconds, index) of every frame, as `frames()` describes them.

        A frame without pts, or whose pts does not increase, gets the previous pts plus one frame
        duration. Corrupt data raises SourceError naming the frame index; a file that yields fewer
        frames than its container declares raises SourceError ("truncated") after the last good frame.
        """
        info = self.info
        container, stream = self._container, self._stream
        if container is None or stream is None or self._reading:
            raise SourceError(f"source {self.source_id}: frames() is read once, between open() and close()")
        self._reading = True
        step = info.frame_duration
        # pts * time_base in seconds as int arithmetic: the same float as through Fraction (both are
        # one correctly rounded division), without a Fraction a frame (a fifth of the live decode
        # worker's own Python time, py-spy: docs/benchmarks.md).
        num, den = info.time_base.numerator, info.time_base.denominator
        index = 0
        last_pts: int | None = None
        derived = 0
        try:
            decoded: Iterator[av.VideoFrame] = (
                self._decode_live(container, stream)
                if self.live or self.packet_sink is not None
                else container.decode(stream)
            )
            if self._resume is not None:
                decoded, index, last_pts = self._skip(*self._resume)
            for frame in decoded:
                pts = next_pts(frame.pts, last_pts, step)
                derived += pts != frame.pts
                last_pts = pts
                yield frame, pts, pts * num / den, index
                index += 1
        except av.FFmpegError as err:
            reason = error_reason(err, self.timeout_s)
            if self.live:
                lost = f"source {self.source_id}: stream lost after frame {index}"
                raise SourceError(f"{lost}: {reason}") from None
            raise SourceError(
                f"source {self.source_id}: decode error at frame {index}: {reason}"
            ) from err
        if derived and self.warn_derived_pts:
            log.warning(
                "source %s: %s of %s frames had no usable pts; derived them from the frame rate",
                self.source_id, derived, index,
            )
        self._check_complete(index, last_pts)
        log.info("source %s: end of stream after %s frames", self.source_id, index)

    def _skip(self, frame: int, after_pts: int | None) -> tuple[Iterator[av.VideoFrame], int, int | None]:
        """(the frames from index `frame` on, `frame`, the pts before it): by seeking when it can."""
        assert self._container is not None and self._stream is not None
        if after_pts is not None:
            found = seek_past(self._container, self._stream, after_pts)
            if found is not None:
                log.info("source %s: resuming at frame %d: sought past pts %d", self.source_id, frame, after_pts)
                return found, frame, after_pts
            log.info("source %s: cannot seek to frame %d; decoding the frames before it", self.source_id, frame)
            self.close()
            self._container, self._stream, _ = self._open_video(redact(self.uri))
        assert self._container is not None and self._stream is not None
        decoded = self._container.decode(self._stream)
        last: int | None = None
        step = self.info.frame_duration
        for index, skipped in enumerate(decoded):
            last = next_pts(skipped.pts, last, step)
            if index + 1 == frame:
                break
        return decoded, frame, last

    def close(self) -> None:
        """Release the container; harmless to call twice."""
        if self._container is not None:
            if self.packet_sink is not None:
                self.packet_sink.end()
            self._container.close()
            self._container = None
            self._stream = None

    def _decode_live(
        self, container: av.container.InputContainer, stream: av.video.stream.VideoStream
    ) -> Iterator[av.VideoFrame]:
        """Packet by packet, each shown to the packet sink first. Live, a packet that does not
        decode is skipped and counted; an error of the connection itself (or a read timeout) still
        raises. A file's corrupt packet raises, as `container.decode` does."""
        sink = self.packet_sink
        audio = container.streams.audio[0] if container.streams.audio else None
        if self.audio_sink is None and sink is None:
            audio = None
        for packet in container.demux(stream) if audio is None else container.demux(stream, audio):
            is_audio = packet.stream is audio
            frames = self._audio_packet(audio, packet) if is_audio else self._video_packet(stream, packet)
            if sink is not None and packet.size:
                sink.packet(packet)  # after decoding it: the sink may hand its data to a muxer
            yield from frames

    def _video_packet(self, stream: av.video.stream.VideoStream, packet: av.Packet) -> list[av.VideoFrame]:
        try:
            return stream.decode(packet)
        except av.InvalidDataError:
            if not self.live:
                raise
            self.corrupt += 1
            return []

    def _audio_packet(
        self, audio: av.audio.stream.AudioStream | None, packet: av.Packet
    ) -> list[av.VideoFrame]:
        if self.audio_sink is None or audio is None:
            return []
        try:
            frames = audio.decode(packet)
        except av.InvalidDataError:
            return []  # a lost audio packet is a gap in the audio ring, counted there
        for frame in frames:
            self.audio_sink(frame)
        return []

    def __enter__(self) -> VideoReader:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _describe(
        self,
        container: av.container.InputContainer,
        stream: av.video.stream.VideoStream,
        shown: str,
        *,
        is_file: bool,
    ) -> StreamInfo:
        fps = stream.average_rate or stream.guessed_rate or stream.base_rate
        if not fps:
            log.warning(
                "source %s: no frame rate in %s; assuming %s", self.source_id, shown, _FALLBACK_FPS
            )
            fps = _FALLBACK_FPS
        time_base = stream.time_base or Fraction(1, 90000)
        if stream.duration:
            duration_s: float | None = float(stream.duration * time_base)
        elif container.duration:
            duration_s = container.duration / av.time_base
        else:
            duration_s = None
        audio = container.streams.audio[0] if container.streams.audio else None
        return StreamInfo(
            source_id=self.source_id,
            uri=shown,
            width=stream.codec_context.width,
            height=stream.codec_context.height,
            fps=Fraction(fps),
            time_base=Fraction(time_base),
            frame_count=stream.frames or None,
            duration_s=duration_s,
            has_audio=audio is not None,
            audio_codec=audio.codec_context.codec.canonical_name if audio is not None else None,
            is_file=is_file,
        )

    def _check_complete(self, decoded: int, last_pts: int | None) -> None:
        """Raise SourceError when a file ended before what its container declares."""
        info = self.info
        if not info.is_file:
            return
        if info.frame_count is not None:
            if decoded < info.frame_count:
                raise SourceError(
                    f"source {self.source_id}: truncated: decoded {decoded} of {info.frame_count} frames"
                )
            return
        # Without a frame count (mkv) the declared duration is the only hint of a cut-short file.
        if info.duration_s is None:
            return
        covered = 0.0
        if last_pts is not None:
            covered = float((last_pts - self._stream_start() + info.frame_duration) * info.time_base)
        if info.duration_s - covered > max(0.5, 0.1 * info.duration_s):
            raise SourceError(
                f"source {self.source_id}: truncated: decoded {decoded} frames, "
                f"{covered:.2f} s of {info.duration_s:.2f} s"
            )

    def _stream_start(self) -> int:
        stream = self._stream
        return stream.start_time if stream is not None and stream.start_time is not None else 0


def _not_a_file(path: str) -> str:
    if os.path.isdir(path):
        return "is a directory"
    return "is not a file" if os.path.exists(path) else "file not found"  # /dev/null, a fifo


def error_reason(err: BaseException, timeout_s: float | None = None) -> str:
    """Why PyAV failed, in a few words and without the URI (FFmpeg's message repeats it, password
    and all); a read that the timeout interrupted says so."""
    if isinstance(err, av.ExitError) and timeout_s is not None:
        return f"no data for {timeout_s:g} s"
    return getattr(err, "strerror", None) or type(err).__name__


def next_pts(raw: int | None, last: int | None, step: int) -> int:
    """`raw` when it is known and after `last`; otherwise `last + step` (0 for a first frame).

    AVI, raw streams and some MPEG-4 Part 2 files give frames without pts or with repeated ones; the
    writer needs strictly increasing pts, so they are derived from the previous one and the frame rate.
    """
    if raw is None:
        return 0 if last is None else last + step
    if last is not None and raw <= last:
        return last + step
    return raw


class PendingImage:
    """A decoded frame not yet converted to BGR: `write_into(out)` converts it straight into `out`.

    The decode worker converts each frame into its frame-pool slot this way instead of converting
    into a new array and copying that into the slot: a 1080p frame is written once, not twice
    (the copy cost 0.45 ms a frame; docs/benchmarks.md, "Transport").
    """

    __slots__ = ("frame", "shape")

    def __init__(self, frame: av.VideoFrame) -> None:
        self.frame = frame
        self.shape = (frame.height, frame.width, 3)

    def write_into(self, out: np.ndarray) -> None:
        """Convert into `out`, a C-contiguous HxWx3 uint8 array of this frame's size, or its planes
        into an I420 array of its size (media.yuv: a job that keeps its frames as YUV)."""
        if yuv.is_i420(out):
            yuv.write_frame(self.frame, out)
        else:
            to_bgr(self.frame, out)


def to_bgr(frame: av.VideoFrame, out: np.ndarray | None = None) -> np.ndarray:
    """A decoded frame as a C-contiguous HxWx3 BGR uint8 array (written into `out` when given).

    8-bit 4:2:0 BT.601 limited-range frames of even size go through OpenCV: decode plus conversion
    measured 2.2x faster than libswscale's bgr24 path (bikes.mp4 1849 vs 816 fps, 720p 727 vs 323 fps
    on 2 cores), within 3-5 levels of it. Everything else goes through libswscale, which honours the
    frame's colour space and range.
    """
    if yuv.plain_bt601(frame) and frame.width % 2 == 0 and frame.height % 2 == 0:
        converted = cv2.cvtColor(frame.to_ndarray(), cv2.COLOR_YUV2BGR_I420, dst=out)
    else:
        converted = np.ascontiguousarray(frame.to_ndarray(format="bgr24"))
    if out is None:
        return converted
    if not np.shares_memory(converted, out):  # libswscale's path, or OpenCV refused `dst`
        np.copyto(out, converted)
    return out
