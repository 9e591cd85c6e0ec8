"""The model's side of a live-layout worker: the share's next frame through the worker's stage.

The frame is made on its own pixels (`Frame.inline`): no pool slot, no GRANT, no WORK. A frame a source
decoded but did not convert (`PendingPixels`) is converted here, once it is taken, so a frame dropped
at its source (the model busy) costs no conversion. A stage that fails on a frame fails that frame
only: the worker's other frames and sources go on, as `stages.on_frame_error: skip` does today.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from framewire.pipeline.errors import one_line
from framewire.pipeline.frame import Frame, Stage
from framewire.pipeline.worker.live_share import LiveShare, Waiting

log = logging.getLogger(__name__)


def pixels(image: Any) -> np.ndarray:
    """A frame's BGR pixels as an array: itself, or what `PendingPixels` writes."""
    if isinstance(image, np.ndarray):
        return image
    out = np.empty(tuple(image.shape), dtype=np.uint8)
    image.write_into(out)
    return out


class LiveRunner:
    """Takes the share's frames one at a time, runs `stage` on each, hands each result to `deliver`
    and each failure to `failed` (the frame's source and seq, and the one-line error)."""

    def __init__(
        self,
        share: LiveShare,
        stage: Stage,
        name: str,
        deliver: Callable[[Frame], None],
        failed: Callable[[Waiting, str], None],
    ) -> None:
        self.share, self.stage, self.name = share, stage, name
        self._deliver, self._failed = deliver, failed

    def step(self, timeout_s: float) -> bool:
        """One frame, if one comes within `timeout_s`: True if one was run (or failed)."""
        waiting = self.share.take(timeout_s)
        if waiting is None:
            return False
        try:
            image = pixels(waiting.image)
            height, width = image.shape[:2]
            frame = Frame(
                waiting.source,
                waiting.seq,
                waiting.pts,
                waiting.time_s,
                width,
                height,
                inline={"image": image},
            )
            started = time.time()
            outs = list(self.stage.process(frame))
            finished = time.time()
        except Exception as exc:  # this frame only: the worker's other frames go on
            error = one_line(exc)
            log.error("%s failed on source %s seq %s: %s", self.name, waiting.source, waiting.seq, error)
            log.debug("%s failed", self.name, exc_info=True)
            self._failed(waiting, error)
            return True
        for out in outs:
            out.timings.setdefault(self.name, [started, finished])
            self._deliver(out)
        return True
