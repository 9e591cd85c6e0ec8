"""H.264 MP4 output: every frame written with the pts it came with, and the source's audio copied in.

The output has exactly the input's frame count and timestamps: one encoded frame per `write()`, the
stream time_base is the source's, and nothing is dropped or duplicated. The MP4 muxer may pick a finer
time_base (e.g. 1/25 becomes 1/12800); the timestamps in seconds stay the same.

Two containers: `mp4`, whose index (the moov box) is written at `close()`, so a file whose process
was killed does not play at all; and `fmp4`, fragmented MP4, which writes a fragment (moof + mdat)
every `fragment_s` and so plays up to its last complete fragment whatever happens to the process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, cast

import av
import av.audio.codeccontext
import av.audio.stream
import av.container
import av.video.stream
import cv2
import numpy as np
import numpy.typing as npt

from framewire.media import yuv
from framewire.media.adts import adts, copy_stream, with_data, without_adts
from framewire.media.fragments import FragmentAppender, scan
from framewire.media.video_reader import StreamInfo
from framewire.pipeline.errors import FramewireError
from framewire.pipeline.uris import local_path

log = logging.getLogger(__name__)

MP4_AUDIO_CODECS = frozenset({"aac", "mp3", "alac", "opus"})
"""Audio copied into an MP4 as it is: what the players people use play from an MP4 (QuickTime,
Safari, browsers, VLC). Anything else becomes AAC: FLAC, AC-3 and E-AC-3 mux into MP4 but QuickTime,
Safari or Chrome refuse them; PCM, Vorbis and others do not mux at all."""
AAC_RATES = (7350, 8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000)
"""The sample rates AAC has; other rates are resampled to the next one up (at most 96 kHz)."""
_BT601 = 6  # AVCOL_SPC_SMPTE170M: the matrix OpenCV's BGR->I420 uses
_TV_RANGE = 1  # AVCOL_RANGE_MPEG
CONTAINERS = ("fmp4", "mp4")
COPIES_INPUT = frozenset({"libx264", "libx265"})
"""Encoders that copy each picture into frames of their own during `encode`: they are handed the
caller's memory without a copy (`VideoFileWriter._picture`)."""
# A fragment starts at each keyframe (the encoder makes one every `fragment_s`); the index (moov) is
# written once, with no samples in it, and every fragment is self-contained, so every complete
# fragment plays. The moov waits for the first fragment (delay_moov) so that its edit list can hide
# the B-frames' delay: measured, without it a clip starting at 4.0 s decoded from 4.08 s. FFmpeg
# buffers the file in 32 KiB blocks: flush_packets writes each fragment out as it is made, so a
# SIGKILL loses only the fragment in progress and the frames still inside the encoder.
_FRAGMENTED = {"movflags": "frag_keyframe+empty_moov+delay_moov+default_base_moof", "flush_packets": "1"}


