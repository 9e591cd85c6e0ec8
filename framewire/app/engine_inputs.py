"""What an engine build needs to know from the task: the input shapes the sources will feed (a
TensorRT optimisation profile) and preprocessed frames of a video (INT8 calibration, quantisation).

Both go through the task's own `input_spec` and `preprocess`, so an engine is built for, and
calibrated on, exactly what the preprocess stage writes into the frame pool.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from framewire.media.video_reader import VideoReader
from framewire.config import SourceBase, SourceConfig
from framewire.stages.tasks.base import Task

log = logging.getLogger(__name__)


def source_input_shapes(task: Task, sources: Sequence[SourceBase]) -> dict[str, list[tuple[int, ...]]]:
    """The model input shape (batch of one) for each source's frame size, by input name.

    Opens each source read from a uri only to read its size (the infer worker runs this once, before
    any frame); a plug-in's source gives no example."""
    shapes: list[tuple[int, ...]] = []
    for source in sources:
        if not isinstance(source, SourceConfig):
            continue
        with VideoReader(source.id, source.uri) as reader:
            info = reader.info
        spec = task.input_spec(info.width, info.height)
        shapes.append(tuple(int(d) for d in spec.shape))  # type: ignore[arg-type]
    return {task.input_name: shapes}


def calibration_batches(task: Task, video: str, frames: int) -> Iterator[np.ndarray]:
    """Up to `frames` frames of `video`, each preprocessed by the task into a batch of one."""
    with VideoReader("calibration", video) as reader:
        info = reader.info
        spec = task.input_spec(info.width, info.height)
        shape = tuple(int(d) for d in spec.shape)  # type: ignore[arg-type]
        for count, frame in enumerate(reader.frames()):
            if count >= frames:
                break
            out = np.empty(shape, dtype=spec.dtype)
            task.preprocess(frame.image, out)
            yield out
    log.debug("calibration: read %s", video)


def task_feeds(task: Task, images: Iterable[np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
    """Model feeds of BGR frames through the task's own preprocessing (a fresh array per frame)."""
    for image in images:
        yield task_inputs(task, image)[0]


def task_inputs(task: Task, image: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """One BGR frame through the task's own preprocessing: the model feed (a fresh array) and the
    meta its postprocessing needs."""
    height, width = image.shape[:2]
    spec = task.input_spec(width, height)
    buffer = np.zeros(tuple(int(d) for d in spec.shape), dtype=spec.dtype)  # type: ignore[arg-type]
    meta = task.preprocess(image, buffer)
    return {task.input_name: buffer}, meta
