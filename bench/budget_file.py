"""`bench budget`'s file job (the default): the config's first source looped into a clip, run through
the daemon, the work alone (bench/limit.py) and, with `--peer`, the plain threaded program
(bench/file_peer.py), alternating; with `--profile`, one more daemon run sampled by py-spy."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import file_peer, harness, limit, pyspy
from bench.budget_sampling import DaemonSampler, cpu_by_pid

FILE_KEYS = (
    "frames",
    "wall_s",
    "fps",
    "steady_fps",
    "startup_s",
    "cpu_s",
    "cpu_s_by_process",
    "exit_code",
    "error",
)


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

    from bench.jobs import jsonl_paths, redirect_outputs

    redirected = redirect_outputs(job, folder)
    (records,) = jsonl_paths(redirected).values()
    raw = redirected.model_dump(mode="json", exclude_none=True)
    source = raw["sources"][0]
    raw["sources"] = [{**source, "max_frames": min(CLI_FRAMES, source.get("max_frames") or CLI_FRAMES)}]
    config = folder / "cli.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    records.unlink(missing_ok=True)
    started = time.monotonic()
    command = [
        sys.executable,
        str(harness.ROOT / "run_pipeline.py"),
        "run",
        "-c",
        str(config),
        "--no-progress",
    ]
    process = subprocess.Popen(
        command, cwd=harness.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
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
        raise RuntimeError(
            f"bench budget: `run` of {config} put out no record (exit {process.returncode}: {tail})"
        )
    return first


def file_job(config: Any, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """The daemon and the work alone on the same clip, `--repeat` times each, alternating."""
    from bench.jobs import describe_job, redirect_outputs
    from bench.runs import run_daemon
    from framewire import validate_config

    raw = config.model_dump(mode="json", exclude_none=True)
    uri, frames = looped_clip(raw["sources"][0]["uri"], args.min_frames, folder)
    source = {**raw["sources"][0], "uri": uri, "realtime": False, "policy": "block"}
    if args.frames:
        source["max_frames"] = args.frames
    raw["sources"] = [source]
    job = validate_config(raw, "bench budget")
    cores = limit.usable_cores()
    runs: list[dict[str, Any]] = []
    for index in range(max(1, args.repeat)):
        one: dict[str, Any] = {}
        sides = ("framewire", "work", "peer") if args.peer else ("framewire", "work")
        for side in sides if index % 2 == 0 else sides[::-1]:
            load = harness.quiet_load(args.max_load)
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
            frames=fw["frames"],
            cpu_s=fw["cpu_s"],
            wall_s=fw["wall_s"],
            work_ms_per_frame=one["work"]["work_ms_per_frame"],
            cores=cores,
            startup_s=fw["startup_s"],
        )
        one["share"]["framewire_vs_loop"] = limit.versus_loop(
            one["share"]["framewire_ms_per_frame"], one["work"]
        )
        if "peer" in one:
            one["share"].update(file_peer_share(one["share"], one["peer"]))
        harness.quiet_load(args.max_load)
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
        "peer_after_startup_ratio": (peer_wall - startup) / limit_s
        if peer_wall and limit_s and startup is not None
        else None,
        "framewire_vs_peer_cpu": fw_ms / peer_ms if fw_ms and peer_ms else None,
        "framewire_vs_peer_wall": fw_wall / peer_wall if fw_wall and peer_wall else None,
    }


def file_profile(job: Any, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """One more daemon run of the file job, sampled by py-spy from start to end (start-up included)."""
    from bench.jobs import redirect_outputs
    from bench.runs import run_daemon

    harness.quiet_load(args.max_load)
    recorder = pyspy.Recorder(os.getpid(), folder / "profile.raw", seconds=3600, rate=args.profile_rate)
    # Names and totals only, so once a second: a sampler walks /proc, which costs on a busy machine.
    sampler = DaemonSampler(exclude=frozenset({recorder.process.pid}), interval_s=1.0)
    before = cpu_by_pid(sampler)  # this process's CPU so far (earlier runs) is not this run's
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
    return {
        "run": run,
        "rate_hz": args.profile_rate,
        "native": True,
        **summary,
        "where": pyspy.where_summary(where),
    }
