"""Output stages: each receives every frame of every source, in order, and closes a source's files
on that source's end of stream."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import Any

import cv2
import numpy as np

from media.audio import RingTrack
from media.video_reader import StreamInfo
from media.video_writer import VideoFileWriter
from pipeline.audioring import RingCache, ring_of
from pipeline.config import JsonlOutput, VideoFileOutput, ZmqOutput, resolve_path
from pipeline.errors import FramewireError
from pipeline.frame import Frame, Stage, StageContext
from pipeline.publish import Publisher
from stages.outputs.jsonl import JsonlWriter
from stages.outputs.record import RECORD_VERSION, composited_image, embedding_arrays, frame_record

log = logging.getLogger(__name__)


class _PerSource(Stage):
    """Shared lifecycle: one writer per source, opened on its first frame, closed on its end."""

    def __init__(self) -> None:
        self.streams: dict[str, dict[str, Any]] = {}
        self._writers: dict[str, Any] = {}

    def start(self, ctx: StageContext) -> None:
        self.streams = ctx.streams

    def _open(self, source_id: str) -> Any:
        raise NotImplementedError

    def writer(self, source_id: str) -> Any:
        writer = self._writers.get(source_id)
        if writer is None:
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
    """H.264 MP4 per source, same frame count and timestamps as the source, audio copied through."""

    reads = ("image", "output")  # the composited image when there is one (record.composited_image)

    def __init__(self, config: VideoFileOutput) -> None:
        super().__init__()
        self.config = config
        self._rings = RingCache()
        self._first: dict[str, Frame] = {}

    def _open(self, source_id: str) -> VideoFileWriter:
        info_dict = self.streams.get(source_id)
        if info_dict is None:
            raise FramewireError(f"video_file output: no stream info for source {source_id}")
        info = StreamInfo.from_dict(info_dict)
        wanted = self.config.audio and info.has_audio
        # A source's audio (sources[].audio) is muxed from its file, or from its ring when it is live.
        audio = (info_dict.get("audio_path") or info_dict.get("path")) if wanted else None
        track = None
        first = self._first.pop(source_id, None)
        wire = ring_of(first.pool_wire) if first is not None else None
        if wanted and info_dict.get("audio_mux") == "ring" and wire is not None and first is not None:
            ring, start = self._rings.get(wire), first.time_s
            track = functools.partial(RingTrack, ring, frame_duration_s=float(1 / info.fps), start_s=start)
        writer = VideoFileWriter(
            resolve_path(self.config.path, source_id),
            info,
            crf=self.config.crf,
            preset=self.config.preset,
            audio_from=audio if track is None else None,
            audio_track=track,
        )
        writer.open()
        return writer

    def process(self, frame: Frame) -> Iterable[Frame]:
        if frame.source_id not in self._writers:
            self._first[frame.source_id] = frame  # its pool names the audio ring; its time starts the track
        self.writer(frame.source_id).write(composited_image(frame), frame.pts)
        return ()

    def stop(self) -> None:
        super().stop()
        self._rings.close()


class JsonlSink(_PerSource):
    """One JSON record per frame, per source."""

    reads: tuple[str, ...] = ()

    def __init__(self, config: JsonlOutput) -> None:
        super().__init__()
        self.config = config

    def _open(self, source_id: str) -> JsonlWriter:
        writer = JsonlWriter(resolve_path(self.config.path, source_id))
        writer.open()
        return writer

    def process(self, frame: Frame) -> Iterable[Frame]:
        self.writer(frame.source_id).write(frame_record(frame))
        return ()


class ZmqSink(Stage):
    """Publishes `[source_id, header JSON, optional JPEG, arrays...]` for every frame of every source;
    the arrays are the secondary models' embeddings, described in the header's `arrays`."""

    def __init__(self, config: ZmqOutput) -> None:
        self.config = config
        self.reads = ("image", "output") if config.jpeg else ()
        self.publisher = Publisher(
            config.endpoint,
            config.mode,
            config.hwm,
            curve_secret_key=config.curve_secret_key,
            curve_clients_dir=config.curve_clients,
        )

    def start(self, ctx: StageContext) -> None:
        self.publisher.open()

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
        self.publisher.send(frame.source_id, header, image, arrays=buffers)
        return ()

    def flush(self, source_id: str) -> Iterable[Frame]:
        """Tell subscribers the source ended: `{"v": 2, "source": id, "eos": true}` (the record version)."""
        self.publisher.send(source_id, {"v": RECORD_VERSION, "source": source_id, "eos": True})
        return ()

    def stop(self) -> None:
        if self.publisher.dropped:
            log.warning("zmq output %s: %d message(s) dropped", self.config.endpoint, self.publisher.dropped)
        self.publisher.close()
