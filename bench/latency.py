"""`bench latency -c FILE`: a live source faster than the model, for `--seconds`, once per policy.

The source is real: the project's loopback RTSP server (`tests/support/rtsp_server.py`) serves a shipped
clip (`--clip`, bikes.mp4 by default), re-encoded as a camera would send it (H.264, no B-frames, one
key frame a second), looped and paced at the clip's frame rate; the daemon reads it over RTSP/TCP
with FFmpeg, as it reads a camera. The job is the config's first source with its URI replaced by
the server's and its policy by each `--policy` in turn (files keys such as `realtime` and
`max_frames` are dropped; `max_staleness_ms` too under `block`, which refuses it), through
`framewire.start(job)` with this process as the hub, as `bench pipeline` runs it. Outputs go
to a temporary folder; a JSONL output is added when the config has none.

The bound is the source's `latency_budget_ms`, which the daemon itself checks on every frame
(`framewire_latency_over_budget_total`). Measured per policy, from the first frame out to the stop:
frames read, output and dropped by reason (policy, stale); end-to-end latency p50/p90/p99/max (the
JSONL records' `latency_ms.total`: from the end of decode to the record); the lag behind the live
stream (when a frame came out against when the server sent it, from its pts: under `block` the
frames wait in the socket before decode, where `latency_ms.total` cannot see them); reconnects; the
CPU and peak RSS of the daemon's processes (the RTSP server is not counted). A drop policy holds when
p99 <= the budget and every frame read is output or counted as dropped; `block` holds when nothing
is dropped, and its lag is expected to grow: a live source read more slowly than it sends falls
behind. JSON plus a table.

Here: the command, one run a policy and the table; the run's figures and verdict in
bench/latency_stats.py.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import harness
from bench.latency_stats import run_stats, verdict

POLICIES = ("drop_oldest", "drop_newest", "block")
DEFAULT_CLIP = harness.ROOT / "assets" / "videos" / "bikes.mp4"
FIRST_FRAME_TIMEOUT_S = 180.0
"""How long a run may take to put out its first frame (model load, connection) before it is stopped."""


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    add_config_args(parser)
    parser.add_argument(
        "--seconds",
        type=float,
        default=120.0,
        help="each run, from its first frame out (default: %(default)s)",
    )
    parser.add_argument(
        "--policy",
        nargs="+",
        choices=POLICIES,
        default=list(POLICIES),
        help="the policies to run, in this order (default: all three)",
    )
    parser.add_argument("--clip", default=str(DEFAULT_CLIP), help="the video the RTSP server loops")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    parser.add_argument("--keep", metavar="DIR", help="keep the output files in DIR (else a temp folder)")


def run(args: argparse.Namespace) -> int:
    from framewire import load_config
    from framewire.components import resolve_inputs
    from framewire import ConfigError

    config = resolve_inputs(load_config(args.config, args.overrides), [harness.ROOT])
    budget = config.sources[0].latency_budget_ms
    if budget is None:
        raise ConfigError(
            f"{args.config}: sources.0.latency_budget_ms is not set: it is the bound bench latency checks"
        )
    clip = clip_facts(args.clip)
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fw-latency-"))
    port = harness.free_port()
    uri = f"rtsp://127.0.0.1:{port}/live"
    harness.stderr(f"bench latency: serving {args.clip} at {uri}")
    server = harness.rtsp_server(port, args.clip)
    runs: dict[str, dict[str, Any]] = {}
    try:
        for policy in args.policy:
            job = live_job(config, uri, policy, folder / policy)
            harness.stderr(f"bench latency: {policy} for {args.seconds:g} s")
            runs[policy] = run_policy(job, args.seconds, server_pid=server.pid, fps=clip["fps"], port=port)
            harness.stderr(f"bench latency: {policy}: {one_line(runs[policy])}")
    finally:
        server.kill()
        server.wait()
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    result = {
        "benchmark": "latency",
        "machine": harness.machine(),
        "config": str(args.config),
        "overrides": list(args.overrides),
        "seconds": args.seconds,
        "source": {
            "server": "tests/support/rtsp_server.py (H.264 over RTP, interleaved in the RTSP TCP connection)",
            "uri": uri,
            "clip": str(Path(args.clip).resolve().relative_to(harness.ROOT))
            if Path(args.clip).resolve().is_relative_to(harness.ROOT)
            else str(args.clip),
            **clip,
            "looped": True,
        },
        "latency_budget_ms": budget,
        "runs": runs,
    }
    harness.write_json(args.json, result)
    harness.say(format_table(result))
    return 1 if any(r.get("exit_code") for r in runs.values()) else 0


def clip_facts(path: str) -> dict[str, Any]:
    """Size, frame rate and frame count of the clip the server loops."""
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.guessed_rate or 25
        return {
            "width": stream.width,
            "height": stream.height,
            "fps": round(float(rate)),
            "frames": stream.frames or None,
        }


def live_job(config: Any, uri: str, policy: str, folder: Path) -> Any:
    """The config's first source read from `uri` under `policy`, outputs redirected to `folder`."""
    from bench.jobs import redirect_outputs
    from framewire import validate_config

    raw = config.model_dump(mode="json", exclude_none=True)
    source = dict(raw["sources"][0])
    for key in ("realtime", "max_frames", "live"):
        source.pop(key, None)  # a file's keys: the source is now a stream
    source.update(uri=uri, policy=policy)
    if policy == "block":
        source.pop("max_staleness_ms", None)  # refused with block: it drops nothing
    raw["sources"] = [source]
    return redirect_outputs(validate_config(raw, "bench latency"), folder)


