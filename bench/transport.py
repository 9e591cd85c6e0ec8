"""`bench transport`: what one hop of a decoded frame costs, by the ways a frame can travel.

- `pool`: the frame is written into a shared-memory frame-pool slot (`framewire.pipeline.wire.framepool`) and the
  slot reference goes over a DEALER -> ROUTER ipc:// hop in the wire format (`framewire.pipeline.wire.messages`),
  as decode handed a frame to the hub before it converted straight into the slot; the receiver
  maps the slot (a numpy view, no copy).
- `zmq`: the whole frame goes over the same hop as an inline tensor, sent with `copy=False`; the
  receiver gets a numpy view on the received message.
- `copy`: a plain in-process numpy copy into a preallocated array, for scale.
- `gpu-pinned`, `gpu-staged`, `gpu-pageable` (asked for by name, not by default; they need a GPU and
  cuda-python): the next hop on a GPU host, from a frame-pool slot to GPU memory on the infer worker's
  stream, as the TensorRT backend makes it (`framewire.engines.cuda`). `pinned`: the pool registered
  as pinned memory and copied from directly (the backend's path for a pool's frames); `staged`: copied
  into the pinned staging buffer first (its path for a pool that could not be registered, and for
  stacked batches); `pageable`: copied straight from the unregistered pool, which the backend never
  does, for scale. Latency: from the start of the copy to the stream's synchronise.
- `hub`: the whole daemon with stages that do nothing: a source whose frames are already in their
  slots (as decode converts straight into them), four no-op middle stages (two "infer" workers) and
  three no-op outputs, as many processes as the default job, through the real supervisor. Its
  frames per second and CPU time per frame (all processes, measured between 20% and 90% of the
  frames, so start-up is left out) are the daemon's own cost per frame.

The two ends of `pool` and `zmq` are two processes. Frames go one at a time: the receiver answers
each one with a small message (the credit, as a worker's RESULT returns it), so the latency is the
one-way time of a hop, not of a queue. Latency: from the start of the send (for `pool`, the start of
the write into the slot) to the receiver holding the frame as an array, on CLOCK_MONOTONIC, which
both processes share. CPU time per frame: both processes, all their threads (ZeroMQ's I/O threads
included), the small answer included.

Here: the command, its runs and its table; the hops in bench/transport_hops.py, the hub in
bench/transport_hub.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench import harness, transport_hops, transport_hub
from framewire import UsageError

SIZES: dict[str, tuple[int, int]] = {"720p": (1280, 720), "1080p": (1920, 1080), "4k": (3840, 2160)}
GPU_MODES = ("gpu-pinned", "gpu-staged", "gpu-pageable")
MODES = ("pool", "pool-ref", "zmq", "copy", "hub")


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    parser.add_argument(
        "--sizes",
        nargs="+",
        default=list(SIZES),
        help="frame sizes: 720p, 1080p, 4k or WIDTHxHEIGHT (default: %(default)s)",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=MODES + GPU_MODES,
        default=list(MODES),
        help="what to measure (default: %(default)s; the gpu- modes need a GPU)",
    )
    parser.add_argument(
        "--spin-wait",
        action="store_true",
        help="gpu- modes: wait for each copy by spinning (cudaStreamSynchronize), as engine.spin_wait does, "
        "not on a blocking event (the backend's default)",
    )
    parser.add_argument(
        "--schedule-blocking",
        action="store_true",
        help="gpu- modes: set the GPU's scheduling flag first, as a GPU infer worker does (every wait of "
        "the process sleeps, a spinning one too)",
    )
    parser.add_argument("--frames", type=int, default=200, help="frames per measurement (%(default)s)")
    parser.add_argument("--warmup", type=int, default=10, help="frames sent first and not counted")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; medians reported")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    parser.add_argument(
        "--max-load",
        type=float,
        default=None,
        help="before each size and mode, wait (up to 45 s) for the 1-minute load average to drop below this",
    )


def run(args: argparse.Namespace) -> int:
    sizes = [parse_size(s) for s in args.sizes]
    result = measure(
        sizes,
        modes=args.modes,
        frames=args.frames,
        warmup=args.warmup,
        repeat=max(1, args.repeat),
        max_load=args.max_load,
        spin_wait=args.spin_wait,
        schedule_blocking=args.schedule_blocking,
        log=harness.stderr,
    )
    harness.write_json(args.json, result)
    harness.say(format_table(result))
    return 0


def parse_size(text: str) -> tuple[str, int, int]:
    key = text.lower()
    if key in SIZES:
        return (key, *SIZES[key])
    try:
        width, height = (int(v) for v in key.split("x"))
    except ValueError:
        raise UsageError(f"--sizes: {text!r} is not 720p, 1080p, 4k or WIDTHxHEIGHT") from None
    return (f"{width}x{height}", width, height)


def measure(
    sizes: Sequence[tuple[str, int, int]],
    *,
    modes: Sequence[str] = MODES,
    frames: int = 200,
    warmup: int = 10,
    repeat: int = 3,
    max_load: float | None = None,
    spin_wait: bool = False,
    schedule_blocking: bool = False,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    load_before = harness.load_average()
    if schedule_blocking:
        transport_hops.schedule_blocking()
    for name, width, height in sizes:
        for mode in modes:
            runs = []
            if max_load is not None:
                harness.wait_for_quiet(max_load, harness.QUIET_WAIT_S, log)
            for _ in range(repeat):
                load = harness.load_average()[0]
                one = _one(mode, width, height, frames, warmup, spin_wait)
                one["load_before"] = load
                runs.append(one)
            entry: dict[str, Any] = {
                "size": name,
                "width": width,
                "height": height,
                "mode": mode,
                "bytes": width * height * 3,
            }
            entry.update(harness.median_of(runs))
            entry["runs"] = runs
            results.append(entry)
            log(
                f"{name} {mode}: latency p50 {entry['latency_ms']['p50']:.3f} ms, "
                f"CPU {entry['cpu_ms_per_frame']:.3f} ms/frame"
            )
    return {
        "benchmark": "transport",
        "machine": harness.machine(),
        "load_before": load_before,
        "frames": frames,
        "warmup": warmup,
        "spin_wait": spin_wait,
        "schedule_blocking": schedule_blocking,
        "repeat": repeat,
        "results": results,
    }


def _one(
    mode: str, width: int, height: int, frames: int, warmup: int, spin_wait: bool = False
) -> dict[str, Any]:
    if mode == "copy":
        return transport_hops.copy_in_process(width, height, frames, warmup)
    if mode == "hub":
        return transport_hub.hub(width, height, frames + warmup)
    if mode in GPU_MODES:
        return transport_hops.to_gpu(mode, width, height, frames, warmup, spin_wait)
    return transport_hops.hop(mode, width, height, frames, warmup)


def format_table(result: Mapping[str, Any]) -> str:
    rows = []
    for entry in result["results"]:
        rows.append(
            [
                entry["size"],
                entry["mode"],
                round(entry["bytes"] / 2**20, 1),
                entry["latency_ms"]["p50"],
                entry["latency_ms"]["p99"],
                entry["cpu_ms_per_frame"],
                entry.get("fps"),
                entry.get("gbytes_per_s"),
            ]
        )
    head = (
        f"bench transport: {result['frames']} frames per measurement, {result['repeat']} repeat(s), medians "
        f"(load before {result['load_before'][0]:.2f})"
        + ("; gpu- modes wait by spinning" if result.get("spin_wait") else "")
        + ("; the GPU's waits scheduled blocking" if result.get("schedule_blocking") else "")
    )
    headers = ["size", "mode", "MiB", "p50 ms", "p99 ms", "CPU ms/frame", "fps", "GB/s"]
    return head + "\n" + harness.table(headers, rows)