class VideoFileWriter:
    """Encodes BGR frames to an H.264 (yuv420p) MP4 with the source's timestamps and audio.

    libx264 with 4:2:0 needs an even width and height: a frame of odd size is padded by one pixel on
    the right and/or bottom, repeating the edge pixels, so no content is lost and nothing is scaled
    (a 175x143 source gives a 176x144 file). Quality is constant (`crf`); every written frame is one
    output frame, none dropped or duplicated.
    """

    def __init__(
        self,
        path: str,
        info: StreamInfo,
        *,
        codec: str = "libx264",
        crf: int = 23,
        preset: str = "veryfast",
        threads: int = 0,
        audio_from: str | None = None,
        audio_track: Callable[[av.container.OutputContainer], AudioTrack] | None = None,
        container: str = "mp4",
        fragment_s: float = 1.0,
        audio_start_s: float | None = None,
        append: bool = False,
    ) -> None:
        """Cheap: nothing is opened. `audio_from` is a file whose first audio stream is copied in,
        from `audio_start_s` on (a later segment of a recording) or from its start; `audio_track`
        (instead) adds the audio track some other way, e.g. from a live source's audio ring
        (media.audio.RingTrack). `container`: `mp4` or `fmp4` (fragments of `fragment_s`, see the
        module's docstring). `append` (fmp4): go on with the recording already at `path`, cut back
        to whole fragments (a resumed job, media.fragments), its audio from where the file's ends."""
        if container not in CONTAINERS:
            raise ValueError(f"container must be one of {CONTAINERS}, got {container!r}")
        self.path = path
        self.info = info
        self.codec = codec
        self.crf = crf
        self.preset = preset
        self.threads = threads
        """The encoder's threads: 0 is its own choice."""
        self.audio_from = audio_from
        self.audio_track = audio_track
        self.container = container
        self.fragment_s = fragment_s
        self.audio_start_s = audio_start_s
        self.append = append and container == "fmp4"
        self._appender: FragmentAppender | None = None
        self.audio_until_s: float | None = None
        """Set before `close()` when the next segment of a recording starts there: the audio after it
        belongs to that segment. None: close() copies all the audio that is left."""
        self.width = info.width + info.width % 2
        self.height = info.height + info.height % 2
        self.frames_written = 0
        self._container: av.container.OutputContainer | None = None
        self._video: av.video.stream.VideoStream | None = None
        self._audio: AudioTrack | None = None
        self._last_pts: int | None = None
        self._closed = False

    def open(self) -> None:
        """Create parent directories and the file and write its header; errors name the path."""
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            container = av.open(self._target(), mode="w", format="mp4", options=self._muxer_options())
        except (OSError, av.FFmpegError) as err:
            if self._appender is not None:
                self._appender.close()
            raise FramewireError(f"video_file output {self.path}: cannot create: {_reason(err)}") from err
        self._container = container
        try:
            self._video = self._add_video(container)
            if self.audio_from is not None:
                copy = _AudioCopy.attach(self.audio_from, container, self.path)
                if copy is not None and self.audio_start_s:
                    copy.skip_until(self.audio_start_s)
                self._audio = copy
            elif self.audio_track is not None:
                self._audio = self.audio_track(container)
            # Writing the header now makes an unwritable path fail here rather than at the first frame.
            container.start_encoding()
        except (OSError, av.FFmpegError, ValueError) as err:
            self._abandon()
            raise FramewireError(f"video_file output {self.path}: cannot open: {_reason(err)}") from err
        log.info(
            "video_file output %s: open, %s %sx%s %s crf %s, time_base %s, audio %s",
            self.path,
            self.container,
            self.width,
            self.height,
            self.codec,
            self.crf,
            self.info.time_base,
            self._audio.mode if self._audio else None,
        )

    def _target(self) -> str | FragmentAppender:
        """The path, or the appender that adds the fragments to the recording already there."""
        recovered = scan(self.path) if self.append else None
        if recovered is None or not recovered.fragments:
            return self.path
        self._appender = FragmentAppender(recovered)
        ends = recovered.decode_end()
        sound = next((t for t in recovered.tracks.values() if t.handler == "soun"), None)
        if sound is not None and sound.timescale:  # the audio goes on where the file's ends
            self.audio_start_s = ends[sound.track_id] / sound.timescale
        log.info("video_file output %s: appending after %d frames", self.path, recovered.frames())
        return self._appender

    def _muxer_options(self) -> dict[str, str]:
        return dict(_FRAGMENTED) if self.container == "fmp4" else {}

    def write(self, image: np.ndarray, pts: int) -> None:
        """Encode one BGR HxWx3 uint8 frame, or an I420 one of the same size (media.yuv: encoded as
        it is, no conversion), at `pts` (source time_base units, strictly increasing)."""
        if self._container is None or self._video is None:
            raise FramewireError(f"video_file output {self.path}: write before open or after close")
        i420 = yuv.is_i420(image) and (self.width, self.height) == (self.info.width, self.info.height)
        expected = (
            yuv.shape(self.info.width, self.info.height) if i420 else (self.info.height, self.info.width, 3)
        )
        if image.shape != expected or image.dtype != np.uint8:
            raise FramewireError(
                f"video_file output {self.path}: frame {self.frames_written} is {image.shape} "
                f"{image.dtype}, expected {expected} uint8"
            )
        if self._last_pts is not None and pts <= self._last_pts:
            raise FramewireError(
                f"video_file output {self.path}: pts {pts} after {self._last_pts} is not increasing"
            )
        if i420:
            planar = image
        else:
            if self.width != image.shape[1] or self.height != image.shape[0]:
                image = cv2.copyMakeBorder(
                    image,
                    0,
                    self.height - image.shape[0],
                    0,
                    self.width - image.shape[1],
                    cv2.BORDER_REPLICATE,
                )
            # OpenCV's BGR->I420 measured 5x faster than libswscale here and within 1 level of it.
            planar = cast("npt.NDArray[np.uint8]", cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420))
        frame = self._picture(planar)
        frame.pts = pts
        frame.time_base = self.info.time_base
        try:
            if self._audio is not None:
                self._audio.copy_until(float(pts * self.info.time_base))
            self._container.mux(self._video.encode(frame))
        except (OSError, av.FFmpegError) as err:
            raise FramewireError(
                f"video_file output {self.path}: frame {self.frames_written} (pts {pts}): {_reason(err)}"
            ) from err
        self._last_pts = pts
        self.frames_written += 1

    def _picture(self, planar: np.ndarray) -> av.VideoFrame:
        """The encoder's input frame for an I420 array: its memory as it is where the encoder copies
        the picture in before `encode` returns (x264 and x265 do, into their own frames), so the
        frame-pool slot can be written again once the output has written it; a copy otherwise.
        The copy cost the 720p file job's output process 0.3-0.4 ms a frame (docs/results/history.md)."""
        if self.codec in COPIES_INPUT and planar.shape[0] % 6 == 0 and planar.flags.c_contiguous:
            # PyAV reads the picture's height as rows * 2 / 3 rounded down to a multiple of 4:
            # right only for heights that are multiples of 4 (rows a multiple of 6).
            return av.VideoFrame.from_numpy_buffer(planar, format="yuv420p")
        return av.VideoFrame.from_ndarray(planar, format="yuv420p")

    def close(self) -> None:
        """Flush the encoder and the rest of the audio and finish the file; harmless to call twice."""
        if self._closed or self._container is None:
            self._closed = True
            return
        self._closed = True
        container, video, audio = self._container, self._video, self._audio
        try:
            if video is not None:
                container.mux(video.encode(None))
            if audio is not None:
                audio.finish(self.audio_until_s)
        except (OSError, av.FFmpegError) as err:
            raise FramewireError(f"video_file output {self.path}: cannot finish: {_reason(err)}") from err
        finally:
            self._abandon()
        log.info("video_file output %s: closed after %s frames", self.path, self.frames_written)

    def __enter__(self) -> VideoFileWriter:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _add_video(self, container: av.container.OutputContainer) -> av.video.stream.VideoStream:
        stream = container.add_stream(self.codec, rate=self.info.fps)
        if not isinstance(stream, av.video.stream.VideoStream):
            raise ValueError(f"{self.codec} is not a video encoder")
        stream.width = self.width
        stream.height = self.height
        stream.pix_fmt = "yuv420p"
        stream.time_base = self.info.time_base
        stream.codec_context.time_base = self.info.time_base
        stream.codec_context.colorspace = _BT601
        stream.codec_context.color_range = _TV_RANGE
        if self.codec in ("libx264", "libx265"):
            stream.options = {"crf": str(self.crf), "preset": self.preset}
        if self.threads > 0:
            stream.codec_context.thread_count = self.threads
        if self.container == "fmp4":  # a keyframe, so a fragment, at least every fragment_s
            stream.codec_context.gop_size = max(1, round(float(self.info.fps) * self.fragment_s))
        return stream

    def _abandon(self) -> None:
        """Close the output and the audio source whatever state they are in."""
        if self._audio is not None:
            self._audio.close()
        if self._container is not None:
            try:
                self._container.close()
            finally:
                self._container = None
                self._video = None
                self._audio = None
                if self._appender is not None:  # after the muxer's last write
                    self._appender.close()


