"""Output stages: each receives every frame of every source, in order, and closes a source's files
on that source's end of stream."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

import cv2
import numpy as np

from framewire.media.audio import RingTrack
from framewire.media.segments import PART, Recording, Retention, Segment
from framewire.media.video_reader import StreamInfo
from framewire.media.video_writer import VideoFileWriter
from framewire.pipeline.wire.audioring import RingCache, ring_of
from framewire.config import JsonlOutput, VideoFileOutput, ZmqOutput, resolve_path
from framewire.pipeline import paths
from framewire.pipeline.errors import FramewireError
from framewire.pipeline.frame import Frame, Stage, StageContext
from framewire.pipeline.stagespec import Facts
from framewire.pipeline.wire.publish import Publisher
from framewire.stages.outputs.jsonl import JsonlWriter
from framewire.stages.outputs.record import RECORD_VERSION, composited_image, embedding_arrays, frame_record

log = logging.getLogger(__name__)


def later_run(template: str, path_of: Callable[[str], str]) -> str:
    """The path template of a source's second or later run in one job (its id added again through
    POST /sources after the first ended): numbered from 2, the first number whose file is not on
    disk (`out/cam.mp4`, then `out/cam.2.mp4`, `out/cam.3.mp4`), so no earlier run is written over."""
    number = 2
    while os.path.exists(path_of(paths.numbered(template, number))) or os.path.exists(
        path_of(paths.numbered(template, number)) + PART
    ):
        number += 1
    return paths.numbered(template, number)


def resumed(info: dict[str, Any] | None) -> bool:
    """Whether a source goes on from frames its outputs already hold (sources.resume): they append."""
    first = (info or {}).get("first_seq")
    return type(first) is int and first > 0


class _PerSource(Stage):
    """Shared lifecycle: one writer per source, opened on its first frame, closed on its end."""

    facts = Facts(writes_output=True)

    def __init__(self) -> None:
        self.streams: dict[str, dict[str, Any]] = {}
        self._writers: dict[str, Any] = {}
        self._runs: dict[str, int] = {}
        """How many times each source has opened its files in this job (an output lives as long
        as the job): a source id added again after it ended is a later run (`later_run`)."""
        self.ctx = StageContext("output", 0)

    def start(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.streams = ctx.streams

    def _open(self, source_id: str) -> Any:
        raise NotImplementedError

    def later(self, source_id: str) -> bool:
        """A later run of the source: its second in this job, or one that ran on another replica of a
        fleet before (its stream says `ran_before`): its files go beside the earlier ones."""
        return self._runs[source_id] > 1 or bool((self.streams.get(source_id) or {}).get("ran_before"))

    def writer(self, source_id: str) -> Any:
        writer = self._writers.get(source_id)
        if writer is None:
            self._runs[source_id] = self._runs.get(source_id, 0) + 1
            writer = self._open(source_id)
            self._writers[source_id] = writer
        return writer

    def flush(self, source_id: str) -> Iterable[Frame]:
        writer = self._writers.pop(source_id, None)
        if writer is not None:
            writer.close()
        return ()

    def stop(self) -> None:
        for source_id in list(self._writers):
            try:
                self.flush(source_id)
            except Exception as exc:  # one broken file must not keep the others open
                log.error("closing the output of source %s failed: %s", source_id, exc)


class VideoFileSink(_PerSource):
    """H.264 MP4 per source, same frame count and timestamps as the source, audio copied through:
    one file, or segments of `segment_s` with retention, each closed one announced (media.segments)."""

    Config = VideoFileOutput  # `kind: video_file` (the framewire.outputs entry)

    def __init__(self, config: VideoFileOutput) -> None:
        super().__init__()
        self.config = config
        self._rings = RingCache()
        self._first: dict[str, Frame] = {}

    def _open(self, source_id: str) -> Recording:
        info_dict = self.streams.get(source_id)
        if info_dict is None:
            raise FramewireError(f"video_file output: no stream info for source {source_id}")
        info = StreamInfo.from_dict(info_dict)
        c = self.config
        wanted = c.audio and info.has_audio
        # A source's audio (sources[].audio) is muxed from its file, or from its ring when it is live.
        audio = (info_dict.get("audio_path") or info_dict.get("path")) if wanted else None
        first = self._first.pop(source_id, None)
        wire = ring_of(first.pool_wire) if first is not None else None
        ring = self._rings.get(wire) if wanted and info_dict.get("audio_mux") == "ring" and wire is not None else None
        template = c.path
        # A template with {index} or {start} already names each file apart; one file per source is numbered.
        named_apart = {name for name, _ in paths.fields(template)} & {"index", "start"}
        append = resumed(info_dict)
        if self.later(source_id) and not named_apart and not append:
            template = later_run(template, lambda t: paths.render(t, source_id))
        return Recording(
            template,
            source_id,
            functools.partial(self._segment_writer, info, audio, ring, append),
            time_base=info.time_base,
            fps=info.fps,
            segment_s=c.segment_s,
            retention=Retention(c.keep_segments, int(c.keep_bytes) if c.keep_bytes is not None else None, c.keep_age_s),
            on_segment=functools.partial(self._announce, source_id),
            append=append,
        )

    def _segment_writer(
        self, info: StreamInfo, audio: str | None, ring: Any, append: bool, path: str, start_s: float, first: bool
    ) -> VideoFileWriter:
        """One segment's writer: its audio from the ring (a live source's), from `start_s` on, or
        copied from the file, a later segment from its own start on; `append`: the first goes on
        with the recording at `path` (a resumed source)."""
        c = self.config
        track = (
            functools.partial(RingTrack, ring, frame_duration_s=float(1 / info.fps), start_s=start_s)
            if ring is not None else None
        )  # fmt: skip
        return VideoFileWriter(
            path, info, crf=c.crf, preset=c.preset, threads=c.threads if isinstance(c.threads, int) else 0,
            audio_from=audio if track is None else None,
            audio_track=track, container=c.container, fragment_s=c.fragment_s,
            audio_start_s=None if first or track is not None else start_s, append=append and first,
        )  # fmt: skip

    def _announce(self, source_id: str, segment: Segment) -> None:
        """A closed segment: announced to the hub (log, metrics, the jsonl and zmq outputs) when the
        recording is cut in segments; a single file is only logged when it closes."""
        log.debug("video_file output %s: segment %d closed, %d frames", segment.path, segment.index, segment.frames)
        if self.config.segment_s is not None:
            self.ctx.emit({"v": RECORD_VERSION, **segment.event(source_id, self.ctx.stage)})

    def process(self, frame: Frame) -> Iterable[Frame]:
        if frame.source_id not in self._writers:
            self._first[frame.source_id] = frame  # its pool names the audio ring; its time starts the track
        decode = frame.timings.get("decode")
        self.writer(frame.source_id).write(composited_image(frame), frame.pts, decode[0] if decode else None)
        return ()

    def stop(self) -> None:
        super().stop()
        self._rings.close()


class JsonlSink(_PerSource):
    """One JSON record per frame, per source."""

    Config = JsonlOutput

    def __init__(self, config: JsonlOutput) -> None:
        super().__init__()
        self.config = config
        self._paths: dict[str, str] = {}
        """Each source's file in its latest run, for the events that come after its end."""

    def _open(self, source_id: str) -> JsonlWriter:
        template = self.config.path
        append = resumed(self.streams.get(source_id))
        if self.later(source_id) and not append:
            template = later_run(template, lambda t: resolve_path(t, source_id))
        self._paths[source_id] = resolve_path(template, source_id)
        writer = JsonlWriter(self._paths[source_id], append=append)
        writer.open()
        return writer

    def process(self, frame: Frame) -> Iterable[Frame]:
        self.writer(frame.source_id).write(frame_record(frame))
        return ()

    def event(self, event: dict[str, Any]) -> None:
        """An event line among the source's records (it has `event`, no `seq`). After the source's
        end of stream (its last segment closes then) it is appended to the closed file."""
        source_id = str(event.get("source"))
        event = {"v": RECORD_VERSION, **event}  # the hub's own (a live source offline) come without one
        writer = self._writers.get(source_id)
        if writer is not None:
            writer.write(event)
            return
        path = self._paths.get(source_id) or resolve_path(self.config.path, source_id)
        with JsonlWriter(path, append=True) as late:
            late.write(event)


