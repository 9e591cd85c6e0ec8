"""`bench budget -c FILE`: framewire's own cost against the limit of the work alone (issue 20), and,
with `--profile`, the budget of a frame per process.

File job (the default): the config's first source, looped into a clip of at least `--min-frames`
frames when it is shorter (video packets copied, not re-encoded), run through the daemon as
`bench pipeline` runs it; in the same run, alternating with it, the work alone on the same clip
(bench/limit.py: PyAV decode, the model through ONNX Runtime on one thread, x264 with the job's
settings, each on one thread). Printed: framewire's core-seconds a frame against the work's, and its
wall time against the limit (the work's core-seconds over the cores).

Live job (`--streams N`): N sources reading one loopback RTSP server (tests/support/rtsp_server.py,
the clip looped at its own rate), `drop_oldest`, `--staleness-ms` (500), one JSONL per source and no
other output (composites dropped: nothing shows the pixels), for `--seconds` after the first frame.
Per stream: frames a second kept (from the records' stream times), p99 latency; in all: cores a
stream against the work alone's (decode + model of the same stream, measured from the same server),
and the streams the cores could carry, with nothing but the work and with framewire's cost.

`--profile`: one more run of the same job, sampled by py-spy (bench/pyspy.py); its busy samples,
per process, split that process's CPU seconds into buckets: the work and framewire's own parts.
The figures of the unprofiled runs are the ones to quote; the profiled run is slower.

`--peer [stream|core|pool]` (live): the plainest program a user would write for the job, with its
own model in each process, a process a stream (one script a camera, the default), a process a core,
or one process with a model thread a core (bench/live_peer.py), run on the same streams in the same
runs, alternating with framewire: its frames kept, latency and CPU a frame out beside framewire's.

`--peer` (file; the layout `threads`): the plainest careful program for the file job, one process
with a thread to decode, a thread a core to run the model and blur, one to encode
(bench/file_peer.py), on the same clip in the same runs, alternating with framewire and the work
alone: its wall time against the limit, from its start and from its first frame out, and its CPU a
frame beside framewire's.

`--perf` (live): one more run whose measured window Linux perf samples on every CPU (bench/oncpu.py):
each stage's CPU a frame by the library it ran in. Unlike py-spy it counts only time on a CPU; it
cannot name Python functions, only the interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from bench import file_peer, harness, limit, live_peer, oncpu, pyspy
from framewire import UsageError

DEFAULT_CLIP = harness.ROOT / "assets" / "videos" / "bikes.mp4"
FIRST_FRAME_TIMEOUT_S = 180.0
PEER_DEFAULT = "default"
"""`--peer` alone: the live layout `stream`, or the file job's `threads`."""
FILE_PEER = "threads"
PEER_NAMES = {
    "stream": "plain loop, a process a stream",
    "core": "plain loop, a process a core",
    "pool": "plain loop, a model thread a core",
}
"""The live peer's rows in the table, by layout."""
FILE_KEYS = (
    "frames", "wall_s", "fps", "steady_fps", "startup_s", "cpu_s", "cpu_s_by_process", "exit_code", "error",
)  # fmt: skip


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    add_config_args(parser)
    arg = parser.add_argument
    arg("--streams", type=int, default=0, help="live: this many RTSP sources (0: the file job)")
    arg("--seconds", type=float, default=30.0, help="live: each run, from its first frame out")
    arg("--clip", default=str(DEFAULT_CLIP), help="live: the video the RTSP server loops")
    arg("--staleness-ms", type=float, default=500.0, help="live: each source's max_staleness_ms")
    arg("--min-frames", type=int, default=700, help="file: loop the clip to at least this many")
    arg("--frames", type=int, default=None, help="file: stop after this many frames (a smoke run)")
    arg("--work-frames", type=int, default=125, help="live: frames the work alone is timed on")
    arg("--repeat", type=int, default=1, help="runs of each side, alternating (default: 1)")
    arg("--peer", nargs="?", const=PEER_DEFAULT, choices=(PEER_DEFAULT, *live_peer.LAYOUTS, FILE_PEER),
        help="the plain program in each run too; live: a process a stream (the default), a process a "
             "core, or one process with a model thread a core (pool) (bench/live_peer.py); file: "
             "`threads` (bench/file_peer.py)")
    arg("--profile", action="store_true", help="one more run, profiled by py-spy, per process")
    arg("--profile-rate", type=int, default=25, help="py-spy samples a second (default: 25)")
    arg("--perf", action="store_true", help="live: one more run, sampled on-CPU by Linux perf, by library")
    arg("--perf-rate", type=int, default=999, help="perf samples a second a CPU (default: 999)")
    arg("--max-load", type=float, default=None, help="wait (45 s at most) for a load below this")
    arg("--json", metavar="PATH", help="write the results as JSON here")
    arg("--keep", metavar="DIR", help="keep the output files in DIR (else a temp folder)")


