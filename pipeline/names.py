"""The names of the stages, spelled once: the hub, the config, the plan and the CLI use these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DECODE = "decode"
PREPROCESS = "preprocess"
INFER = "infer"
POSTPROCESS = "postprocess"
TRACK = "track"
"""Tracking per source (`tracking:`): a stage whose workers keep state per source."""
SECONDARY = "secondary"
"""The models that run on crops of the detections (`secondary:`)."""
COMPOSITE = "composite"
MIDDLE = (PREPROCESS, INFER, POSTPROCESS, TRACK, SECONDARY, COMPOSITE)
"""The stages between decode and the outputs, in frame order."""
UNDRAWN = "undrawn"
"""The `meta` key the composite stage sets on a frame no composite drew on (a blur with no face): it
did not copy the frame into its `output` region, so the outputs show `image` (`shows_output`)."""
OUTPUTS = "outputs"
"""The stage that runs every output in one process (`stages.fuse_outputs`)."""
STALE_BEFORE = frozenset({PREPROCESS, INFER})
"""The stages that skip a frame past its source's deadline: up to inference, where the time goes."""


def shows_output(timings: Mapping[str, Any], meta: Mapping[str, Any] | None) -> bool:
    """Whether the outputs show a frame's `output` region, not its `image`: the composite stage ran
    on it (its timings say so) and drew (`UNDRAWN`)."""
    return COMPOSITE in timings and not (meta and meta.get(UNDRAWN))


def output_name(index: int, kind: str) -> str:
    """An output's stage name: `output0.video_file`, `output1.jsonl`, ..."""
    return f"output{index}.{kind}"


def is_output(name: str) -> bool:
    """Whether a stage name is an output's (`outputN.kind`, or `outputs` for fused outputs)."""
    return name == OUTPUTS or (name.startswith("output") and "." in name)
