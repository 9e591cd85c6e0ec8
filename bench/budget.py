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

Here: the command, its options and its table; the file job in bench/budget_file.py, the live job in
bench/budget_live.py.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import budget_file, budget_live, harness, limit, live_peer, oncpu, pyspy
from framewire import UsageError

DEFAULT_CLIP = harness.ROOT / "assets" / "videos" / "bikes.mp4"
PEER_DEFAULT = "default"
"""`--peer` alone: the live layout `stream`, or the file job's `threads`."""
FILE_PEER = "threads"
PEER_NAMES = {
    "stream": "plain loop, a process a stream",
    "core": "plain loop, a process a core",
    "pool": "plain loop, a model thread a core",
}
"""The live peer's rows in the table, by layout."""


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
    arg(
        "--peer",
        nargs="?",
        const=PEER_DEFAULT,
        choices=(PEER_DEFAULT, *live_peer.LAYOUTS, FILE_PEER),
        help="the plain program in each run too; live: a process a stream (the default), a process a "
        "core, or one process with a model thread a core (pool) (bench/live_peer.py); file: "
        "`threads` (bench/file_peer.py)",
    )
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
            result = budget_live.live(config, args, folder)
        else:
            result = budget_file.file_job(config, args, folder)
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
        raise UsageError(
            f"bench budget --peer {peer}: the file job's plain program; live layouts: "
            f"{', '.join(live_peer.LAYOUTS)}"
        )
    if not live and peer != FILE_PEER:
        raise UsageError(
            f"bench budget --peer {peer}: a layout of the live job (--streams N); "
            f"the file job's plain program is {FILE_PEER}"
        )
    return peer


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
