"""Fakes for integration tests: a synthetic source and model-free stages, importable by spawned
workers (factories are module-level)."""

from __future__ import annotations

import functools
import json
import os
import random
import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from framewire.pipeline.frame import Frame, Stage, StageContext


class SyntheticSource:
    """`frames` frames of `width`x`height`, each filled with its index (mod 251), 25 fps."""

    def __init__(self, source_id: str, frames: int, width: int = 64, height: int = 48, fail_at: int | None = None,
                 delay_s: float = 0.0) -> None:
        self.source_id = source_id
        self.count = frames
        self.width = width
        self.height = height
        self.fail_at = fail_at
        self.delay_s = delay_s

    def open(self) -> dict[str, Any]:
        return {
            "source_id": self.source_id,
            "uri": f"synthetic:{self.source_id}",
            "width": self.width,
            "height": self.height,
            "fps": "25/1",
            "time_base": "1/25",
            "frame_count": self.count,
            "duration_s": self.count / 25.0,
            "has_audio": False,
            "audio_codec": None,
            "is_file": False,
        }

    def frames(self) -> Iterator[tuple[np.ndarray, int, float]]:
        for i in range(self.count):
            if self.fail_at is not None and i == self.fail_at:
                raise RuntimeError(f"source {self.source_id}: synthetic failure at frame {i}")
            if self.delay_s:
                time.sleep(self.delay_s)
            yield np.full((self.height, self.width, 3), i % 251, dtype=np.uint8), i, i / 25.0

    def close(self) -> None:
        return None


class Passthrough(Stage):
    """A middle stage: records that it saw the frame, optionally sleeping a random short while."""

    def __init__(self, name: str, max_sleep_s: float = 0.0, fail_seq: int | None = None) -> None:
        self.name = name
        self.max_sleep_s = max_sleep_s
        self.fail_seq = fail_seq

    def start(self, ctx: StageContext) -> None:
        self.rng = random.Random(ctx.index)

    def process(self, frame: Frame) -> Iterable[Frame]:
        if self.fail_seq is not None and frame.seq == self.fail_seq:
            raise ValueError(f"{self.name} refuses frame {frame.seq}")
        if self.max_sleep_s:
            time.sleep(self.rng.uniform(0, self.max_sleep_s))
        value = int(frame.region("image")[0, 0, 0])
        seen = list(frame.meta.get("seen", []))
        seen.append(self.name)
        frame.meta = {**frame.meta, "seen": seen, "value": value}
        frame.tensors = {"value": np.array([value], dtype=np.int32)}
        yield frame

    def flush(self, source_id: str) -> Iterable[Frame]:
        return ()

    def stop(self) -> None:
        return None


