"""`bench transport --modes hub`: the whole daemon with stages that do nothing, through the real
supervisor: the daemon's own cost a frame (bench/transport.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from bench.transport_hops import summary
from framewire.components import Stage

# Internals on purpose, in this one place (docs/benchmarks.md, tests/unit/bench/test_public_api.py):
# this measures the hub itself, a Plan with stages that do nothing run by its supervisor, which no
# user drives directly.
from framewire.pipeline.plan import Plan, SourcePlan, StageSpec  # the Plan's own element type
from framewire.pipeline.run.supervisor import Supervisor


class StillSource:
    """A source (pipeline.frame.FrameSource) that hands out the same picture `frames` times."""

    def __init__(self, width: int, height: int, frames: int) -> None:
        self.width, self.height, self.count = width, height, frames

    def open(self) -> dict[str, Any]:
        return {
            "source_id": "still",
            "uri": "bench:still",
            "width": self.width,
            "height": self.height,
            "fps": "1000/1",
            "time_base": "1/1000",
            "frame_count": self.count,
        }

    def frames(self) -> Any:
        # As a decoder converting into the slot (media.video_reader.PendingImage), with no work to do:
        # what is left is the daemon's own cost.
        picture = _Converted((self.height, self.width, 3))
        for i in range(self.count):
            yield picture, i, i / 1000.0

    def close(self) -> None:
        return None


class _Converted:
    """Pixels that are already in their slot (pipeline.frame.PendingPixels)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def write_into(self, out: Any) -> None:
        return None


class NoopStage(Stage):
    """A stage that passes its frame on untouched; as an output (`latencies` set), it writes each
    frame's latency from decode into that file when its source ends."""

    def __init__(self, latencies: str | None = None) -> None:
        self.latencies_path = latencies
        self.latencies: list[float] = []

    def process(self, frame: Any) -> Any:
        if self.latencies_path is None:
            yield frame
            return
        self.latencies.append((time.time() - frame.timings["decode"][0]) * 1000.0)

    def flush(self, source_id: str) -> Any:
        if self.latencies_path is not None:
            import json

            with open(self.latencies_path, "w", encoding="utf-8") as f:
                json.dump(self.latencies, f)
        return ()

    def stop(self) -> None:
        return None


def _still(width: int, height: int, frames: int) -> StillSource:
    return StillSource(width, height, frames)


def _noop(latencies: str | None = None) -> NoopStage:
    return NoopStage(latencies)


def _image_layout(source_id: str, info: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    return {"image": ((int(info["height"]), int(info["width"]), 3), "uint8")}


def hub(width: int, height: int, frames: int) -> dict[str, Any]:
    """Frames through the real supervisor and the default job's processes, with no work in them."""
    import functools
    import json

    import psutil

    folder = tempfile.mkdtemp(prefix="fw-hub-")
    latencies_path = os.path.join(folder, "latencies.json")
    # As the default job's specs say: the model's stage sheds, the stages up to it skip stale frames.
    middle = tuple(
        StageSpec(
            name,
            2 if name == "infer" else 1,
            functools.partial(_noop),
            sheds=name == "infer",
            skips_stale=name in ("preprocess", "infer"),
        )
        for name in ("preprocess", "infer", "postprocess", "composite")
    )
    outputs = (
        StageSpec("output0", 1, functools.partial(_noop, latencies_path), writes_output=True),
        StageSpec("output1", 1, functools.partial(_noop), writes_output=True),
        StageSpec("output2", 1, functools.partial(_noop), writes_output=True),
    )
    plan = Plan(
        stages=(*middle, *outputs),
        sources=(SourcePlan("still", functools.partial(_still, width, height, frames)),),
        slot_layout=_image_layout,
        preload=("bench.transport_hub",),
    )
    marks: dict[int, tuple[float, dict[int, float]]] = {}
    first, last = max(1, frames // 5), max(2, frames * 9 // 10)

    def cpu_now() -> dict[int, float]:
        """CPU seconds per process: a delta is only taken for processes alive at both marks (one
        that exits in between would otherwise subtract its whole history)."""
        per_pid: dict[int, float] = {}
        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            try:
                t = proc.cpu_times()
                per_pid[proc.pid] = t.user + t.system
            except psutil.Error:
                continue
        return per_pid

    def progress(done: int, _total: int | None) -> None:
        if done in (first, last):
            marks[done] = (time.monotonic(), cpu_now())

    try:
        report = Supervisor(plan, progress=progress).run()
        latencies = json.loads(open(latencies_path, encoding="utf-8").read())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if report.exit_code or first not in marks or last not in marks:
        raise RuntimeError(f"bench transport: the no-op pipeline failed: {report.error}")
    (t0, c0), (t1, c1) = marks[first], marks[last]
    counted = last - first
    cpu_s = sum(max(0.0, c1[pid] - c0[pid]) for pid in c0.keys() & c1.keys())
    out = summary(latencies[first:last], cpu_s, counted)
    out["fps"] = counted / (t1 - t0) if t1 > t0 else None
    return out
