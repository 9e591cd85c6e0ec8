"""How every framewire process logs: one line per record, as text or as JSON.

Text (the default) is for a terminal. JSON (`--log-format json`) is one object a line, for a log
collector (journald, Docker, Kubernetes, Loki): `{"time", "level", "process", "logger", "message"}`
plus `exception` with `--debug`'s tracebacks. The daemon's processes all log the same way, each
named as `ps` names it (`supervisor`, `infer[0]`, `decode[1]`).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "process": self.process,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is when a record comes (a test or an embedding program may
    swap it), not to the one there was when logging was set up."""

    @property  # type: ignore[override]
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


_installed: logging.Handler | None = None


def configure(level: int, fmt: str = "text", process: str = "supervisor") -> None:
    """Log to stderr at `level` in `fmt` (text or json). Called again, it replaces its own handler
    and leaves any other one alone (a program that runs framewire in-process keeps its logging)."""
    global _installed
    handler = _Stderr()
    if fmt == "json":
        handler.setFormatter(JsonFormatter(process))
    else:
        name = "%(name)s" if process == "supervisor" else process
        handler.setFormatter(logging.Formatter(f"%(asctime)s {name} %(levelname)s %(message)s"))
    root = logging.getLogger()
    if _installed is not None:
        root.removeHandler(_installed)
    root.addHandler(handler)
    root.setLevel(level)
    _installed = handler