# --- one run -------------------------------------------------------------------------------------


@dataclass
class _DaemonSampler(harness.ProcessSampler):
    """The sampler, leaving out processes that are not the daemon's (the RTSP server)."""

    exclude: frozenset[int] = field(default_factory=frozenset)

    def _procs(self) -> list[Any]:
        return [p for p in super()._procs() if p.pid not in self.exclude]


def run_policy(
    job: Any, seconds: float, *, server_pid: int | None, fps: float, port: int | None = None
) -> dict[str, Any]:
    """Run the job until `seconds` after its first frame out, then stop it as SIGTERM would.

    With `port` (the RTSP server's), the bytes queued on the connection are sampled every second:
    what the server has sent and the daemon not yet read backs up there when decode is held up."""
    import framewire
    from bench.jobs import jsonl_paths
    from bench.runs import stop_fork_server

    stop_fork_server()  # each run starts its own, as `run_pipeline.py run` does
    done_times: list[float] = []
    first = threading.Event()
    ended = threading.Event()
    marks: dict[str, float] = {}
    backlog: list[tuple[float, int, int]] = []

    def progress(done: int, total: int | None) -> None:
        done_times.append(time.time())
        first.set()

    sampler = _DaemonSampler(exclude=frozenset({server_pid} if server_pid else ()))
    server_cpu0 = harness.cpu_s(server_pid)
    load_before = harness.load_average()
    sampler.start()
    started = time.time()
    running = framewire.start(job, progress=progress)

    def clock() -> None:
        if not first.wait(FIRST_FRAME_TIMEOUT_S) or ended.is_set():
            running.stop()
            return
        marks["first_out"] = time.time()
        until = marks["first_out"] + seconds
        halfway: float | None = marks["first_out"] + seconds / 2
        while not ended.wait(max(0.0, min(1.0, until - time.time()))):
            now = time.time()
            if port is not None:
                backlog.append((now - marks["first_out"], *socket_queues(port)))
            if halfway is not None and now >= halfway:
                sampler.snapshot()  # PSS and USS half-way
                halfway = None
            if now >= until:
                marks["stop"] = now
                running.stop()
                return

    timer = threading.Thread(target=clock, name="bench-latency-clock", daemon=True)
    timer.start()
    try:
        report = running.wait()
    finally:
        ended.set()
        timer.join(5)
        sampler.stop()
    finished = time.time()
    sid = job.sources[0].id
    path = jsonl_paths(job)[sid]
    records = harness.read_jsonl(path)
    cpu_by = sampler.by_name()
    hub = next((k for k in cpu_by if k.startswith("hub")), None)
    if hub is not None:
        cpu_by[hub] = max(0.0, cpu_by[hub] - sampler.sampler_cpu_s)
    cpu_s = sum(cpu_by.values())
    server_cpu = harness.cpu_s(server_pid)
    source = job.sources[0]
    stats = run_stats(
        records,
        done_times,
        output=report.frames.get(sid, 0),
        dropped=report.dropped.get(sid, 0),
        stale=report.stale.get(sid, 0),
        overflow=report.overflow.get(sid, 0),
        failed=report.failed.get(sid, 0),
        first_out=marks.get("first_out"),
        stop=marks.get("stop", finished),
        fps=fps,
    )
    stats.update(
        policy=source.policy.value,
        max_staleness_ms=source.max_staleness_ms,
        latency_budget_ms=source.latency_budget_ms,
        over_budget=report.over_budget.get(sid),
        reconnects=report.reconnects.get(sid, 0),
        offline_s=report.offline_s.get(sid, 0.0),
        source_error=report.source_errors.get(sid),
        exit_code=report.exit_code,
        error=report.error,
        startup_s=(marks["first_out"] - started) if "first_out" in marks else None,
        wall_s=finished - started,
        cpu_s=cpu_s,
        cores_used=cpu_s / (finished - started) if finished > started else None,
        cpu_s_by_process=cpu_by,
        peak_rss_mib=sampler.peak_rss / harness.MIB,
        peak_rss_mib_by_process=_peak_rss_by_name(sampler),
        memory=sampler.snapshot_memory or {},
        server_cpu_s=None if server_cpu is None or server_cpu0 is None else server_cpu - server_cpu0,
        socket_backlog_kib=backlog_summary(backlog),
        load_before=load_before,
        load_after=harness.load_average(),
    )
    stats["verdict"] = verdict(stats)
    return stats


