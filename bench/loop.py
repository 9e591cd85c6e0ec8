"""The single-process loop a user would write by hand, for `bench pipeline` to race the daemon against.

Decode, preprocess, infer, postprocess, composite, write: one frame at a time, in one process, with
the daemon's own pieces (the same `VideoReader`, task, engine, composites, H.264 writer, JSONL writer
and ZeroMQ publisher) and the same settings, so that the only difference is how the work is laid
out. Several sources are read round-robin. It runs in a spawned child (`loop_main`), so that its
start-up (imports, model load) and its CPU time are counted the way the daemon's are.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any


def loop_main(config_raw: Mapping[str, Any], engine_threads: int, result_path: str) -> None:
    """Child entry point: run the job of `config_raw` as a plain loop; write timings to `result_path`."""
    started = time.time()
    result = run_loop(config_raw, engine_threads)
    result["started"] = started
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(result, f)


def run_loop(config_raw: Mapping[str, Any], engine_threads: int) -> dict[str, Any]:
    import numpy as np

    from engines.registry import open_engine
    from pipeline.config import (
        JsonlOutput,
        VideoFileOutput,
        ZmqOutput,
        resolve_path,
        validate_config,
    )
    from pipeline.frame import Frame
    from pipeline.publish import Publisher
    from stages.decode import VideoReader, local_path
    from stages.outputs.jsonl import JsonlWriter
    from stages.outputs.record import frame_record
    from stages.outputs.video_file import VideoFileWriter
    from stages.plan import build_composites, build_task
    from stages.tasks.base import Result

    imported = time.time()
    config = validate_config(config_raw, "bench loop")
    task = build_task(config)
    composites = build_composites(config)
    engine_config = config.engine.model_copy(update={"threads": engine_threads, "max_batch": 1})
    engine = open_engine(engine_config, config.model.path, task.dynamic_axes())

    readers = []
    for source in config.sources:
        reader = VideoReader(source.id, source.uri)
        info = reader.open()
        spec = task.input_spec(info.width, info.height)
        readers.append(
            {
                "source": source,
                "reader": reader,
                "info": info,
                "frames": iter(reader.frames()),
                "input": np.empty(tuple(int(d) for d in spec.shape), dtype=spec.dtype),
                "count": 0,
                "clock": None,
            }
        )
    writers: list[tuple[str, Any, Any]] = []  # (kind, per-source writers or a publisher, config)
    for out in config.outputs:
        if isinstance(out, VideoFileOutput):
            per = {}
            for r in readers:
                info = r["info"]
                audio = local_path(r["source"].uri) if (out.audio and info.has_audio) else None
                writer = VideoFileWriter(
                    resolve_path(out.path, info.source_id), info, crf=out.crf, preset=out.preset, audio_from=audio
                )
                writer.open()
                per[info.source_id] = writer
            writers.append(("video_file", per, out))
        elif isinstance(out, JsonlOutput):
            per = {}
            for r in readers:
                writer = JsonlWriter(resolve_path(out.path, r["info"].source_id))
                writer.open()
                per[r["info"].source_id] = writer
            writers.append(("jsonl", per, out))
        elif isinstance(out, ZmqOutput):
            publisher = Publisher(out.endpoint, out.mode, out.hwm)
            publisher.open()
            writers.append(("zmq", publisher, out))
    ready = time.time()

    expected = 0
    for r in readers:
        n = r["info"].frame_count or 0
        limit = r["source"].max_frames
        expected += min(n, limit) if (n and limit) else (n or limit or 0)
    memory: dict[str, float] = {}
    done_times: list[float] = []
    active = list(readers)
    while active:
        for r in list(active):
            source, info = r["source"], r["info"]
            if source.max_frames is not None and r["count"] >= source.max_frames:
                active.remove(r)
                continue
            t0 = time.time()
            try:
                decoded = next(r["frames"])
            except StopIteration:
                active.remove(r)
                continue
            t1 = time.time()
            if source.realtime:  # paced to the file's own frame rate, as the daemon's decode does
                if r["clock"] is None:
                    r["clock"] = (time.monotonic(), decoded.time_s)
                delay = r["clock"][0] + (decoded.time_s - r["clock"][1]) - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                t1 = time.time()
            image = decoded.image
            meta = task.preprocess(image, r["input"])
            t2 = time.time()
            outputs = engine.infer({task.input_name: r["input"]}, task.output_names)
            t3 = time.time()
            result = task.postprocess(outputs, meta, info.width, info.height)
            t4 = time.time()
            for composite in composites:
                composite.apply(image, Result(result.data, dict(result.arrays)))
            t5 = time.time()
            frame = Frame(
                source_id=info.source_id,
                seq=r["count"],
                pts=decoded.pts,
                time_s=decoded.time_s,
                width=info.width,
                height=info.height,
                result=result.data,
                timings={
                    "decode": [t0, t1],
                    "preprocess": [t1, t2],
                    "infer": [t2, t3],
                    "postprocess": [t3, t4],
                    **({"composite": [t4, t5]} if composites else {}),
                },
            )
            for kind, sink, _ in writers:
                if kind == "video_file":
                    sink[info.source_id].write(image, decoded.pts)
                elif kind == "jsonl":
                    # latency_ms.total counts from the end of decode, as the daemon's records do
                    frame.timings["decode"] = [t1, t1]
                    record = frame_record(frame)
                    record["latency_ms"]["decode"] = round((t1 - t0) * 1000.0, 3)
                    sink[info.source_id].write(record)
                else:
                    sink.send(info.source_id, frame_record(frame))
            r["count"] += 1
            done_times.append(time.time())
            if len(done_times) == max(1, expected // 2):
                memory = _memory()

    for kind, sink, _ in writers:
        if kind == "zmq":
            for r in readers:
                sink.send(r["info"].source_id, {"v": 1, "source": r["info"].source_id, "eos": True})
            sink.close()
        else:
            for writer in sink.values():
                writer.close()
    for r in readers:
        r["reader"].close()
    engine.close()
    return {
        "imported": imported,
        "ready": ready,
        "done_times": done_times,
        "ended": time.time(),
        "frames": {r["info"].source_id: r["count"] for r in readers},
        "engine_threads": engine_threads,
        "provider": engine.provider,
        "memory": memory,
    }


def _memory() -> dict[str, float]:
    """This process's RSS, PSS and USS in MiB (read half-way through the job)."""
    import psutil

    info = psutil.Process().memory_full_info()
    mib = {k: round(getattr(info, k, 0) / 2**20, 1) for k in ("rss", "pss", "uss")}
    return {"processes": 1, "rss_mib": mib["rss"], "pss_mib": mib["pss"], "uss_mib": mib["uss"]}