class ZmqSink(Stage):
    """Publishes `[source_id, header JSON, optional JPEG, arrays...]` for every frame of every source;
    the arrays are the secondary models' embeddings, described in the header's `arrays`."""

    facts = Facts(writes_output=True)

    Config = ZmqOutput

    def __init__(self, config: ZmqOutput) -> None:
        self.config = config
        self.publisher = Publisher(
            config.endpoint,
            config.mode,
            config.hwm,
            curve_secret_key=config.curve_secret_key,
            curve_clients_dir=config.curve_clients,
            wait_subscribers=config.wait_subscribers,
            wait_timeout_s=config.wait_subscribers_timeout_s,
        )
        self._streaming: set[str] = set()
        """Sources whose stream has begun here (a first frame came, no end of stream since)."""

    def start(self, ctx: StageContext) -> None:
        """Bind, then wait for `wait_subscribers` before saying ready: the sources start only once
        every stage is ready, so no frame is read, let alone sent, before the subscribers are in."""
        self.publisher.open()
        self.publisher.wait_for_subscribers()

    def process(self, frame: Frame) -> Iterable[Frame]:
        header = frame_record(frame)
        image: bytes | None = None
        if self.config.jpeg:
            ok, encoded = cv2.imencode(
                ".jpg", composited_image(frame), [cv2.IMWRITE_JPEG_QUALITY, self.config.jpeg_quality]
            )
            if not ok:
                raise FramewireError(f"zmq output: JPEG encoding failed for {frame.source_id}#{frame.seq}")
            image = encoded.tobytes()
            header["image"] = {"format": "jpeg", "bytes": len(image)}
        arrays = embedding_arrays(frame)
        if arrays:
            header["arrays"] = [
                {"name": name, "dtype": str(value.dtype), "shape": list(value.shape)}
                for name, value in arrays
            ]
        buffers = [np.ascontiguousarray(value) for _, value in arrays]
        starts = frame.source_id not in self._streaming
        self._streaming.add(frame.source_id)
        self.publisher.send(frame.source_id, header, image, arrays=buffers, starts_stream=starts)
        return ()

    def flush(self, source_id: str) -> Iterable[Frame]:
        """Tell subscribers the source ended: `{"v": 2, "source": id, "eos": true}` (the record version)."""
        self._streaming.discard(source_id)
        self.publisher.send(source_id, {"v": RECORD_VERSION, "source": source_id, "eos": True})
        return ()

    def event(self, event: dict[str, Any]) -> None:
        """A closed segment or event clip, published on the source's topic like a frame's header (it has
        `event`, no `seq`). Other announcements (a live source offline) are not: framewire.Client reads
        segment events only, and its users read the source's state from /sources."""
        if event.get("event") in ("segment", "clip"):
            self.publisher.send(str(event.get("source")), event)

    def stop(self) -> None:
        self.publisher.close()