def socket_queues(port: int, table: str = "/proc/net/tcp") -> tuple[int, int]:
    """Bytes queued on the TCP connections of a local server on `port`: (sent by the server and
    not yet acknowledged, its Send-Q; received by the clients and not yet read, their Recv-Q)."""
    send_q = recv_q = 0
    try:
        lines = Path(table).read_text(encoding="ascii").splitlines()[1:]
    except OSError:
        return 0, 0
    for line in lines:
        parts = line.split()
        if len(parts) < 5 or parts[3] != "01":  # ESTABLISHED only
            continue
        local, remote = int(parts[1].split(":")[1], 16), int(parts[2].split(":")[1], 16)
        tx, rx = (int(v, 16) for v in parts[4].split(":"))
        if local == port:
            send_q += tx
        elif remote == port:
            recv_q += rx
    return send_q, recv_q


def backlog_summary(samples: Sequence[tuple[float, int, int]]) -> dict[str, Any]:
    """Largest and last server Send-Q and client Recv-Q (KiB), and the series every ~10 s."""
    if not samples:
        return {}
    kib = [(t, s / 1024.0, r / 1024.0) for t, s, r in samples]
    return {
        "server_send_q_max": max(s for _, s, _ in kib),
        "client_recv_q_max": max(r for _, _, r in kib),
        "queued_at_end": kib[-1][1] + kib[-1][2],
        "series": [[round(t), round(s + r, 1)] for t, s, r in kib[:: max(1, len(kib) // 12)]],
    }


def _peak_rss_by_name(sampler: harness.ProcessSampler) -> dict[str, float]:
    out: dict[str, float] = {}
    for sample in sampler.processes.values():
        out[sample.name] = max(out.get(sample.name, 0.0), sample.rss / harness.MIB)
    return out

# --- output --------------------------------------------------------------------------------------


def one_line(stats: Mapping[str, Any]) -> str:
    f = stats["frames"]
    lat = stats["latency_ms"]
    p99 = f"{lat['p99']:.0f}" if lat["p99"] is not None else "-"
    return (
        f"{f['read']} read, {f['output']} out, {f['dropped_policy']} dropped (policy), "
        f"{f['dropped_stale']} stale; p99 {p99} ms; {stats['verdict']['text']}"
    )


def format_table(result: Mapping[str, Any]) -> str:
    runs: Mapping[str, Mapping[str, Any]] = result["runs"]
    names = list(runs)
    rows: list[list[Any]] = []

    def row(label: str, get: Callable[[Mapping[str, Any]], Any]) -> None:
        values = []
        for name in names:
            try:
                values.append(get(runs[name]))
            except (KeyError, TypeError):
                values.append(None)
        rows.append([label, *values])

    row("frames read", lambda r: r["frames"]["read"])
    row("frames output", lambda r: r["frames"]["output"])
    row("dropped: policy", lambda r: r["frames"]["dropped_policy"])
    row("dropped: stale", lambda r: r["frames"]["dropped_stale"])
    row("read fps", lambda r: r["read_fps"])
    row("output fps", lambda r: r["output_fps"])
    row("max_staleness_ms", lambda r: r["max_staleness_ms"])
    for q in ("p50", "p90", "p99", "max"):
        row(f"latency {q} ms", lambda r, q=q: r["latency_ms"][q])
    row("latency budget ms", lambda r: r["latency_budget_ms"])
    row("frames over budget", lambda r: r["over_budget"])
    row("lag behind live p99 ms", lambda r: r["lag_ms"]["p99"])
    row("lag at the end ms", lambda r: r["lag_ms"]["at_end"])
    row("lag growth s/s", lambda r: r["lag_ms"]["growth_s_per_s"])
    row("RTSP bytes queued, max KiB", lambda r: r["socket_backlog_kib"]["server_send_q_max"]
        + r["socket_backlog_kib"]["client_recv_q_max"])
    row("reconnects", lambda r: r["reconnects"])
    row("CPU cores used", lambda r: r["cores_used"])
    row("peak RSS MiB (sum)", lambda r: r["peak_rss_mib"])
    row("PSS MiB (half-way)", lambda r: r["memory"].get("pss_mib"))
    row("holds", lambda r: "yes" if r["verdict"]["holds"] else "NO")
    source = result.get("source", {})
    head = (
        f"bench latency: {result.get('config')}; {source.get('clip')} {source.get('width')}x"
        f"{source.get('height')} at {source.get('fps')} fps over RTSP/TCP, looped; "
        f"{result.get('seconds'):g} s per policy; budget {result.get('latency_budget_ms'):g} ms"
    )
    lines = [head, harness.table(["", *names], rows)]
    lines += [f"{name}: {runs[name]['verdict']['text']}" for name in names]
    return "\n".join(lines)
