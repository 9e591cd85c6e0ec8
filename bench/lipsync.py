"""`bench lipsync`: the lip-sync generator workload (configs/lipsync.yaml: 320x320, image [1, 6, 320,
320] + audio [1, 512, 1, 8] -> [1, 3, 320, 320]) with 1, 2 and 3 processes, each serving one source:
frames per second per process, and the share of a frame's time spent outside the model, for the
daemon and for the same job written as one loop (N copies of the loop, one per source, side by side).

The daemon runs N sources (the config's first, copied under new ids) with N infer processes, in two
layouts: `fused` (each infer process runs region, audio features, preprocessing, the generator, the
paste, and hands the frame to one output process for H.264 + JSONL) and `split` (region and audio
features, preprocessing, postprocessing and the paste in processes of their own: the infer processes
run the model only, which is what the staged pipeline is for). The loop does the same steps with the
daemon's own pieces (stages.steps, the generator task, the paste composite, the writer), one frame at
a time; N loops run side by side.

The share outside the model is measured in CPU time, which a busy machine (other processes on the
same cores) does not inflate as it does wall time: the model's CPU per frame is the CPU of the
process that runs it times the model's part of that process's time per frame (its span over the
sum of the spans there, both stretched alike by waiting for a core); the frame's CPU is that of
every process (the daemon's: decode, hub, the fused workers, the outputs), per frame.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import harness


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    add_config_args(parser)
    parser.set_defaults(config=str(harness.ROOT / "configs" / "lipsync.yaml"))
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 3], help="processes (= sources) to try")
    parser.add_argument("--seconds", type=float, default=20.0, help="audio per source (its first seconds)")
    parser.add_argument("--layouts", nargs="+", default=["fused", "split"], choices=["fused", "split"], help="daemon layouts")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    parser.add_argument(
        "--max-load", type=float, default=None,
        help="before each run, wait (up to 45 s) for the 1-minute load average to drop below this",
    )


def run(args: argparse.Namespace) -> int:
    from framewire import load_config
    from framewire.components import resolve_inputs

    config = resolve_inputs(load_config(args.config, args.overrides), [harness.ROOT])
    before = harness.machine()
    points = [measure(config, n, args.seconds, args.max_load, args.layouts) for n in args.processes]
    result = {"machine": before, "load_after": harness.load_average(), "seconds": args.seconds, "points": points}
    harness.write_json(args.json, harness.rounded(result))
    harness.say(format_table(result))
    return 1 if any(p[layout]["exit_code"] for p in points for layout in args.layouts) else 0


def measure(
    config: Any, processes: int, seconds: float, max_load: float | None = None, layouts: Sequence[str] = ("fused",)
) -> dict[str, Any]:
    """One point: the daemon with `processes` sources and infer processes (each layout), then as
    many loops."""
    loads: list[list[float]] = []
    point: dict[str, Any] = {"processes": processes}
    with tempfile.TemporaryDirectory(prefix="framewire-lipsync-") as folder:
        audio = clip_audio(config, Path(folder), seconds)
        for layout in layouts:
            if max_load is not None:
                loads.append(harness.wait_for_quiet(max_load, harness.QUIET_WAIT_S, harness.stderr))
            harness.stderr(f"lipsync: daemon ({layout}), {processes} process(es)")
            point[layout] = run_layout(config, processes, audio, Path(folder) / layout, layout)
        if max_load is not None:
            loads.append(harness.wait_for_quiet(max_load, harness.QUIET_WAIT_S, harness.stderr))
        harness.stderr(f"lipsync: {processes} loop(s)")
        loops = run_loops(config, processes, audio, Path(folder))
    point.update(loop=loop_stats(loops), load=harness.load_average(), load_before=loads)
    return reconcile(point)


def reconcile(point: dict[str, Any]) -> dict[str, Any]:
    """Split, the infer process runs the model and its messages only: its span is all it does, so
    the model's CPU there is taken from the fused run of the same point (the same model, the same
    inputs), and what the split infer process spends beyond it is its share outside the model."""
    fused, split = point.get("fused"), point.get("split")
    if not fused or not split or not fused.get("model_cpu_ms"):
        return point
    model = fused["model_cpu_ms"]
    infer_cpu = sum(v for k, v in split["cpu_ms_by_process"].items() if "infer" in k)
    split["model_cpu_ms"] = model
    split["outside_model"] = 1 - model / split["cpu_ms_per_frame"] if split.get("cpu_ms_per_frame") else None
    split["infer_process_outside_model"] = max(0.0, 1 - model / infer_cpu) if infer_cpu else None
    return point


def run_layout(config: Any, processes: int, audio: str, folder: Path, layout: str) -> dict[str, Any]:
    """The daemon in one layout: fps per infer process, CPU per frame, the model's part of it."""
    from bench.runs import run_daemon

    folder.mkdir(parents=True)
    daemon = run_daemon(daemon_job(config, processes, audio, folder, split=layout == "split"))
    spans = member_spans(records(folder))
    frames = max(1, daemon["frames"])
    worker_cpu_ms = 1000.0 * sum(v for k, v in daemon["cpu_s_by_process"].items() if "infer" in k) / frames
    # Fused, the infer process runs every member; split, only the model (its span is the whole).
    inside = spans if layout == "fused" else {"infer": spans.get("infer", 0.0)}
    model_part = spans["infer"] / sum(inside.values()) if spans.get("infer") else None
    model_cpu = worker_cpu_ms * model_part if model_part else None
    cpu_ms = daemon.get("cpu_ms_per_frame")
    return {
        "exit_code": daemon["exit_code"],
        "frames": daemon["frames"],
        "fps_per_process": (daemon["steady_fps"] or 0.0) / processes,
        "model_cpu_ms": model_cpu,
        "cpu_ms_per_frame": cpu_ms,
        "outside_model": 1 - model_cpu / cpu_ms if model_cpu and cpu_ms else None,
        "infer_process_outside_model": 1 - model_cpu / worker_cpu_ms if model_cpu and worker_cpu_ms else None,
        "spans_ms": spans,
        "cpu_ms_by_process": {k: 1000.0 * v / frames for k, v in daemon["cpu_s_by_process"].items()},
        "cores_used": daemon["cores_used"],
    }


