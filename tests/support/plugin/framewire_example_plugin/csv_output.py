"""`kind: csv`: one line per frame, `source,seq,brightness`, a file per source."""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO, Literal

from pydantic import Field, field_validator

from framewire.config import OutputConfig
from framewire.pipeline.frame import Frame, Stage


class CsvOutputConfig(OutputConfig):
    """Keys of a `csv` output."""

    kind: Literal["csv"] = Field(description="One CSV line per frame.")
    path: str = Field(description="Output file; `{source_id}` is replaced by the source's id.")
    header: bool = Field(True, description="Write a header line first.")

    @field_validator("path")
    @classmethod
    def _has_a_name(cls, value: str) -> str:
        if not value.endswith(".csv"):
            raise ValueError(f"must end in .csv, not {value!r}")
        return value


class CsvOutput(Stage):
    """Writes each frame's `brightness` result; closes a source's file at its end of stream."""

    Config = CsvOutputConfig

    def __init__(self, config: CsvOutputConfig) -> None:
        self.config = config
        self._files: dict[str, IO[str]] = {}

    def process(self, frame: Frame) -> Iterable[Frame]:
        out = self._files.get(frame.source_id)
        if out is None:
            out = open(self.config.path.replace("{source_id}", frame.source_id), "w", encoding="utf-8")
            if self.config.header:
                out.write("source,seq,brightness\n")
            self._files[frame.source_id] = out
        out.write(f"{frame.source_id},{frame.seq},{(frame.result or {}).get('brightness')}\n")
        return ()

    def flush(self, source_id: str) -> Iterable[Frame]:
        out = self._files.pop(source_id, None)
        if out is not None:
            out.close()
        return ()

    def stop(self) -> None:
        for source_id in list(self._files):
            self.flush(source_id)
