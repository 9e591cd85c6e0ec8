"""What `validate` and the start of a job check on the host that runs the sources and outputs, beyond
the config's own shape: each local source is a video (or a V4L2 camera), each output can be written.

One line naming the key (exit 2) before any worker starts, rather than a source that fails in its
decode worker or an output that fails at frame 0 with the same error from every retry. Nothing is
created or written here: a folder an output would make is checked through its nearest existing parent.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from framewire.config import Config, JsonlOutput, Output, SourceConfig, VideoFileOutput, ZmqOutput, resolve_path
from framewire.media.video_reader import VideoReader
from framewire.pipeline import paths
from framewire.pipeline.errors import ConfigError, SourceError
from framewire.pipeline.uris import local_path, scheme, source_kind
from framewire.sources.live import v4l2_problem


def check_io(config: Config) -> None:
    """Every source of the config, then every output; ConfigError naming the first at fault."""
    for i, source in enumerate(config.sources):
        if isinstance(source, SourceConfig):  # a plug-in's source checks itself when it opens
            check_source(source, f"sources.{i}.uri")
    ids = [source.id for source in config.sources]
    for i, output in enumerate(config.outputs):
        check_output(output, f"outputs.{i}", ids)


def check_source(source: SourceConfig, key: str) -> None:
    """A local file must open as a video (not text, not audio alone); a camera must be a V4L2
    device. Streams and ZeroMQ inputs are left to their workers: they may come up later."""
    kind = source_kind(source.uri)
    if kind == "camera":
        problem = v4l2_problem(source.uri)
        if problem:
            raise ConfigError(f"{key}: source {source.id}: {problem}")
    elif kind == "file" and local_path(source.uri) is not None:
        check_video(source.uri, key, source.id)


def check_video(uri: str, key: str, source_id: str | None = None) -> None:
    """`uri` opens as a video; else ConfigError `key: [source <id>: ]<why>`, naming the file."""
    reader = VideoReader(source_id or "-", uri)
    try:
        reader.check()
    except SourceError as err:
        why = str(err) if source_id else str(err).removeprefix("source -: ")
        raise ConfigError(f"{key}: {why}") from None


def check_output(output: Output, key: str, source_ids: Sequence[str]) -> None:
    """A file output's path (filled in for each source, segment 0 now) can be created and written;
    an ipc:// endpoint's folder exists and can be written (ZeroMQ makes no folder)."""
    if isinstance(output, ZmqOutput):
        if scheme(output.endpoint) == "ipc":
            folder = Path(output.endpoint[len("ipc://") :]).parent
            if not folder.is_dir():
                raise ConfigError(f"{key}.endpoint: no folder {folder} for {output.endpoint}")
            _writable(folder, folder, f"{key}.endpoint")
        return
    if not isinstance(output, JsonlOutput | VideoFileOutput):
        return  # a plug-in's output checks its own destination when it starts
    for source_id in source_ids:
        if isinstance(output, JsonlOutput):
            path = Path(resolve_path(output.path, source_id))
        else:
            path = Path(paths.render(output.path, source_id, 0))
        _writable_file(path, f"{key}.path")


def _writable_file(path: Path, key: str) -> None:
    if path.is_dir():
        raise ConfigError(f"{key}: {path} is a folder, not a file")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{key}: cannot write {path}: permission denied")
        return
    folder = path.parent
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{key}: cannot make the folder {folder}: {existing} is a file")
    _writable(existing, folder, key)


def _writable(existing: Path, folder: Path, key: str) -> None:
    if not os.access(existing, os.W_OK | os.X_OK):
        making = "" if existing == folder else f" (to make {folder})"
        raise ConfigError(f"{key}: cannot write in the folder {existing}{making}: permission denied")
