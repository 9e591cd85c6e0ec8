"""The job as the runtime takes it: the one list of its stages, and the `Plan` built on it.

`stage_specs` is the only place the chain is written: each composer adds the stages of its feature,
in frame order, and the layouts the config asks for are transforms of that list (stages.fused). A
new stage needs its class (with its `facts`), its config, and a line in its composer: nothing in
the runtime (docs/architecture.md, "Adding a stage").
"""

from __future__ import annotations

import functools
import logging

import cv2

from framewire.app.compose.analytics import check_tracking, track_stages
from framewire.app.compose.audio import build_steps, check_audio, step_stages
from framewire.app.compose.cascade import cascade_stages, check_secondaries, needs_boxes
from framewire.app.compose.frames import slot_layout
from framewire.app.compose.http import http_settings
from framewire.app.compose.model import build_task, check_model, model_stages, model_version
from framewire.app.compose.model_swap import model_update
from framewire.app.compose.outputs import build_composites, composite_stages, output_stages
from framewire.app.compose.settings import settings_hooks
from framewire.app.compose.sources import make_source, source_plans
from framewire.app.io_check import check_io
from framewire.app.preload import PRELOAD
from framewire.app.trace_spans import Chain
from framewire.app.tracing import frame_hook
from framewire.config import Config, ZmqOutput
from framewire.config.job import OUTPUTS
from framewire.engines.registry import preflight
from framewire.pipeline.plan import ModelVersion, Plan
from framewire.pipeline.stagespec import StageSpec
from framewire.stages.fused import Fused, fuse_middle, fuse_outputs
from framewire.stages.live_layout import live_layout
from framewire.stages.tasks.base import Task

log = logging.getLogger(__name__)

def stage_specs(config: Config) -> list[StageSpec]:
    """Every stage after decode, in frame order, as the job runs them: the steps, the model's three,
    tracking, the secondary models, the composite, then the outputs; fused as `stages.fuse` and
    `stages.fuse_outputs` say. Builds no stage."""
    stages = [
        *step_stages(config),
        *model_stages(config),
        *track_stages(config),
        *cascade_stages(config),
        *composite_stages(config),
        *output_stages(config),
    ]
    if config.stages.layout == "live":  # fused too: a live frame stays in its worker up to the outputs
        stages = live_layout(stages, [s.id for s in config.sources if s.policy != "block"])
    elif config.stages.fuse:
        stages = fuse_middle(stages)
    if config.stages.fuse_outputs:
        stages = fuse_outputs(stages, OUTPUTS)
    return stages


def fused_middle(config: Config) -> Fused:
    """The config's middle stages as one infer worker runs them when fused (`start`, `process`, `stop`),
    built in this process: the public API's `stages_from_config`, and the benchmarks."""
    (spec,) = [s for s in fuse_middle(stage_specs(config)) if not s.writes_output]
    stage = spec.factory()
    assert isinstance(stage, Fused)
    return stage


def check(config: Config) -> Task:
    """Everything `validate` checks without running: task and composite parameters, the model file
    and that its inputs and outputs fit the task, the secondary models, tracking and the audio."""
    task = build_task(config)
    build_composites(config)
    steps = build_steps(config)
    check_model(config, task)
    needs_boxes(config, task)
    labels = task.labels()
    check_secondaries(config, labels)
    check_tracking(config, labels)
    check_audio(config, task, steps)
    for warning in task.warnings():  # it runs, but likely not as meant: say so before the job starts
        log.warning("%s", warning)
    return task


def build_plan(config: Config, *, log_level: int = logging.WARNING, log_format: str = "text") -> Plan:
    """The job's processes, after every check a config can fail at start (exit 2): the model and its
    task, the sources and outputs (`check_io`), the backend (one line now, not one from every infer
    worker). The task is built once here, for the supervisor's own use."""
    task = check(config)
    check_io(config)
    preflight(config.engine, config.model.path)
    t = config.transport
    stages = tuple(stage_specs(config))
    return Plan(
        stages=stages,
        sources=source_plans(config),
        slot_layout=functools.partial(slot_layout, config, task=task),
        slots_per_source=t.slots_per_source,
        credits_per_worker=t.credits_per_worker,
        max_restarts=t.max_restarts,
        shutdown_timeout_s=t.shutdown_timeout_s,
        skip_failed_frames=config.stages.on_frame_error == "skip",
        stall_timeout_s=config.stages.stall_timeout_s,
        ipc_dir=t.ipc_dir,
        log_level=log_level,
        log_format=log_format,
        preload=PRELOAD,
        http=http_settings(config),
        make_source=functools.partial(make_source, config, task=task),
        model=ModelVersion(config.model.path, model_version(config)),
        update_model=functools.partial(model_update, config, task, check, stage_specs),
        settings=settings_hooks(config, task),
        worker_init=single_threaded_opencv,
        binds=tuple(
            (f"outputs.{i}.endpoint", out.endpoint)
            for i, out in enumerate(config.outputs)
            if isinstance(out, ZmqOutput)
        ),
        frame_hook=frame_hook(config.tracing, Chain.of(stages)),
    )


def single_threaded_opencv() -> None:
    """Every worker's first step (`Plan.worker_init`): OpenCV's own thread pool off. The job is
    already spread over processes, and the pool's threads spin while they wait for work, which a
    busy machine pays for (the decode process's CPU a frame fell by a quarter with it off, 8 live
    streams on 2 cores: docs/benchmarks.md, framewire's own cost)."""
    cv2.setNumThreads(1)
