"""The single-process loop a user would write by hand, for `bench pipeline` to race the daemon against.

Decode, preprocess, infer, postprocess, composite, write: one frame at a time, in one process, with
the daemon's own pieces (the same `VideoReader`, task, engine, composites, H.264 writer, JSONL writer
and ZeroMQ publisher) and the same settings, so that the only difference is how the work is laid
out. Several sources are read round-robin. It runs in a spawned child (`loop_main`), so that its
start-up (imports, model load) and its CPU time are counted the way the daemon's are.

Timings follow the daemon's records: `latency_ms.total` counts from the end of a frame's decode (for
a real-time source, from when the frame is due), `latency_ms.decode` is the decode itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


def loop_main(config_raw: Mapping[str, Any], engine_threads: int, result_path: str) -> None:
    """Child entry point: run the job of `config_raw` as a plain loop; write timings to `result_path`."""
    started = time.time()
    result = run_loop(config_raw, engine_threads)
    result["started"] = started
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(result, f)


@dataclass
class _Source:
    """One source of the loop: its reader, its frames, its model input buffer, its outputs."""

    config: Any  # pipeline.config.SourceConfig
    reader: Any  # media.video_reader.VideoReader
    info: Any  # media.video_reader.StreamInfo
    frames: Iterator[Any]
    input: Any  # np.ndarray shaped as the task's input
    count: int = 0
    clock: tuple[float, float] | None = None  # (monotonic start, first frame time) when real-time

    @property
    def done(self) -> bool:
        limit = self.config.max_frames
        return limit is not None and self.count >= limit

    @property
    def expected(self) -> int:
        n, limit = self.info.frame_count or 0, self.config.max_frames
        return min(n, limit) if (n and limit) else (n or limit or 0)


def run_loop(config_raw: Mapping[str, Any], engine_threads: int) -> dict[str, Any]:
    import numpy as np

    from framewire import validate_config
    from framewire.components import (
        RECORD_VERSION, Frame, JsonlOutput, JsonlWriter, Publisher, Result, VideoFileOutput, VideoReader,
        VideoWriter, ZmqOutput, composites_from_config, frame_record, local_path, open_engine, resolve_path,
        task_from_config,
    )

    imported = time.time()
    config = validate_config(config_raw, "bench loop")
    task = task_from_config(config)
    composites = composites_from_config(config)
    engine_config = config.engine.model_copy(update={"threads": engine_threads, "max_batch": 1})
    engine = open_engine(engine_config, config.model.path, task.dynamic_axes())

    sources: list[_Source] = []
    for source_config in config.sources:
        reader = VideoReader(source_config.id, source_config.uri)
        info = reader.open()
        spec = task.input_spec(info.width, info.height)
        buffer = np.empty(tuple(int(d) for d in spec.shape if d is not None), dtype=spec.dtype)
        sources.append(_Source(source_config, reader, info, iter(reader.frames()), buffer))

    videos: list[dict[str, Any]] = []  # per output: source id -> VideoWriter
    jsonls: list[dict[str, Any]] = []  # per output: source id -> JsonlWriter
    publishers: list[Any] = []
    for out in config.outputs:
        if isinstance(out, VideoFileOutput):
            files: dict[str, Any] = {}
            for s in sources:
                audio = local_path(s.config.uri) if (out.audio and s.info.has_audio) else None
                path = resolve_path(out.path, s.info.source_id)
                files[s.info.source_id] = VideoWriter(
                    path, s.info, crf=out.crf, preset=out.preset, audio_from=audio,
                    container=out.container, fragment_s=out.fragment_s,
                )  # the same file as the daemon's, fragments and keyframes included
            videos.append(files)
        elif isinstance(out, JsonlOutput):
            ids = [s.info.source_id for s in sources]
            jsonls.append({i: JsonlWriter(resolve_path(out.path, i)) for i in ids})
        elif isinstance(out, ZmqOutput):
            publishers.append(Publisher(out.endpoint, out.mode, out.hwm))
    for writer in [w for per in videos + jsonls for w in per.values()] + publishers:
        writer.open()
    ready = time.time()

    half = max(1, sum(s.expected for s in sources) // 2)
    memory: dict[str, float] = {}
    done_times: list[float] = []
    active = list(sources)
    while active:
        for s in list(active):
            t0 = time.time()
            decoded = next(s.frames, None) if not s.done else None
            if decoded is None:
                active.remove(s)
                continue
            t1 = decoded_at = time.time()
            if s.config.realtime:  # paced to the file's own frame rate, as the daemon's decode does
                if s.clock is None:
                    s.clock = (time.monotonic(), decoded.time_s)
                delay = s.clock[0] + (decoded.time_s - s.clock[1]) - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                    t1 = time.time()  # the frame is due now: its latency starts here
            image = decoded.image
            meta = task.preprocess(image, s.input)
            t2 = time.time()
            outputs = engine.infer({task.input_name: s.input}, task.output_names)
            t3 = time.time()
            result = task.postprocess(outputs, meta, s.info.width, s.info.height)
            t4 = time.time()
            for composite in composites:
                composite.apply(image, Result(result.data, dict(result.arrays)))  # drawn in place
            t5 = time.time()
            for video in videos:
                video[s.info.source_id].write(image, decoded.pts)
            frame = Frame(
                source_id=s.info.source_id,
                seq=s.count,
                pts=decoded.pts,
                time_s=decoded.time_s,
                width=s.info.width,
                height=s.info.height,
                result=result.data,
                timings={
                    "decode": [t1, t1],  # `total` counts from here, as in the daemon's records
                    "preprocess": [t1, t2],
                    "infer": [t2, t3],
                    "postprocess": [t3, t4],
                    **({"composite": [t4, t5]} if composites else {}),
                },
            )
            record = frame_record(frame)
            record["latency_ms"]["decode"] = round((decoded_at - t0) * 1000.0, 3)
            for jsonl in jsonls:
                jsonl[s.info.source_id].write(record)
            for publisher in publishers:
                publisher.send(s.info.source_id, record)
            s.count += 1
            done_times.append(time.time())
            if len(done_times) == half:
                memory = _memory()

    for publisher in publishers:
        for s in sources:
            publisher.send(s.info.source_id, {"v": RECORD_VERSION, "source": s.info.source_id, "eos": True})
        publisher.close()
    for writer in [w for per in videos + jsonls for w in per.values()]:
        writer.close()
    for s in sources:
        s.reader.close()
    provider = engine.provider
    engine.close()
    return {
        "imported": imported,
        "ready": ready,
        "done_times": done_times,
        "ended": time.time(),
        "frames": {s.info.source_id: s.count for s in sources},
        "engine_threads": engine_threads,
        "provider": provider,
        "memory": memory,
    }


def _memory() -> dict[str, float]:
    """This process's RSS, PSS and USS in MiB (read half-way through the job)."""
    import psutil

    info = psutil.Process().memory_full_info()
    mib = {k: round(getattr(info, k, 0) / 2**20, 1) for k in ("rss", "pss", "uss")}
    return {"processes": 1, "rss_mib": mib["rss"], "pss_mib": mib["pss"], "uss_mib": mib["uss"]}
