"""What a job's `recording` outputs ask of the rest of it: their checks against the model and the
analytics, and what each source's decode worker does with its packets (sources.packets)."""

from __future__ import annotations

from collections.abc import Sequence

from framewire.config import Config
from framewire.config.recording import RecordingOutput
from framewire.media.segments import Retention
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.packets import endpoint_for
from framewire.sources.packets import TapSpec


def recordings(config: Config) -> list[tuple[int, RecordingOutput]]:
    return [(i, out) for i, out in enumerate(config.outputs) if isinstance(out, RecordingOutput)]


def check_recordings(config: Config, labels: Sequence[str] | None) -> None:
    """ConfigError naming the key: a label the model lacks, a line or zone no source has, a folder
    that cannot be written, or two recording outputs in one folder."""
    folders: dict[str, int] = {}
    sources = [s.id for s in config.sources]
    for i, out in recordings(config):
        problem = out.problems(f"outputs.{i}", labels, config.analytics, sources)
        if problem:
            raise ConfigError(problem)
        if out.folder in folders:
            raise ConfigError(
                f"outputs.{i}.folder: {out.folder} is outputs.{folders[out.folder]}'s folder too"
            )
        folders[out.folder] = i


def tap_spec(config: Config) -> TapSpec:
    """The passthrough recordings and the clips' endpoints every source of the job feeds."""
    passthrough, endpoints = [], []
    for _, out in recordings(config):
        p = out.passthrough
        if p is not None:
            keep = Retention(keep_bytes=int(p.keep_bytes) if p.keep_bytes is not None else None,
                             keep_age_s=p.keep_days * 86400 if p.keep_days is not None else None)  # fmt: skip
            passthrough.append((out.passthrough_path(), p.segment_s, keep))
        if out.clips is not None:
            endpoints.append(endpoint_for(out.folder))
    return TapSpec(tuple(passthrough), tuple(endpoints))
