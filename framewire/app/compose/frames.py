"""What a source's slot in the frame pool holds: the frame (I420 as decoded, or BGR), the model input
unless the infer worker keeps it in its own memory, and the copy the composite stage draws on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from framewire.app.compose.model import build_task, own_model_input
from framewire.app.compose.outputs import build_composites
from framewire.config import Config, VideoFileOutput, ZmqOutput
from framewire.media import yuv
from framewire.pipeline.frame import IMAGE
from framewire.stages.composite import OUTPUT
from framewire.stages.tasks.base import Task

Regions = dict[str, tuple[tuple[int, ...], str]]


def slot_layout(config: Config, source_id: str, info: Mapping[str, Any], task: Task | None = None) -> Regions:
    """The frame pool regions of a source: its frames, the model input, and the composited frame.
    `task`: the job's, built once per plan (built here when not given)."""
    task = task if task is not None else build_task(config)
    width, height = int(info["width"]), int(info["height"])
    spec = task.input_spec(width, height)
    regions: Regions = {IMAGE: ((height, width, 3), "uint8")}
    if not own_model_input(config):
        regions["input"] = (tuple(int(d) for d in spec.shape), str(spec.dtype))  # type: ignore[arg-type]
    if yuv_frames(config, (width, height), task) and width % 2 == 0 and height % 2 == 0:
        regions[IMAGE] = (yuv.shape(width, height), "uint8")
    if config.composite:
        regions[OUTPUT] = (regions[IMAGE][0], "uint8")
    return regions


YUV_SOURCES = frozenset({"file", "stream", "camera"})
"""Sources read by PyAV, whose frames write their planes into a slot as they are."""
YUV_OUTPUTS = frozenset({"video_file", "jsonl", "mqtt", "kafka", "webhook"})
"""Outputs that take I420 frames (video_file encodes them as they are) or never look at pixels."""


def yuv_frames(config: Config, size: tuple[int, int] | None = None, task: Task | None = None) -> bool:
    """Whether the job keeps its frames as decoded, I420 (framewire.media.yuv; `stages.frame_format`):
    every stage takes them, and it saves a conversion. With a video output, x264 takes the frames
    as they are; without one, a source whose frames the model scales down to half or a third
    (`size`, 1280x720 or 1920x1080 to 640x360: `Task.scales_planes`) has its planes scaled first
    and converted at the model's size, instead of converted whole by the decoder and scaled after.
    `task`: the job's, when the caller has it."""
    if config.stages.frame_format != "auto" or config.steps or config.secondary:
        return False
    if not all(s.kind in YUV_SOURCES for s in config.sources):  # others hand over BGR arrays
        return False
    if not all(o.kind in YUV_OUTPUTS or (isinstance(o, ZmqOutput) and not o.jpeg) for o in config.outputs):
        return False
    if not all(getattr(c, "takes_yuv", False) for c in build_composites(config)):
        return False
    task = task if task is not None else build_task(config)
    if type(task).preprocess_frame is not Task.preprocess_frame:  # it reads pixels its own way
        return False
    if any(isinstance(o, VideoFileOutput) for o in config.outputs):
        return True
    return size is not None and task.scales_planes(*size)
