"""JSON Lines output: one compact JSON record per line, one line per frame."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import IO, Any

import numpy as np

from framewire.pipeline.errors import FramewireError

log = logging.getLogger(__name__)


def _plain(value: object) -> Any:
    """JSON fallback for numpy values that tasks tend to leave in their results."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class JsonlWriter:
    """Writes one compact JSON line per `write()`; `close()` flushes and may be called twice."""

    def __init__(self, path: str, *, append: bool = False) -> None:
        """Cheap: the file is created (or, with `append`, opened to add lines) by `open()`."""
        self.path = path
        self.append = append
        self._file: IO[str] | None = None
        self.records = 0

    def open(self) -> None:
        """Create parent directories and the file (truncating an old one, unless appending)."""
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # Line-buffered: each record reaches the file as it is written, so a killed daemon's file
            # holds every frame it output (one write a frame: nothing next to the encoding).
            self._file = open(self.path, "a" if self.append else "w", encoding="utf-8", buffering=1)  # noqa: SIM115
        except OSError as err:
            raise FramewireError(f"jsonl output {self.path}: cannot write: {err.strerror or err}") from err
        log.info("jsonl output %s: open", self.path)

    def write(self, record: dict[str, Any]) -> None:
        """Append `record` as one line; numpy scalars and arrays become plain JSON."""
        if self._file is None:
            raise FramewireError(f"jsonl output {self.path}: write before open or after close")
        try:
            line = json.dumps(
                record, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_plain
            )
        except (TypeError, ValueError) as err:
            raise FramewireError(
                f"jsonl output {self.path}: record {self.records} is not JSON: {err}"
            ) from err
        self._file.write(line + "\n")
        self.records += 1

    def close(self) -> None:
        """Flush and close; harmless to call twice."""
        if self._file is None:
            return
        self._file.close()
        self._file = None
        log.info("jsonl output %s: closed after %s records", self.path, self.records)

    def __enter__(self) -> JsonlWriter:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
