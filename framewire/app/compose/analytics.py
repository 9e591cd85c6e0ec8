"""The tracking composer (`tracking:`, `analytics:`): the stage that follows each source's objects from
frame to frame, and counts them across its lines and zones."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from framewire.app.recordings import check_recordings
from framewire.config import Config, SourceBase, SourceConfig
from framewire.config.job import TRACK
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.stagespec import StageSpec
from framewire.pipeline.uris import local_path, source_kind
from framewire.stages.analytics import Analytics
from framewire.stages.tasks.labels import class_filter
from framewire.stages.tracking import TrackStage, resolve_tracking


def track_stages(config: Config) -> list[StageSpec]:
    """The track stage, when the job tracks."""
    if not config.tracking:
        return []
    factory = functools.partial(_track, config)
    return [StageSpec.of(TRACK, config.stages.track.workers, factory, TrackStage.facts)]


def check_tracking(config: Config, labels: Sequence[str] | None) -> None:
    """Tracking's classes, and each line's and zone's, are the model's; pixel points lie inside each
    local video's frame."""
    if config.tracking:
        params = resolve_tracking(config.tracking.params)
        class_filter(params.classes, labels, len(labels) if labels else None, "tracking.classes")
    check_analytics(config, labels)
    check_recordings(config, labels)


def check_analytics(config: Config, labels: Sequence[str] | None) -> None:
    """Each line's and zone's classes are the model's; pixel points lie inside each local video's frame."""
    for source_id, spec in config.analytics.items():
        for kind, i, _, _, classes in spec.shapes():
            key = f"analytics.{source_id}.{kind}.{i}.classes"
            class_filter(classes, labels, len(labels) if labels else None, key)
        if spec.normalized:
            continue
        size = frame_size(next(s for s in config.sources if s.id == source_id))
        problem = spec.outside(*size) if size else None
        if problem:
            raise ConfigError(f"analytics.{source_id}.{problem}")


def frame_size(source: SourceBase) -> tuple[int, int] | None:
    """A local video file's frame size, read from the file; None for streams, cameras and the rest
    (their lines and zones are checked on the first frame, in the tracking stage)."""
    from framewire.media.video_reader import VideoReader

    if not isinstance(source, SourceConfig) or source_kind(source.uri) != "file":
        return None
    if local_path(source.uri) is None:
        return None
    try:
        with VideoReader(source.id, source.uri) as reader:
            info = reader.info
    except Exception:  # an unreadable file is check_io's error to report, with its own key
        return None
    return info.width, info.height


# Factories: module-level so that spawn can pickle them by reference; called in the worker.


def _track(config: Config) -> TrackStage:
    assert config.tracking is not None
    analytics = Analytics(config.analytics)  # none yet: a source's lines may come at run time
    return TrackStage(resolve_tracking(config.tracking.params), analytics)
