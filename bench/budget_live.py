"""`bench budget --streams N`'s live job: N sources reading one loopback RTSP server, run through the
daemon, the work alone on the same stream (bench/limit.py) and, with `--peer`, the plain program
(bench/live_peer.py), alternating; with `--profile` or `--perf`, one more run sampled by py-spy or
Linux perf over its measured window."""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import harness, limit, live_peer, oncpu, pyspy
from bench.budget_sampling import DaemonSampler, Recorder, cpu_by_pid

FIRST_FRAME_TIMEOUT_S = 180.0


def live_job(config: Any, uri: str, streams: int, staleness_ms: float, folder: Path) -> Any:
    """`streams` sources reading `uri`, drop_oldest, stale after `staleness_ms`, one JSONL each."""
    from framewire import validate_config

    raw = config.model_dump(mode="json", exclude_none=True)
    first = dict(raw["sources"][0])
    for key in ("realtime", "max_frames", "live", "resume"):
        first.pop(key, None)  # a file's keys: the source is now a stream
    first.update(uri=uri, policy="drop_oldest", max_staleness_ms=staleness_ms)
    raw["sources"] = [{**first, "id": f"cam{i}"} for i in range(streams)]
    raw["outputs"] = [{"kind": "jsonl", "path": str(folder / "{source_id}.jsonl")}]
    raw["composite"] = []  # nothing shows the pixels
    folder.mkdir(parents=True, exist_ok=True)
    return validate_config(raw, "bench budget")


def run_live(
    job: Any, seconds: float, exclude: frozenset[int], record: Callable[[], Recorder] | None = None
) -> dict[str, Any]:
    """Run the live job until `seconds` after its first frame out; the CPU seconds its processes
    spent in that window (the start-up and the drain left out), each one's, and its report. With
    `record`, a py-spy recorder it starts samples that window; its raw text comes back too."""
    import framewire
    from bench.runs import stop_fork_server

    stop_fork_server()  # each run starts its own fork server, as `run` does
    first = threading.Event()
    sampler = DaemonSampler(exclude=exclude, interval_s=1.0)  # names and totals; the window is read directly
    sampler.start()
    started = time.time()
    running = framewire.start(job, progress=lambda done, total: first.set())
    out: dict[str, Any] = {"startup_s": None, "window_s": 0.0, "cpu_s": 0.0}
    try:
        if first.wait(FIRST_FRAME_TIMEOUT_S):
            out["startup_s"] = time.time() - started
            time.sleep(1.0)  # every source under way
            recorder = record() if record is not None else None
            if recorder is not None:
                sampler.exclude.add(recorder.process.pid)
            cpu0, t0 = cpu_by_pid(sampler), time.time()
            time.sleep(seconds)  # the measured window: the job runs on its own meanwhile
            cpu1, t1 = cpu_by_pid(sampler), time.time()
            out["raw_profile"] = recorder.stop() if recorder is not None else None
            names = {pid: s.name for pid, s in sampler.processes.items()}
            window = {pid: (names.get(pid, "?"), cpu - cpu0.get(pid, 0.0)) for pid, cpu in cpu1.items()}
            out.update(cpu_s=sum(c for _, c in window.values()), window_s=t1 - t0, window_by_pid=window)
    finally:
        running.stop()
        report = running.wait()
        sampler.stop()
    out.update(report=report, cpu_s_by_process=sampler.by_name())
    return out


def _server_cpu(pid: int) -> float:
    """The RTSP server's CPU seconds so far: it shares the cores with the job."""
    return harness.cpu_s(pid) or 0.0


