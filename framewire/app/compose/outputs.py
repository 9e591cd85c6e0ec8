"""The outputs' composer (`composite:`, `outputs:`): the composite stage that draws the results onto a
copy of each frame, and one output stage per `outputs:` item."""

from __future__ import annotations

import functools
import os
from typing import Any

from framewire import registry
from framewire.config import Config, JsonlOutput, VideoFileOutput, output_name, resolve_path
from framewire.config.job import COMPOSITE
from framewire.config.recording import RecordingOutput
from framewire.engines.registry import infer_workers
from framewire.pipeline import paths
from framewire.pipeline.stagespec import Facts, StageSpec
from framewire.sources.resume import ResumeTargets
from framewire.stages.composite import Composite, CompositeStage, resolve_composite


def build_composites(config: Config) -> list[Composite]:
    return [resolve_composite(c.kind, c.params, index) for index, c in enumerate(config.composite)]


def composite_stages(config: Config) -> list[StageSpec]:
    """The composite stage, when the job draws anything."""
    if not config.composite:
        return []
    factory = functools.partial(_composite, config)
    return [StageSpec.of(COMPOSITE, config.stages.composite.workers, factory, CompositeStage.facts)]


def output_stages(config: Config) -> list[StageSpec]:
    """One stage an output, `output<i>.<kind>`, in one process each. An output is one by where the
    config puts it, whatever its class declares besides."""
    specs = []
    for i, out in enumerate(config.outputs):
        cls = registry.OUTPUTS.get(out.kind, f"outputs.{i}.kind")
        facts = getattr(cls, "facts", Facts()).merged(Facts(writes_output=True))  # a plug-in may declare none
        specs.append(StageSpec.of(output_name(i, out.kind), 1, functools.partial(_output, config, i), facts))
    return specs


def encoder_threads(config: Config, cores: int | None = None) -> int:
    """`threads: auto` of a video output: 1 when the job's processes (a decode per source, the
    infer workers, the output processes) are at least as many as the cores, else 0 (x264's own
    choice). x264's threads spend 20-40% more CPU on the same frames (docs/benchmarks.md): worth it
    only where cores would otherwise be idle."""
    cores = cores or len(os.sched_getaffinity(0))
    outputs = 1 if config.stages.fuse_outputs else len(config.outputs)
    # Called in an output worker.
    processes = len(config.sources) + infer_workers(config.engine, quiet=True) + outputs
    return 1 if processes >= cores else 0


def resume_targets(config: Config, source_id: str) -> ResumeTargets:
    """The files a resumed source's outputs write, rendered for it (config.job checks they can be)."""
    jsonl = tuple(resolve_path(o.path, source_id) for o in config.outputs if isinstance(o, JsonlOutput))
    video = tuple(paths.render(o.path, source_id) for o in config.outputs if isinstance(o, VideoFileOutput))
    return ResumeTargets(jsonl, video)


# Factories: module-level so that spawn can pickle them by reference; called in the worker.


def _composite(config: Config) -> CompositeStage:
    return CompositeStage(build_composites(config))


def _output(config: Config, index: int) -> Any:
    """Output `index`, built in its worker by the class its kind names (framewire.registry.OUTPUTS)."""
    out = config.outputs[index]
    if isinstance(out, VideoFileOutput) and out.threads == "auto":
        out = out.model_copy(update={"threads": encoder_threads(config)})
    built = registry.OUTPUTS.get(out.kind, f"outputs.{index}.kind")(out)
    if isinstance(out, RecordingOutput) and config.http.enabled:
        built.http_url = http_url(config)  # its clips' announcements carry their URL
    return built


def http_url(config: Config) -> str:
    """The HTTP server's address as a client writes it; "" where its port is picked at start (0)."""
    h = config.http
    host = f"[{h.host}]" if ":" in h.host else h.host
    return f"http://{host}:{h.port}" if h.port else ""
