"""A video file (or a remote file over http) read once from start to end, strictly."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from framewire.config import SourceConfig
from framewire.media.video_reader import PendingImage, VideoReader
from framewire.pipeline.frame import FrameSource
from framewire.pipeline.uris import local_path
from framewire.sources.live import LiveSource, stream_options
from framewire.sources.resume import ResumeTargets, recover


class FileSource:
    """A `VideoReader` as the decode worker reads it (`framewire.pipeline.frame.FrameSource`): plain dicts and tuples.

    `open()` returns `StreamInfo.to_dict()` plus, for a local file, `"path"`: its absolute path, which
    the video_file output needs to copy the audio (the `uri` there is redacted, never used to open).
    """

    Config = SourceConfig  # kinds file and stream (the framewire.sources entries)

    def __init__(
        self, source_id: str, uri: str, *, options: Mapping[str, str] | None = None, resume: ResumeTargets | None = None
    ) -> None:
        """`resume`: the files its outputs write; `open()` cuts them back to the frames they all hold
        and the source goes on after those (sources.resume)."""
        self.reader = VideoReader(source_id, uri, options=options)
        self.resume = resume

    @classmethod
    def from_config(cls, config: SourceConfig) -> FrameSource:
        """A file or stream read once to its end; a live one (`live`, or a live stream's uri)
        reconnects, as a LiveSource."""
        if config.is_live:
            return LiveSource.from_config(config)
        if config.kind == "stream":
            options = stream_options(
                config.uri, timeout_s=config.timeout_s, rtsp_transport=config.rtsp_transport, extra=config.ffmpeg_options
            )
            return cls(config.id, config.uri, options=options)
        return cls(config.id, config.uri)

    @classmethod
    def resuming(cls, config: SourceConfig, targets: ResumeTargets) -> FileSource:
        """A file source (`resume: true`) that goes on from what `targets` hold."""
        return cls(config.id, config.uri, resume=targets)

    def open(self) -> dict[str, Any]:
        """The stream's info; resumed, with `first_seq`: the index of its first frame."""
        point = recover(self.reader.source_id, self.resume) if self.resume is not None else None
        info = self.reader.open().to_dict()
        if point is not None and point.frame:
            self.reader.resume_at(point.frame, point.after_pts)
            info["first_seq"] = point.frame
        path = local_path(self.reader.uri)
        if path is not None:
            info["path"] = os.path.abspath(path)
        return info

    def frames(self) -> Iterator[tuple[np.ndarray | PendingImage, int, float]]:
        yield from self.reader.pending_frames()  # converted straight into the slot

    def close(self) -> None:
        self.reader.close()