def run(args: argparse.Namespace) -> int:
    from framewire import load_config
    from framewire.components import resolve_inputs

    config = resolve_inputs(load_config(args.config, args.overrides), [harness.ROOT])
    args.peer = peer_layout(args.peer, args.streams > 0)
    if args.perf:  # before any run: a missing perf must not cost the runs before the perf one
        if args.streams <= 0:
            raise UsageError("bench budget --perf: it samples the live job (--streams N)")
        oncpu.check()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fw-budget-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        if args.streams > 0:
            result = live(config, args, folder)
        else:
            result = file_job(config, args, folder)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    result.update(config=str(args.config), overrides=list(args.overrides))
    harness.write_json(args.json, result)
    harness.say(format_table(result))
    return 1 if any(r.get("exit_code") for r in result["runs"]) else 0


def peer_layout(peer: str | None, live: bool) -> str | None:
    """The plain program `--peer` asks for in this mode (None: none); a layout of the other mode is
    refused in one line."""
    if peer is None:
        return None
    if peer == PEER_DEFAULT:
        return live_peer.LAYOUTS[0] if live else FILE_PEER
    if live and peer == FILE_PEER:
        raise UsageError(f"bench budget --peer {peer}: the file job's plain program; live layouts: "
                         f"{', '.join(live_peer.LAYOUTS)}")  # fmt: skip
    if not live and peer != FILE_PEER:
        raise UsageError(f"bench budget --peer {peer}: a layout of the live job (--streams N); "
                         f"the file job's plain program is {FILE_PEER}")  # fmt: skip
    return peer


def usable_cores() -> int:
    """The cores this process may run on (`taskset` narrows them), which the limit spreads the work over."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _wait(args: argparse.Namespace) -> list[float]:
    if args.max_load is not None:
        harness.wait_for_quiet(args.max_load, harness.QUIET_WAIT_S, harness.stderr)
    return harness.load_average()


# --- the file job --------------------------------------------------------------------------------


def looped_clip(path: str, min_frames: int, folder: Path) -> tuple[str, int]:
    """`path` itself when it has `min_frames` frames, else its video packets repeated (no re-encode)
    into folder/looped.mp4 until it has; (the path, its frames)."""
    import av

    with av.open(path) as source:
        stream = source.streams.video[0]
        packets = [p for p in source.demux(stream) if p.size]
        n = len(packets)
        if n >= min_frames or n == 0:
            return path, n
        target = folder / f"looped-{Path(path).stem}.mp4"
        times = -(-min_frames // n)
        step = (packets[1].pts or 0) - (packets[0].pts or 0) if n > 1 else 1
        span = max(p.pts for p in packets if p.pts is not None) + step
        with av.open(str(target), "w") as out:
            video = out.add_stream_from_template(stream)
            for i in range(times):
                for packet in packets:
                    packet.stream = video
                    packet.pts = None if packet.pts is None else packet.pts + (span if i else 0)
                    packet.dts = None if packet.dts is None else packet.dts + (span if i else 0)
                    out.mux(packet)
    return str(target), n * times


CLI_FRAMES = 25
"""Frames of the clip the command line's start-up is timed on (`cli_startup`)."""
CLI_TIMEOUT_S = 120.0


