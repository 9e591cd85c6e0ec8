"""A video file (or a remote file over http) read once from start to end, strictly."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from framewire.media.video_reader import PendingImage, VideoReader
from framewire.pipeline.uris import local_path


class FileSource:
    """A `VideoReader` as the decode worker reads it (`framewire.pipeline.frame.FrameSource`): plain dicts and tuples.

    `open()` returns `StreamInfo.to_dict()` plus, for a local file, `"path"`: its absolute path, which
    the video_file output needs to copy the audio (the `uri` there is redacted, never used to open).
    """

    def __init__(self, source_id: str, uri: str, *, options: Mapping[str, str] | None = None) -> None:
        self.reader = VideoReader(source_id, uri, options=options)

    def open(self) -> dict[str, Any]:
        info = self.reader.open().to_dict()
        path = local_path(self.reader.uri)
        if path is not None:
            info["path"] = os.path.abspath(path)
        return info

    def frames(self) -> Iterator[tuple[np.ndarray | PendingImage, int, float]]:
        yield from self.reader.pending_frames()  # converted straight into the slot

    def close(self) -> None:
        self.reader.close()
