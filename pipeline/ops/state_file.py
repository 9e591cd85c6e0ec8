"""The daemon's state file: each source's settings changed at run time, kept across a restart.

JSON, `{"version": 1, "sources": {id: settings}}`, written whole to a temporary file beside it,
flushed to disk and renamed over it, so a crash leaves the old file or the new one, never half of
one. Read at start (framewire.app.compose.settings checks each source's settings as the config is,
and the hub applies them before the first frame). A file that is not such JSON is refused in one
line naming it (exit code 2): the daemon does not start on state it cannot read, nor overwrite it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from framewire.pipeline.errors import ConfigError

log = logging.getLogger(__name__)

VERSION = 1


def load(path: str) -> dict[str, dict[str, Any]]:
    """Each source's settings as the file holds them; empty when there is no file yet."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"http.state_file: cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"http.state_file: {path} is not JSON ({exc}): fix or remove it") from None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("sources"), dict):
        raise ConfigError(
            f'http.state_file: {path} is not a state file ({{"version": {VERSION}, "sources": {{...}}}}): '
            "fix or remove it"
        )
    for source_id, settings in data["sources"].items():
        if not isinstance(settings, dict):
            raise ConfigError(f"http.state_file: {path}: sources.{source_id} is not a map: fix or remove it")
    return {str(k): dict(v) for k, v in data["sources"].items()}


def save(path: str, sources: Mapping[str, Mapping[str, Any]]) -> None:
    """Write every source's settings (atomically: a temporary file renamed over `path`)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    body = json.dumps({"version": VERSION, "sources": {k: dict(v) for k, v in sorted(sources.items())}}, indent=1)
    fd, tmp = tempfile.mkstemp(prefix=".state-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
