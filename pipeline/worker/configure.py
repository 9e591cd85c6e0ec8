"""A CONFIGURE from the hub, in a worker: a source's settings changed while the job runs.

One function, so that every worker loop (pipeline.worker.stage's, and any other layout's) handles
the message the same way: the whole of the source's settings go to `Stage.configure`, and apply
from the next frame of that source the worker processes (the message comes on the same socket as
the frames, so it is never overtaken). A stage that cannot take them logs it; the worker goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from framewire.pipeline.errors import one_line
from framewire.pipeline.frame import Stage

log = logging.getLogger(__name__)


def configure(stage: Stage, header: Mapping[str, Any]) -> None:
    """Hand a CONFIGURE's `{source, settings}` to `stage`; a bad one or a failure is logged, never fatal."""
    source, settings = header.get("source"), header.get("settings")
    if not isinstance(source, str) or not isinstance(settings, dict):
        log.warning("dropped a CONFIGURE without a source and its settings")
        return
    try:
        stage.configure(source, settings)
    except Exception as exc:
        log.error("source %s: cannot apply its new settings: %s", source, one_line(exc))