def cli_startup(job: Any, folder: Path) -> float:
    """Seconds from starting `run_pipeline.py run` on the job's first CLI_FRAMES frames to its first
    record out: what a user of the command line waits. `framewire.start` in this process, which has
    imported everything already, leaves out the command's own imports and its config."""
    import yaml

    from bench.pipeline import jsonl_paths, redirect_outputs

    redirected = redirect_outputs(job, folder)
    (records,) = jsonl_paths(redirected).values()
    raw = redirected.model_dump(mode="json", exclude_none=True)
    source = raw["sources"][0]
    raw["sources"] = [{**source, "max_frames": min(CLI_FRAMES, source.get("max_frames") or CLI_FRAMES)}]
    config = folder / "cli.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    records.unlink(missing_ok=True)
    started = time.monotonic()
    command = [sys.executable, str(harness.ROOT / "run_pipeline.py"), "run", "-c", str(config), "--no-progress"]
    process = subprocess.Popen(command, cwd=harness.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first: float | None = None
    while first is None and time.monotonic() - started < CLI_TIMEOUT_S:
        if records.exists() and b"\n" in records.read_bytes()[:65536]:
            first = time.monotonic() - started
        elif process.poll() is not None:
            break
        else:
            time.sleep(0.002)
    try:
        _, err = process.communicate(timeout=CLI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
    if first is None or process.returncode != 0:
        tail = " ".join((err or "").strip().splitlines()[-1:]) or "no message"
        raise RuntimeError(f"bench budget: `run` of {config} put out no record (exit {process.returncode}: {tail})")
    return first


def file_job(config: Any, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """The daemon and the work alone on the same clip, `--repeat` times each, alternating."""
    from bench.pipeline import describe_job, redirect_outputs, run_daemon
    from framewire import validate_config

    raw = config.model_dump(mode="json", exclude_none=True)
    uri, frames = looped_clip(raw["sources"][0]["uri"], args.min_frames, folder)
    source = {**raw["sources"][0], "uri": uri, "realtime": False, "policy": "block"}
    if args.frames:
        source["max_frames"] = args.frames
    raw["sources"] = [source]
    job = validate_config(raw, "bench budget")
    cores = usable_cores()
    runs: list[dict[str, Any]] = []
    for index in range(max(1, args.repeat)):
        one: dict[str, Any] = {}
        sides = ("framewire", "work", "peer") if args.peer else ("framewire", "work")
        for side in sides if index % 2 == 0 else sides[::-1]:
            load = _wait(args)
            if side == "framewire":
                stats = run_daemon(redirect_outputs(job, folder / f"fw-{index}"))
                one["framewire"] = {k: stats[k] for k in FILE_KEYS}
            elif side == "peer":
                one["peer"] = file_peer.run_file_peer(job, uri, folder / f"peer-{index}", cores)
            else:
                one["work"] = limit.work_alone(job, uri, frames=args.frames)
            one[side]["load_before"] = load
            harness.stderr(f"bench budget: run {index + 1} {side} done, load {load[0]:.2f}")
        fw = one["framewire"]
        one["share"] = limit.file_share(
            frames=fw["frames"], cpu_s=fw["cpu_s"], wall_s=fw["wall_s"],
            work_ms_per_frame=one["work"]["work_ms_per_frame"], cores=cores, startup_s=fw["startup_s"],
        )  # fmt: skip
        one["share"]["framewire_vs_loop"] = limit.versus_loop(one["share"]["framewire_ms_per_frame"], one["work"])
        if "peer" in one:
            one["share"].update(file_peer_share(one["share"], one["peer"]))
        _wait(args)
        one["share"]["cli_startup_s"] = cli_startup(job, folder / f"cli-{index}")
        one["exit_code"] = fw["exit_code"]
        runs.append(one)
    result: dict[str, Any] = {
        "benchmark": "budget",
        "mode": "file",
        "machine": harness.machine(),
        "job": describe_job(job),
        "clip": {"uri": uri, "frames": frames},
        "cores": cores,
        "runs": runs,
        "share": harness.median_of([r["share"] for r in runs]),
        "work": harness.median_of([r["work"] for r in runs]),
    }
    if args.profile:
        result["profile"] = file_profile(job, args, folder)
    return result


def file_peer_share(share: Mapping[str, Any], peer: Mapping[str, Any]) -> dict[str, float | None]:
    """The file peer (bench/file_peer.py) against the limit and the work, and framewire against it."""
    limit_s, work_ms = share.get("limit_wall_s"), share.get("work_ms_per_frame")
    peer_ms, peer_wall, startup = peer.get("ms_per_frame"), peer.get("wall_s"), peer.get("startup_s")
    fw_ms, fw_wall = share.get("framewire_ms_per_frame"), share.get("wall_s")
    return {
        "peer_ms_per_frame": peer_ms,
        "peer_cpu_ratio": peer_ms / work_ms if peer_ms and work_ms else None,
        "peer_wall_s": peer_wall,
        "peer_wall_ratio": peer_wall / limit_s if peer_wall and limit_s else None,
        "peer_startup_s": startup,
        "peer_after_startup_ratio": (peer_wall - startup) / limit_s if peer_wall and limit_s and startup is not None else None,
        "framewire_vs_peer_cpu": fw_ms / peer_ms if fw_ms and peer_ms else None,
        "framewire_vs_peer_wall": fw_wall / peer_wall if fw_wall and peer_wall else None,
    }


# --- the live job --------------------------------------------------------------------------------


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


class Recorder(Protocol):
    """A sampler of the measured window (py-spy's or perf's): its process, and `stop()` for its text."""

    process: subprocess.Popen[Any]

    def stop(self) -> str: ...


def run_live(
    job: Any, seconds: float, exclude: frozenset[int], record: Callable[[], Recorder] | None = None
) -> dict[str, Any]:
    """Run the live job until `seconds` after its first frame out; the CPU seconds its processes
    spent in that window (the start-up and the drain left out), each one's, and its report. With
    `record`, a py-spy recorder it starts samples that window; its raw text comes back too."""
    import framewire
    from bench.pipeline import _stop_fork_server

    _stop_fork_server()  # each run starts its own fork server, as `run` does
    first = threading.Event()
    sampler = _Sampler(exclude=exclude, interval_s=1.0)  # names and totals; the window is read directly
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
            cpu0, t0 = _cpu_by_pid(sampler), time.time()
            time.sleep(seconds)  # the measured window: the job runs on its own meanwhile
            cpu1, t1 = _cpu_by_pid(sampler), time.time()
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


def _cpu_by_pid(sampler: harness.ProcessSampler) -> dict[int, float]:
    """CPU seconds of each of the sampler's processes, read now."""
    import psutil

    out = {}
    for proc in sampler._procs():
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        out[proc.pid] = times.user + times.system
    return out


class _Sampler(harness.ProcessSampler):
    """The sampler, leaving out processes that are not the daemon's (the RTSP server, py-spy)."""

    def __init__(self, exclude: frozenset[int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.exclude = set(exclude)

    def _procs(self) -> list[Any]:
        return [p for p in super()._procs() if p.pid not in self.exclude and "py-spy" not in _cmd(p)]


def _cmd(proc: Any) -> str:
    try:
        return " ".join(proc.cmdline()[:1])
    except Exception:  # noqa: BLE001 - gone
        return ""


def live(config: Any, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """N live streams through the daemon and the work alone on the same stream, alternating."""
    from bench.latency import clip_facts

    clip = clip_facts(args.clip)
    cores = usable_cores()
    port = harness.free_port()
    uri = f"rtsp://127.0.0.1:{port}/live"
    server = harness.rtsp_server(port, args.clip)
    exclude = frozenset({server.pid})
    work_job = live_job(config, uri, 1, args.staleness_ms, folder / "work")
    runs: list[dict[str, Any]] = []
    result: dict[str, Any] = {"benchmark": "budget", "mode": "live", "machine": harness.machine(),
                              "clip": {"path": args.clip, **clip}, "uri": uri, "cores": cores,
                              "streams": args.streams, "seconds": args.seconds, "runs": runs}  # fmt: skip
    try:
        for index in range(max(1, args.repeat)):
            one: dict[str, Any] = {}
            sides = ("framewire", "work", "peer") if args.peer else ("framewire", "work")
            for side in sides if index % 2 == 0 else sides[::-1]:
                load = _wait(args)
                served = _server_cpu(server.pid), time.time()
                if side == "peer":
                    one["peer"] = live_peer.run_peer(work_job, uri, args.streams, args.seconds, args.staleness_ms,
                                                     folder / f"peer-{index}", clip["fps"], args.peer, cores)  # fmt: skip
                elif side == "framewire":
                    job = live_job(config, uri, args.streams, args.staleness_ms, folder / f"fw-{index}")
                    one["framewire"] = live_stats(job, run_live(job, args.seconds, exclude), clip["fps"])
                else:
                    one["work"] = limit.work_alone(work_job, uri, frames=args.work_frames,
                                                   options={"rtsp_transport": "tcp"}, live=True)  # fmt: skip
                one[side]["load_before"] = load
                one[side]["server_cores"] = (_server_cpu(server.pid) - served[0]) / (time.time() - served[1])
                harness.stderr(f"bench budget: run {index + 1} {side} done, load {load[0]:.2f}")
            fw = one["framewire"]
            one["share"] = limit.live_share(
                streams=args.streams, cpu_s=fw["cpu_s"], wall_s=fw["window_s"],
                work_ms_per_frame=one["work"]["work_ms_per_frame"], fps=clip["fps"], cores=cores,
                frames_out=fw["frames_in_window"],
            )  # fmt: skip
            one["share"]["framewire_vs_loop"] = limit.versus_loop(one["share"]["framewire_ms_per_frame_out"], one["work"])
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
    """The live plain program (`live_peer`, any layout) against the work and framewire, CPU a frame put out."""
    peer_ms, work_ms = peer.get("ms_per_frame_out"), share.get("work_ms_per_frame")
    framewire_ms = share.get("framewire_ms_per_frame_out")
    return {
        "peer_ms_per_frame_out": peer_ms,
        "peer_frame_ratio": peer_ms / work_ms if peer_ms and work_ms else None,
        "framewire_vs_peer": framewire_ms / peer_ms if framewire_ms and peer_ms else None,
    }


def _describe(job: Any) -> dict[str, Any]:
    from bench.pipeline import describe_job

    return describe_job(job)


def live_stats(job: Any, ran: Mapping[str, Any], rate: float | None = None) -> dict[str, Any]:
    """Per stream (fps kept, latency, frames the hub dropped) and in all (frames, drops, CPU in the
    window) of a live run; `kept`: the share of the streams' frames (`rate` fps each) put out."""
    report = ran["report"]
    per = {s.id: harness.stream_stats(harness.read_jsonl(Path(str(job.outputs[0].path).replace("{source_id}", s.id))))
           for s in job.sources}  # fmt: skip
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
        "dropped_policy": sum(report.dropped.values()) - sum(report.stale.values()) - sum(report.overflow.values()),
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

    _wait(args)
    ran = run_live(job, args.seconds, exclude, record=record)
    stats = live_stats(job, ran)
    window = ran.get("window_by_pid") or {}
    frames = stats["frames_in_window"]
    where: Counter[tuple[str, str]] = Counter()
    samples = pyspy.parse_raw(ran.get("raw_profile") or "", where)
    summary = pyspy.summarise(samples, window, frames=frames, wall_s=ran["window_s"])
    return {"run": {k: v for k, v in stats.items() if k != "per_stream"}, "frames_in_window": frames,
            "rate_hz": args.profile_rate, "native": True, **summary,
            "where": pyspy.where_summary(where)}  # fmt: skip


def live_oncpu(
    config: Any, uri: str, args: argparse.Namespace, folder: Path, exclude: frozenset[int]
) -> dict[str, Any]:
    """One more live run, its measured window sampled on-CPU by perf: each stage's time by library."""
    job = live_job(config, uri, args.streams, args.staleness_ms, folder / "perf")

    def record() -> oncpu.Recorder:
        return oncpu.Recorder(folder / "perf.data", rate=args.perf_rate)

    _wait(args)
    ran = run_live(job, args.seconds, exclude, record=record)
    stats = live_stats(job, ran)
    names = {pid: name for pid, (name, _) in (ran.get("window_by_pid") or {}).items()}
    counts = oncpu.count(ran.get("raw_profile") or "", names)
    summary = oncpu.summarise(counts, rate=args.perf_rate, frames=stats["frames_in_window"])
    return {"run": {k: v for k, v in stats.items() if k != "per_stream"}, **summary}


def file_profile(job: Any, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """One more daemon run of the file job, sampled by py-spy from start to end (start-up included)."""
    from bench.pipeline import redirect_outputs, run_daemon

    _wait(args)
    recorder = pyspy.Recorder(os.getpid(), folder / "profile.raw", seconds=3600, rate=args.profile_rate)
    # Names and totals only, so once a second: a sampler walks /proc, which costs on a busy machine.
    sampler = _Sampler(exclude=frozenset({recorder.process.pid}), interval_s=1.0)
    before = _cpu_by_pid(sampler)  # this process's CPU so far (earlier runs) is not this run's
    sampler.start()
    try:
        stats = run_daemon(redirect_outputs(job, folder / "fw-profiled"))
    finally:
        raw = recorder.stop()
        sampler.stop()
    processes = {pid: (s.name, s.cpu_s - before.get(pid, 0.0)) for pid, s in sampler.processes.items()}
    where: Counter[tuple[str, str]] = Counter()
    samples = pyspy.parse_raw(raw, where)
    summary = pyspy.summarise(samples, processes, frames=stats["frames"], wall_s=stats["wall_s"])
    run = {k: stats[k] for k in ("frames", "wall_s", "fps", "cpu_s", "exit_code")}
    return {"run": run, "rate_hz": args.profile_rate, "native": True, **summary,
            "where": pyspy.where_summary(where)}  # fmt: skip


# --- the table -----------------------------------------------------------------------------------


def format_table(result: Mapping[str, Any]) -> str:
    """The ratios (medians of the runs), then the budget per process when profiled."""
    share, work = result["share"], result["work"]
    pieces = work.get("ms_per_frame", {})
    rows: list[list[Any]] = [[f"work: {k} ms / frame (one thread)", pieces.get(k)] for k in limit.WORK]
    rows.append(["work ms / frame", share.get("work_ms_per_frame")])
    if work.get("paced"):  # a live stream's work as each frame came, cold: not the limit (limit.work_alone)
        rows.append(["work ms / frame as each frame came (cold)", work["paced"].get("work_ms_per_frame")])
    loop = work.get("loop") or {}
    rows += [
        ["plain loop's own steps ms / frame (BGR, input, JSON)", loop.get("own_ms_per_frame")],
        ["plain loop / work (CPU a frame)", loop.get("ratio")],
        ["framewire / plain loop (CPU a frame)", share.get("framewire_vs_loop")],
    ]
    if result["mode"] == "file":
        rows += [
            ["framewire CPU ms / frame", share.get("framewire_ms_per_frame")],
            ["framewire / work (CPU a frame)", share.get("cpu_ratio")],
            [f"limit s (work core-s / {result['cores']} cores)", share.get("limit_wall_s")],
            ["framewire wall s", share.get("wall_s")],
            ["framewire wall / limit", share.get("wall_ratio")],
            ["framewire start-up s (to its first frame)", share.get("startup_s")],
            ["`run` start-up s (the command to its first frame)", share.get("cli_startup_s")],
            ["framewire wall after start-up / limit", share.get("after_startup_ratio")],
        ]
        if "peer_wall_s" in share:
            name = "plain program, threads"
            rows += [
                [f"{name}: CPU ms / frame", share.get("peer_ms_per_frame")],
                [f"{name} / work (CPU a frame)", share.get("peer_cpu_ratio")],
                [f"{name}: wall s", share.get("peer_wall_s")],
                [f"{name}: wall / limit", share.get("peer_wall_ratio")],
                [f"{name}: start-up s (to its first frame)", share.get("peer_startup_s")],
                [f"{name}: wall after start-up / limit", share.get("peer_after_startup_ratio")],
                [f"framewire / {name} (CPU a frame)", share.get("framewire_vs_peer_cpu")],
                [f"framewire / {name} (wall)", share.get("framewire_vs_peer_wall")],
            ]
        head = f"bench budget (file): {result['clip']['uri']}, {result['clip']['frames']} frames"
    else:
        fw = harness.median_of([r["framewire"] for r in result["runs"]])
        rows += [
            ["fps kept, slowest stream", fw.get("fps_min")],
            ["fps kept, fastest stream", fw.get("fps_max")],
            ["frames kept, all streams", fw.get("kept")],
            ["latency p99 ms, worst stream", fw.get("latency_p99_ms_max")],
            ["the RTSP server's cores meanwhile (same machine)", fw.get("server_cores")],
            ["work cores / stream", share.get("work_cores_per_stream")],
            ["framewire cores / stream", share.get("framewire_cores_per_stream")],
            ["framewire / work (cores a stream)", share.get("cpu_ratio")],
            [f"stream limit (work alone, {result['cores']} cores)", share.get("stream_limit")],
            ["stream limit at framewire's cost", share.get("framewire_stream_limit")],
            ["framewire CPU ms / frame out", share.get("framewire_ms_per_frame_out")],
            ["framewire / work (CPU a frame)", share.get("frame_ratio")],
            ["stream limit at framewire's cost a frame", share.get("framewire_stream_limit_per_frame")],
        ]
        if any("peer" in r for r in result["runs"]):
            peer = harness.median_of([r["peer"] for r in result["runs"] if "peer" in r])
            name = PEER_NAMES.get(peer.get("layout", "stream"), "plain loop")
            rows += [
                [f"{name}: fps kept, slowest stream", peer.get("fps_min")],
                [f"{name}: frames kept, all streams", peer.get("kept")],
                [f"{name}: latency p99 ms, worst stream", peer.get("latency_p99_ms_max")],
                [f"{name}: the RTSP server's cores meanwhile", peer.get("server_cores")],
                [f"{name}: CPU ms / frame out", share.get("peer_ms_per_frame_out")],
                [f"{name} / work (CPU a frame)", share.get("peer_frame_ratio")],
                [f"framewire / {name} (CPU a frame out)", share.get("framewire_vs_peer")],
            ]
        head = f"bench budget (live): {result['streams']} stream(s) of {Path(result['clip']['path']).name}"
    text = f"{head}, {len(result['runs'])} run(s), medians\n" + harness.table(["", "value"], rows)
    if "profile" in result:
        header, *body = pyspy.table(result["profile"])
        text += "\n\nCPU ms a frame per process and bucket (profiled run, py-spy)\n"
        text += harness.table(header, body)
        text += "\nframewire's own, biggest first: " + ", ".join(result["profile"]["own_top"])
    if "perf" in result:
        header, *body = oncpu.table(result["perf"])
        text += "\n\nCPU ms a frame per process and library (on-CPU samples, perf)\n"
        text += harness.table(header, body)
        text += "\nframewire's own, biggest first: " + ", ".join(result["perf"]["own_top"])
    return text