class AudioTrack(Protocol):
    """An output's audio: what the writer calls before each frame and at the end."""

    mode: str

    def copy_until(self, time_s: float) -> None:
        """Mux the audio up to `time_s` (seconds on the video's clock)."""

    def finish(self, until_s: float | None = None) -> None:
        """Mux the rest (up to `until_s`, where the next segment of a recording starts) and flush."""

    def close(self) -> None: ...


class _AudioCopy:
    """Copies the first audio stream of a file into an MP4: packets as they are, or re-encoded as AAC."""

    def __init__(
        self,
        source: av.container.InputContainer,
        stream: av.audio.stream.AudioStream,
        output: av.container.OutputContainer,
        out_stream: av.audio.stream.AudioStream,
        mode: str,
    ) -> None:
        self.source = source
        self.stream = stream
        self.output = output
        self.out_stream = out_stream
        self.mode = mode  # "copy aac" or "aac from pcm_s16le"
        self._packets = source.demux(stream)
        self._pending: av.Packet | None = None
        self._done = False

    @classmethod
    def attach(
        cls, audio_from: str, output: av.container.OutputContainer, out_path: str
    ) -> _AudioCopy | None:
        """Add an audio stream to `output` copied from `audio_from`; None when it has no audio."""
        path = local_path(audio_from)
        if path is None:
            log.warning("video_file output %s: audio is only copied from files; no audio", out_path)
            return None
        source = av.open(path, mode="r")
        if not source.streams.audio:
            source.close()
            log.info("video_file output %s: %s has no audio", out_path, path)
            return None
        stream = source.streams.audio[0]
        name = stream.codec_context.codec.canonical_name
        if name in MP4_AUDIO_CODECS:
            try:
                return cls(source, stream, output, copy_stream(output, stream), f"copy {name}")
            except ValueError:
                log.info("video_file output %s: MP4 refuses %s audio as is; encoding AAC", out_path, name)
        ctx = stream.codec_context
        rate = next((r for r in AAC_RATES if r >= ctx.sample_rate), AAC_RATES[-1])
        out_stream = output.add_stream("aac", rate=rate, layout=_layout(ctx))
        return cls(source, stream, output, out_stream, f"aac from {name}")

    def copy_until(self, time_s: float) -> None:
        """Copy the audio packets that start at or before `time_s`."""
        while not self._done:
            packet = self._pending if self._pending is not None else self._next_packet()
            if packet is None:
                return
            if packet.pts is not None and float(packet.pts * packet.time_base) > time_s:
                self._pending = packet
                return
            self._pending = None
            self._copy(packet)

    def skip_until(self, time_s: float) -> None:
        """Leave out the audio packets that start before `time_s` (they belong to an earlier segment)."""
        while not self._done:
            packet = self._pending if self._pending is not None else self._next_packet()
            if packet is None:
                return
            if packet.pts is None or float(packet.pts * packet.time_base) >= time_s:
                self._pending = packet
                return
            self._pending = None

    def finish(self, until_s: float | None = None) -> None:
        """Copy everything left (or up to `until_s`) and flush the AAC encoder."""
        self.copy_until(float("inf") if until_s is None else until_s)
        if self.mode.startswith("aac from"):
            self.output.mux(self.out_stream.encode(None))

    def close(self) -> None:
        self.source.close()

    def _next_packet(self) -> av.Packet | None:
        for packet in self._packets:
            if packet.size == 0 and packet.dts is None:
                continue  # demux's end-of-stream marker
            return packet
        self._done = True
        return None

    def _copy(self, packet: av.Packet) -> None:
        if self.mode.startswith("copy"):
            if adts(self.stream):  # MPEG-TS's AAC: MP4 takes it without the headers
                packet = with_data(packet, without_adts(bytes(packet)))
            packet.stream = self.out_stream
            self.output.mux(packet)
            return
        for frame in self.stream.codec_context.decode(packet):
            self.output.mux(self.out_stream.encode(frame))


def _layout(ctx: av.audio.codeccontext.AudioCodecContext) -> str:
    """The source layout, or the default one for its channel count when the file says none (AVI PCM)."""
    name = ctx.layout.name
    return f"{ctx.layout.nb_channels}c" if "channels" in name else name


def _reason(err: BaseException) -> str:
    """FFmpeg's reason without the file name PyAV appends, so messages stay one clean line."""
    return getattr(err, "strerror", None) or str(err) or type(err).__name__
