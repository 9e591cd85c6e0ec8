"""Fakes for the live-source tests, importable by spawned workers (factories are module-level)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from typing import Any

from framewire.pipeline.frame import Frame, Stage, StageContext
from tests.support.fakes import Passthrough


class TimedSink(Stage):
    """An output: one JSON line per frame into `path/<source>.jsonl` with its seq, pts, first pixel,
    stage timings and the time it arrived; a `.closed` marker on EOS."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.files: dict[str, Any] = {}

    def start(self, ctx: StageContext) -> None:
        os.makedirs(self.path, exist_ok=True)

    def process(self, frame: Frame) -> Iterable[Frame]:
        f = self.files.get(frame.source_id)
        if f is None:
            f = self.files[frame.source_id] = open(os.path.join(self.path, f"{frame.source_id}.jsonl"), "w")
        record = {
            "seq": frame.seq,
            "pts": frame.pts,
            "pixel": int(frame.region("image")[0, 0, 0]),
            "ts": frame.timings,
            "at": time.time(),
            "error": frame.error,
        }
        f.write(json.dumps(record) + "\n")
        f.flush()
        return ()

    def flush(self, source_id: str) -> Iterable[Frame]:
        f = self.files.pop(source_id, None)
        if f is not None:
            f.close()
        open(os.path.join(self.path, f"{source_id}.closed"), "w").close()
        return ()

    def stop(self) -> None:
        for source_id in list(self.files):
            self.files.pop(source_id).close()


class Slow(Passthrough):
    """A middle stage slower than the source: `seconds` per frame."""

    def __init__(self, name: str, seconds: float) -> None:
        super().__init__(name)
        self.seconds = seconds

    def process(self, frame: Frame) -> Iterable[Frame]:
        time.sleep(self.seconds)
        return super().process(frame)


def timed_sink(path: str) -> TimedSink:
    return TimedSink(path)


def slow(name: str, seconds: float) -> Slow:
    return Slow(name, seconds)


def records(path: str | os.PathLike[str], source_id: str) -> list[dict[str, Any]]:
    file = os.path.join(path, f"{source_id}.jsonl")
    if not os.path.exists(file):
        return []
    with open(file) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]