def live(config: Any, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """N live streams through the daemon and the work alone on the same stream, alternating."""
    from bench.latency import clip_facts

    clip = clip_facts(args.clip)
    cores = limit.usable_cores()
    port = harness.free_port()
    uri = f"rtsp://127.0.0.1:{port}/live"
    server = harness.rtsp_server(port, args.clip)
    exclude = frozenset({server.pid})
    work_job = live_job(config, uri, 1, args.staleness_ms, folder / "work")
    runs: list[dict[str, Any]] = []
    result: dict[str, Any] = {
        "benchmark": "budget",
        "mode": "live",
        "machine": harness.machine(),
        "clip": {"path": args.clip, **clip},
        "uri": uri,
        "cores": cores,
        "streams": args.streams,
        "seconds": args.seconds,
        "runs": runs,
    }
    try:
        for index in range(max(1, args.repeat)):
            one: dict[str, Any] = {}
            sides = ("framewire", "work", "peer") if args.peer else ("framewire", "work")
            for side in sides if index % 2 == 0 else sides[::-1]:
                load = harness.quiet_load(args.max_load)
                served = _server_cpu(server.pid), time.time()
                if side == "peer":
                    one["peer"] = live_peer.run_peer(
                        work_job,
                        uri,
                        args.streams,
                        args.seconds,
                        args.staleness_ms,
                        folder / f"peer-{index}",
                        clip["fps"],
                        args.peer,
                        cores,
                    )
                elif side == "framewire":
                    job = live_job(config, uri, args.streams, args.staleness_ms, folder / f"fw-{index}")
                    one["framewire"] = live_stats(job, run_live(job, args.seconds, exclude), clip["fps"])
                else:
                    one["work"] = limit.work_alone(
                        work_job, uri, frames=args.work_frames, options={"rtsp_transport": "tcp"}, live=True
                    )
                one[side]["load_before"] = load
                one[side]["server_cores"] = (_server_cpu(server.pid) - served[0]) / (time.time() - served[1])
                harness.stderr(f"bench budget: run {index + 1} {side} done, load {load[0]:.2f}")
            fw = one["framewire"]
            one["share"] = limit.live_share(
                streams=args.streams,
                cpu_s=fw["cpu_s"],
                wall_s=fw["window_s"],
                work_ms_per_frame=one["work"]["work_ms_per_frame"],
                fps=clip["fps"],
                cores=cores,
                frames_out=fw["frames_in_window"],
            )
            one["share"]["framewire_vs_loop"] = limit.versus_loop(
                one["share"]["framewire_ms_per_frame_out"], one["work"]
            )
            if "peer" in one:
                one["share"].update(peer_share(one["share"], one["peer"]))
            one["exit_code"] = fw["exit_code"]
            runs.append(one)
        if args.profile:
            result["profile"] = live_profile(config, uri, args, folder, exclude)
        if args.perf:
            result["perf"] = live_oncpu(config, uri, args, folder, exclude)
    finally:
        server.kill()
        server.wait()
    result["share"] = harness.median_of([r["share"] for r in runs])
    result["work"] = harness.median_of([r["work"] for r in runs])
    result["job"] = _describe(work_job)
    return result


def peer_share(share: Mapping[str, Any], peer: Mapping[str, Any]) -> dict[str, float | None]:
    """The live plain program (`live_peer`, any layout) against the work and framewire: CPU a frame out."""
    peer_ms, work_ms = peer.get("ms_per_frame_out"), share.get("work_ms_per_frame")
    framewire_ms = share.get("framewire_ms_per_frame_out")
    return {
        "peer_ms_per_frame_out": peer_ms,
        "peer_frame_ratio": peer_ms / work_ms if peer_ms and work_ms else None,
        "framewire_vs_peer": framewire_ms / peer_ms if framewire_ms and peer_ms else None,
    }


def _describe(job: Any) -> dict[str, Any]:
    from bench.jobs import describe_job

    return describe_job(job)


def live_stats(job: Any, ran: Mapping[str, Any], rate: float | None = None) -> dict[str, Any]:
    """Per stream (fps kept, latency, frames the hub dropped) and in all (frames, drops, CPU in the
    window) of a live run; `kept`: the share of the streams' frames (`rate` fps each) put out."""
    report = ran["report"]
    per = {
        s.id: harness.stream_stats(
            harness.read_jsonl(Path(str(job.outputs[0].path).replace("{source_id}", s.id)))
        )
        for s in job.sources
    }
    fps = [p["fps"] for p in per.values() if p["fps"] is not None]
    p99 = [p["latency_p99_ms"] for p in per.values() if p["latency_p99_ms"] is not None]
    return {
        "streams": len(job.sources),
        "fps_min": min(fps) if len(fps) == len(per) else 0.0,
        "fps_median": harness.median(fps),
        "fps_max": max(fps) if fps else 0.0,
        "kept": sum(fps) / (len(per) * rate) if rate and len(fps) == len(per) else None,
        "latency_p99_ms_max": max(p99) if p99 else None,
        "frames_output": sum(report.frames.values()),
        "dropped_policy": sum(report.dropped.values())
        - sum(report.stale.values())
        - sum(report.overflow.values()),
        "dropped_stale": sum(report.stale.values()),
        "dropped_overflow": sum(report.overflow.values()),
        "overflow_per_stream": {source: int(count) for source, count in report.overflow.items()},
        "frames_in_window": round(sum(fps) * ran["window_s"]),  # from each stream's kept rate
        "cpu_s": ran["cpu_s"],
        "window_s": ran["window_s"],
        "cores_used": ran["cpu_s"] / ran["window_s"] if ran["window_s"] else None,
        "startup_s": ran["startup_s"],
        "cpu_s_by_process": ran["cpu_s_by_process"],
        "window_cpu_s_by_process": _by_name(ran.get("window_by_pid") or {}),
        "per_stream": per,
        "exit_code": report.exit_code,
        "error": report.error,
    }


def _by_name(window: Mapping[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds in the measured window per process name (workers of one stage apart)."""
    out: dict[str, float] = {}
    for name, cpu in window.values():
        out[name] = round(out.get(name, 0.0) + cpu, 3)
    return out


def live_profile(
    config: Any, uri: str, args: argparse.Namespace, folder: Path, exclude: frozenset[int]
) -> dict[str, Any]:
    """One more live run, its measured window sampled by py-spy: the budget of a frame per process."""
    job = live_job(config, uri, args.streams, args.staleness_ms, folder / "profiled")
    raw_path = folder / "profile.raw"

    def record() -> pyspy.Recorder:
        return pyspy.Recorder(os.getpid(), raw_path, seconds=args.seconds + 60, rate=args.profile_rate)

    harness.quiet_load(args.max_load)
    ran = run_live(job, args.seconds, exclude, record=record)
    stats = live_stats(job, ran)
    window = ran.get("window_by_pid") or {}
    frames = stats["frames_in_window"]
    where: Counter[tuple[str, str]] = Counter()
    samples = pyspy.parse_raw(ran.get("raw_profile") or "", where)
    summary = pyspy.summarise(samples, window, frames=frames, wall_s=ran["window_s"])
    return {
        "run": {k: v for k, v in stats.items() if k != "per_stream"},
        "frames_in_window": frames,
        "rate_hz": args.profile_rate,
        "native": True,
        **summary,
        "where": pyspy.where_summary(where),
    }


def live_oncpu(
    config: Any, uri: str, args: argparse.Namespace, folder: Path, exclude: frozenset[int]
) -> dict[str, Any]:
    """One more live run, its measured window sampled on-CPU by perf: each stage's time by library."""
    job = live_job(config, uri, args.streams, args.staleness_ms, folder / "perf")

    def record() -> oncpu.Recorder:
        return oncpu.Recorder(folder / "perf.data", rate=args.perf_rate)

    harness.quiet_load(args.max_load)
    ran = run_live(job, args.seconds, exclude, record=record)
    stats = live_stats(job, ran)
    names = {pid: name for pid, (name, _) in (ran.get("window_by_pid") or {}).items()}
    counts = oncpu.count(ran.get("raw_profile") or "", names)
    summary = oncpu.summarise(counts, rate=args.perf_rate, frames=stats["frames_in_window"])
    return {"run": {k: v for k, v in stats.items() if k != "per_stream"}, **summary}
