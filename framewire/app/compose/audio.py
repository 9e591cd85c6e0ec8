"""The steps' composer (`steps:`): the stages before the model (audio features, voice activity, a
region), the audio they read (its rate, and the span around each frame), and the checks made before
the job runs.

Everything a config can get wrong about audio fails here with one line at start (exit 2), rather
than in a worker: a step that reads audio with a source that has none, sources at different rates,
a VAD at a rate Silero does not take, a generator input filled by a step that is not there or whose
tensor does not fit, an audio file that is missing or has no audio track.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

from framewire.media.audio import has_audio_track
from framewire.config import Config, SourceConfig
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.stagespec import StageSpec
from framewire.pipeline.uris import local_path, redact
from framewire.sources import AudioNeed
from framewire.stages.steps import resolve_step, step_facts
from framewire.stages.steps.base import Step
from framewire.stages.tasks.base import Task

DEFAULT_RATE = 16000


def audio_rate(config: Config) -> int:
    """The sample rate of the sources' audio, which the steps read (all sources must agree)."""
    rates = [s.audio.sample_rate for s in config.sources if s.audio is not None]
    return rates[0] if rates else DEFAULT_RATE


def build_steps(config: Config) -> list[Step]:
    rate = audio_rate(config)
    return [resolve_step(step, i, config.engine, rate) for i, step in enumerate(config.steps)]


def step_stages(config: Config) -> list[StageSpec]:
    """One stage a step, named by it, in the config's order; what each does its class declares."""
    return [
        StageSpec.of(item.stage, item.workers, functools.partial(_step, config, i), step_facts(item, i))
        for i, item in enumerate(config.steps)
    ]


def _step(config: Config, index: int) -> Step:
    """Step `index`, built in its worker (module-level: spawn pickles it by reference)."""
    return resolve_step(config.steps[index], index, config.engine, audio_rate(config))


def audio_need(config: Config) -> AudioNeed:
    """How much audio around a frame the steps read: each source holds a frame back until it is there."""
    spans = [span for step in build_steps(config) if (span := step.audio_span()) is not None]
    return AudioNeed(max((b for b, _ in spans), default=0.0), max((a for _, a in spans), default=0.0))


def check_audio(config: Config, task: Task, steps: Sequence[Step]) -> None:
    """The one-line errors above; `task` has seen the model (check_model) when it takes audio."""
    rate = audio_rate(config)
    for i, source in enumerate(config.sources):
        if source.audio is not None and source.audio.sample_rate != rate:
            raise ConfigError(
                f"sources.{i}.audio.sample_rate: {source.audio.sample_rate}, but another source's is {rate}: "
                "the audio steps read one rate (set the same sample_rate; audio is resampled to it)"
            )
    for j, step in enumerate(steps):
        step.check(f"steps.{j}")
        if step.audio_span() is None:
            continue
        for i, source in enumerate(config.sources):
            if source.audio is None:
                raise ConfigError(
                    f"steps.{j} ({step.kind}) reads audio, but sources.{i} ({source.id}) has none: set sources.{i}.audio"
                )
    _check_task_audio(task, steps)
    for i, source in enumerate(config.sources):
        if isinstance(source, SourceConfig):
            _probe(source, i)


def _check_task_audio(task: Task, steps: Sequence[Step]) -> None:
    audio_inputs: dict[str, str | None] = getattr(task, "audio_inputs", dict)()
    with_tensor = {s.name: s for s in steps if s.tensor() is not None}
    for name, wanted in audio_inputs.items():
        if wanted is None:
            if len(with_tensor) != 1:
                found = ", ".join(with_tensor) or "none"
                raise ConfigError(
                    f"model.inputs.{name}: fill audio needs one audio_features step (found: {found}); name it with step:"
                )
            wanted = next(iter(with_tensor))
        step = with_tensor.get(wanted)
        if step is None:
            raise ConfigError(f"model.inputs.{name}.step: no audio_features step named {wanted!r} in steps:")
        shape = step.tensor()
        assert shape is not None
        task.check_audio(name, shape, step.name)  # type: ignore[attr-defined]


def _probe(source: SourceConfig, index: int) -> None:
    """A local audio file (or the video's own track) must exist and hold audio."""
    audio = source.audio
    if audio is None or audio.kind not in ("self", "file"):
        return
    uri = source.uri if audio.kind == "self" else audio.uri
    path = local_path(uri)
    if path is None:
        return  # a remote file: opened by the decode worker, whose error names it
    key = f"sources.{index}.audio.uri"
    if not os.path.isfile(path):
        what = "video file" if audio.kind == "self" else "audio file"
        raise ConfigError(f"{key}: {what} not found: {redact(uri)}")
    try:
        has_audio = has_audio_track(path)
    except ValueError as err:
        raise ConfigError(f"{key}: cannot read {redact(uri)}: {err}") from None
    if not has_audio:
        where = f"the video {redact(uri)} (audio.uri: self)" if audio.kind == "self" else redact(uri)
        raise ConfigError(f"{key}: no audio track in {where}")
