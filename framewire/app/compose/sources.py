"""The sources' composer (`sources:`): how each source's decode worker builds and feeds it, at start and
when one is added at run time through the control API."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from framewire.app.compose.audio import audio_need, build_steps, check_audio
from framewire.app.compose.model import build_task
from framewire.app.compose.outputs import resume_targets
from framewire.app.recordings import tap_spec
from framewire.config import Config, SourceBase, SourceConfig
from framewire.config.job import resume_problem
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import FrameSource
from framewire.pipeline.plan import SourceOptions, SourcePlan
from framewire.pipeline.uris import local_path, redact, source_kind
from framewire.sources import AudioNeed, build_source
from framewire.sources.file import FileSource
from framewire.sources.packets import tap_plan
from framewire.sources.resume import ResumeTargets
from framewire.stages.tasks.base import Task

MAX_WAITING = 4
"""`max_waiting` of a live source that does not set it: frames of one stream queued in the hub behind
every other stream's when the machine is busy (docs/benchmarks.md, "framewire's own cost")."""


def source_plans(config: Config) -> tuple[SourcePlan, ...]:
    """The config's sources, each with the audio its steps need and the files it resumes from."""
    need, slots = audio_need(config), config.transport.slots_per_source
    spec = tap_spec(config)  # each source's packets shown to the recording outputs' tap (sources.packets)
    every = trace_every(config)
    return tuple(
        tap_plan(source_plan(s, need, slots, resume_targets(config, s.id), every), spec) for s in config.sources
    )


def trace_every(config: Config) -> int | None:
    """1 in how many frames of each source are traced (`tracing:`); None: off."""
    return config.tracing.sample_every if config.tracing.enabled else None


def source_plan(
    source: SourceBase,
    need: AudioNeed = AudioNeed(),
    slots: int = 16,
    resume: ResumeTargets | None = None,
    trace_every: int | None = None,
) -> SourcePlan:
    """How the decode worker builds and feeds a source; `resume` (a file with `resume: true`): the
    files it goes on from; `trace_every`: 1 in how many of its frames are traced (None: none)."""
    factory: Any = functools.partial(_source, source, need, slots)
    if resume is not None and isinstance(source, SourceConfig) and source.resume:
        factory = functools.partial(FileSource.resuming, source, resume)
    return SourcePlan(
        source.id,
        factory,
        SourceOptions(
            policy=source.policy,
            realtime=source.realtime,
            max_frames=source.max_frames,
            max_staleness_ms=source.max_staleness_ms,
            latency_budget_ms=source.latency_budget_ms,
            max_waiting=source.max_waiting if source.max_waiting is not None else MAX_WAITING,
            trace_every=trace_every,
        ),
    )


def make_source(config: Config, raw: Mapping[str, Any], task: Task | None = None) -> SourcePlan:
    """A source added at run time (control API): validated like a `sources:` item of the config.
    `task`: the job's, built once per plan (built here when not given)."""
    from pydantic import TypeAdapter, ValidationError

    from framewire.app.io_check import check_source
    from framewire.config import describe_validation_error, resolve_inputs
    from framewire.config.sources import Source

    try:  # chosen by kind (or uri) from the registry, as the config file's sources are
        source = TypeAdapter(Source).validate_python(raw)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, "source", model=SourceConfig)) from None
    checkout = Path(__file__).resolve().parents[3]
    resolved = resolve_inputs(config.model_copy(update={"sources": (source,)}), [checkout])
    added = resolved.sources[0]
    if isinstance(added, SourceConfig):  # a plug-in's source checks itself when it opens
        path, kind = local_path(added.uri), source_kind(added.uri)
        if path is not None and kind in ("file", "camera") and not Path(path).exists():
            # Refused now (400) rather than accepted and failed in the decode worker, seen only in the log.
            raise ConfigError(f"source.uri: {kind} not found: {redact(added.uri)}")
        check_source(added, "source.uri")  # a file that is not a video, a camera that is not V4L2
    if source.audio is not None or any(s.audio_span() for s in build_steps(config)):
        check_audio(resolved, task if task is not None else build_task(config), build_steps(config))
    problem = resume_problem(config.outputs) if getattr(added, "resume", False) else None
    if problem:  # the job's outputs must fit resuming, as for the config's own sources
        raise ConfigError(f"source.resume: {problem}")
    slots = config.transport.slots_per_source
    plan = source_plan(added, audio_need(config), slots, resume_targets(config, added.id), trace_every(config))
    return dataclasses.replace(tap_plan(plan, tap_spec(config)), item=dict(raw))


def _source(source: SourceBase, need: AudioNeed = AudioNeed(), slots: int = 16) -> FrameSource:
    # A file, a live stream or camera, or a ZeroMQ source; with audio, held for the steps' `need`.
    return build_source(source, need, slots)