def loop_stats(loops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    loop_fps = [loop["steady_fps"] or 0.0 for loop in loops]
    loop_spans = harness.median_of([loop["steps_ms"] for loop in loops])
    loop_part = loop_spans["model"] / sum(loop_spans.values())
    loop_cpu = harness.median(loop["cpu_ms_per_frame"] for loop in loops)
    return {
        "frames": sum(loop["frames"] for loop in loops),
        "fps_per_process": sum(loop_fps) / len(loop_fps),
        "model_cpu_ms": loop_cpu * loop_part if loop_cpu else None,
        "cpu_ms_per_frame": loop_cpu,
        "outside_model": 1 - loop_part,
        "spans_ms": loop_spans,
    }


def clip_audio(config: Any, folder: Path, seconds: float) -> str:
    """The first `seconds` of the config's audio (looped if shorter), as a WAV in `folder`."""
    import numpy as np

    from framewire.components import AudioDecoder

    source = config.sources[0]
    decoder = AudioDecoder(source.id, source.audio.uri, 16000)
    decoder.open()
    samples = np.concatenate([c.samples for c in decoder.chunks()])
    decoder.close()
    samples = np.tile(samples, int(np.ceil(seconds * 16000 / samples.size)))[: int(seconds * 16000)]
    path = folder / "audio.wav"
    write_wav(path, samples)
    return str(path)


def write_wav(path: Path, samples: Any) -> None:
    import av
    import numpy as np

    with av.open(str(path), "w") as container:
        stream = container.add_stream("pcm_s16le", rate=16000, layout="mono")
        frame = av.AudioFrame.from_ndarray((np.clip(samples, -1, 1) * 32767).astype(np.int16)[None], format="s16", layout="mono")
        frame.sample_rate, frame.pts = 16000, 0
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def daemon_job(config: Any, processes: int, audio: str, folder: Path, *, split: bool = False) -> Any:
    from framewire import validate_config

    raw = config.model_dump(mode="json", exclude_none=True)
    first = raw["sources"][0]
    raw["sources"] = [{**first, "id": f"avatar{i}", "audio": {**first["audio"], "uri": audio}} for i in range(processes)]
    raw["engine"]["processes_per_device"] = processes
    raw["stages"] = {**raw.get("stages", {}), "fuse": not split, "fuse_outputs": True}
    if split:  # the region step keeps state per source: one worker per source, as infer has
        raw["steps"] = [{**step, "workers": processes if step["kind"] == "region" else 1} for step in raw["steps"]]
    raw["outputs"] = [
        {"kind": "video_file", "path": str(folder / "daemon-{source_id}.mp4")},
        {"kind": "jsonl", "path": str(folder / "daemon-{source_id}.jsonl")},
    ]
    return validate_config(raw, "bench lipsync")


def member_spans(found: list[dict[str, Any]]) -> dict[str, float]:
    """Mean time per frame in each member of the fused stage (ms): every span but decode's."""
    spans: dict[str, list[float]] = {}
    for record in found:
        for name, value in record["latency_ms"].items():
            if name not in ("decode", "total"):
                spans.setdefault(name, []).append(float(value))
    return {name: sum(values) / len(values) for name, values in spans.items()}


def records(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in folder.glob("daemon-*.jsonl"):
        out += [json.loads(line) for line in path.open(encoding="utf-8")]
    return out


def run_loops(config: Any, processes: int, audio: str, folder: Path) -> list[dict[str, Any]]:
    """`processes` loops side by side, each in a spawned child, each on its own source."""
    raw = config.model_dump(mode="json", exclude_none=True)
    context = multiprocessing.get_context("spawn")
    results = [folder / f"loop-{i}.json" for i in range(processes)]
    children = [
        context.Process(target=loop_main, args=(raw, audio, str(folder / f"loop-{i}.mp4"), str(results[i])))
        for i in range(processes)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join()
    return [json.loads(path.read_text()) for path in results if path.exists()]


def loop_main(config_raw: Mapping[str, Any], audio: str, video_out: str, result_path: str) -> None:
    """Child entry point: the lip-sync job as one loop; timings to `result_path`."""
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(run_loop(config_raw, audio, video_out), f)


def run_loop(config_raw: Mapping[str, Any], audio: str, video_out: str) -> dict[str, Any]:
    """Decode the template, read the audio into a ring, then per frame: region, audio features,
    preprocess, the generator, postprocess, paste, encode; in this one thread."""
    import numpy as np

    from framewire import validate_config
    from framewire.components import (
        Frame, OpenOptions, Result, StageContext, VideoReader, VideoWriter, composites_from_config,
        open_engine, steps_from_config, task_from_config,
    )

    # An internal on purpose (docs/benchmarks.md, tests/unit/bench/test_public_api.py): the loop
    # hands its audio steps their samples the way the daemon does, through the shared-memory ring.
    from framewire.pipeline.wire.audioring import AudioRing, AudioRingLayout

    config = validate_config(config_raw, "bench loop")
    task, composites = task_from_config(config), composites_from_config(config)
    steps = steps_from_config(config)
    engine = open_engine(config.engine, config.model.path, task.dynamic_axes(), OpenOptions())
    task.check_model(engine.inputs, engine.outputs)
    for step in steps:
        step.start(StageContext(step.name, 0))
    source = config.sources[0]
    with VideoReader(source.id, source.uri) as reader:
        info, template = reader.info, [f.image for f in reader.frames()]
    order = list(range(len(template))) + list(range(len(template) - 2, 0, -1))
    ring = AudioRing.create(AudioRingLayout(f"framewire-bench-{uuid.uuid4().hex[:8]}", 16000, 16000 * 600))
    try:
        seconds = fill_ring(ring, audio)
        writer = VideoWriter(video_out, info, audio_from=audio)
        writer.open()
        spec = task.input_spec(info.width, info.height)
        buffer = np.zeros(tuple(int(d) for d in spec.shape), np.float32)  # type: ignore[arg-type]
        count = int(np.ceil(seconds * info.fps))
        times: dict[str, list[float]] = {}
        done: list[float] = []
        cpu_started = time.process_time()
        for k in range(count):
            pts = round(k / info.fps / info.time_base)
            image = template[order[k % len(order)]].copy()
            frame = Frame(source.id, k, pts, float(pts * info.time_base), info.width, info.height)
            frame.inline = {"image": image, "input": buffer}
            frame.pool_wire = {"name": "loop", "audio": ring.layout.to_wire()}
            t = time.perf_counter()
            for step in steps:
                frame = next(iter(step.process(frame)))
                t = _lap(times, step.name, t)
            frame.meta.update(task.preprocess_frame(frame, buffer))
            t = _lap(times, "preprocess", t)
            outputs = engine.infer(task.feeds(frame), task.output_names)
            t = _lap(times, "model", t)
            result = task.postprocess(outputs, frame.meta, info.width, info.height)
            t = _lap(times, "postprocess", t)
            for composite in composites:
                composite.apply(image, Result({**(frame.result or {}), **result.data}, dict(result.arrays)))
            t = _lap(times, "composite", t)
            writer.write(image, pts)
            _lap(times, "encode", t)
            done.append(time.time())
        writer.close()
    finally:
        ring.close()
        for step in steps:
            step.stop()
        engine.close()
    cpu_s = time.process_time() - cpu_started
    return {
        "frames": len(done),
        "steady_fps": harness.steady_fps(done),
        "cpu_ms_per_frame": 1000.0 * cpu_s / max(1, len(done)),
        "steps_ms": {name: sum(values) / len(values) for name, values in times.items()},
    }


def fill_ring(ring: Any, audio: str) -> float:
    from framewire.components import AudioDecoder

    decoder = AudioDecoder("loop", audio, ring.rate)
    decoder.open()
    for chunk in decoder.chunks():
        ring.write(chunk.samples, chunk.time_s)
    decoder.close()
    ring.end()
    end = ring.end_s()
    return float(end) if end is not None else 0.0


def _lap(times: dict[str, list[float]], name: str, started: float) -> float:
    now = time.perf_counter()
    times.setdefault(name, []).append((now - started) * 1000.0)
    return now


def format_table(result: Mapping[str, Any]) -> str:
    rows = [
        "processes | side | fps per process | outside the model: all CPU | in the infer process | "
        "CPU ms/frame | model CPU ms/frame"
    ]
    for p in result["points"]:
        for side in ("fused", "split", "loop"):
            if side not in p:
                continue
            s = p[side]
            rows.append(
                f"{p['processes']} | {side} | {s['fps_per_process']:.1f} | {_pct(s['outside_model'])} | "
                f"{_pct(s.get('infer_process_outside_model', s['outside_model']))} | "
                f"{_num(s['cpu_ms_per_frame'])} | {_num(s['model_cpu_ms'])}"
            )
        rows.append(f"  (load average at each start: {', '.join(f'{x[0]:.1f}' for x in p['load_before'])})")
    return "\n".join(rows)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"

