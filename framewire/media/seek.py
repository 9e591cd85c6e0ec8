"""Seeking a file to the key frame before a frame, for a resumed source (media.video_reader)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import av
import av.container
import av.video.stream


def seek_past(
    container: av.container.InputContainer, stream: av.video.stream.VideoStream, after_pts: int
) -> Iterator[av.VideoFrame] | None:
    """The frames after pts `after_pts`, decoded from the key frame at or before it; None when the
    stream's pts cannot say where that is (missing or not increasing, or the seek landed past it)."""
    try:
        container.seek(after_pts, stream=stream, backward=True, any_frame=False)
        decoded = container.decode(stream)
        previous: int | None = None
        for frame in decoded:
            if frame.pts is None or (previous is not None and frame.pts <= previous):
                return None
            if previous is None and frame.pts > after_pts:
                return None  # landed after the frame: the ones between would be lost
            previous = frame.pts
            if frame.pts > after_pts:
                return itertools.chain((frame,), decoded)
    except av.FFmpegError:
        return None
    return iter(())  # the file ends with that frame: nothing is left to do