class RecordingSink(Stage):
    """An output: one JSON line per frame into `path/<source>.jsonl`, and a `.closed` marker on EOS."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.files: dict[str, Any] = {}

    def start(self, ctx: StageContext) -> None:
        os.makedirs(self.path, exist_ok=True)

    def process(self, frame: Frame) -> Iterable[Frame]:
        f = self.files.get(frame.source_id)
        if f is None:
            f = self.files[frame.source_id] = open(os.path.join(self.path, f"{frame.source_id}.jsonl"), "w")
        pixel = int(frame.region("image")[0, 0, 0])
        f.write(json.dumps({"seq": frame.seq, "pixel": pixel, "meta": frame.meta, "error": frame.error}) + "\n")
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


class FailingStart(Stage):
    """A stage whose start-up fails, like an engine that cannot load its model."""

    def start(self, ctx: StageContext) -> None:
        from framewire.pipeline.errors import EngineError

        raise EngineError("model.path: fake engine cannot load broken.onnx")

    def process(self, frame: Frame) -> Iterable[Frame]:
        yield frame

    def flush(self, source_id: str) -> Iterable[Frame]:
        return ()

    def stop(self) -> None:
        return None


def source(source_id: str, frames: int, **kwargs: Any) -> SyntheticSource:
    return SyntheticSource(source_id, frames, **kwargs)


class HangsOnce(Passthrough):
    """A middle stage that hangs for an hour on frame `seq` the first time any worker meets it
    (a marker file says it did), as a stage stuck in a driver call would."""

    def __init__(self, name: str, seq: int, marker: str) -> None:
        super().__init__(name)
        self.seq = seq
        self.marker = marker

    def process(self, frame: Frame) -> Iterable[Frame]:
        if frame.seq == self.seq and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            time.sleep(3600)
        return super().process(frame)


class HangingSink(RecordingSink):
    """An output that hangs for an hour on frame `seq`."""

    def __init__(self, path: str, seq: int) -> None:
        super().__init__(path)
        self.seq = seq

    def process(self, frame: Frame) -> Iterable[Frame]:
        if frame.seq == self.seq:
            time.sleep(3600)
        return super().process(frame)


def passthrough(name: str, max_sleep_s: float = 0.0, fail_seq: int | None = None) -> Passthrough:
    return Passthrough(name, max_sleep_s, fail_seq)


def sink(path: str) -> RecordingSink:
    return RecordingSink(path)


def failing_start() -> FailingStart:
    return FailingStart()


def layout(source_id: str, info: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    return {"image": ((int(info["height"]), int(info["width"]), 3), "uint8")}


class BatchingPassthrough(Passthrough):
    """A middle stage with `process_batch`: records the batch size it saw in each frame's meta."""

    def __init__(self, name: str, max_batch: int, max_delay_ms: float) -> None:
        super().__init__(name)
        self.max_batch = max_batch
        self.max_delay_ms = max_delay_ms

    def process_batch(self, frames: list[Frame]) -> list[Frame]:
        time.sleep(0.01)  # slower than the source, so frames wait and batches fill
        out = []
        for frame in frames:
            (processed,) = self.process(frame)
            processed.meta = {**processed.meta, "batch_seen": len(frames)}
            out.append(processed)
        return out


def batching(name: str, max_batch: int, max_delay_ms: float = 5.0) -> BatchingPassthrough:
    return BatchingPassthrough(name, max_batch, max_delay_ms)


def make_source_plan(raw: dict[str, Any]) -> Any:
    """The control API's source factory for fake jobs: {"id": ..., "frames": n, "delay_s": x, "policy": p}."""
    from framewire.pipeline.errors import ConfigError
    from framewire.pipeline.plan import Policy, SourceOptions, SourcePlan

    if "id" not in raw or not isinstance(raw.get("frames", 1), int):
        raise ConfigError("source: needs an id and an integer frames")
    sid = str(raw["id"])
    kwargs = {"delay_s": float(raw.get("delay_s", 0.0))}
    options = SourceOptions(policy=Policy(raw.get("policy", "block")))
    return SourcePlan(sid, functools.partial(source, sid, int(raw.get("frames", 10)), **kwargs), options, item=dict(raw))


class Ordered(Passthrough):
    """A stage that keeps state per source (`ordered`): notes in each frame's meta which worker saw
    it and whether it came right after the source's previous frame; on a source's end it leaves a
    marker file `<source>.flushed.<worker>` in `path`."""

    ordered = True

    def __init__(self, name: str, path: str, max_sleep_s: float = 0.0) -> None:
        super().__init__(name, max_sleep_s)
        self.path = path
        self.last: dict[str, int] = {}

    def start(self, ctx: StageContext) -> None:
        super().start(ctx)
        self.index = ctx.index

    def process(self, frame: Frame) -> Iterable[Frame]:
        last = self.last.get(frame.source_id)
        self.last[frame.source_id] = frame.seq
        (out,) = super().process(frame)
        out.meta = {**out.meta, self.name: {"worker": self.index, "in_order": last is None or frame.seq == last + 1}}
        yield out

    def flush(self, source_id: str) -> Iterable[Frame]:
        self.last.pop(source_id, None)
        open(os.path.join(self.path, f"{source_id}.flushed.{self.index}"), "w").close()
        return ()


def ordered(name: str, path: str, max_sleep_s: float = 0.0) -> Ordered:
    return Ordered(name, path, max_sleep_s)
