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
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench import harness
from framewire import UsageError
from framewire.components import Stage

# Internals on purpose, in this one place (docs/benchmarks.md, tests/unit/bench/test_public_api.py):
# this benchmark measures the hub's own wire, its frame pool, messages and supervisor, which no user
# drives directly, and the TensorRT backend's copies from a pool to the GPU (`cuda`).
from framewire.engines import cuda
from framewire.pipeline.plan import Plan, SourcePlan, StageSpec  # the Plan's own element type
from framewire.pipeline.run.supervisor import Supervisor
from framewire.pipeline.wire import messages as msg
from framewire.pipeline.wire.framepool import FramePool, PoolCache, PoolLayout

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
        cuda.schedule_blocking(0)
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


def _one(mode: str, width: int, height: int, frames: int, warmup: int, spin_wait: bool = False) -> dict[str, Any]:
    if mode == "copy":
        return _copy(width, height, frames, warmup)
    if mode == "hub":
        return _hub(width, height, frames + warmup)
    if mode in GPU_MODES:
        return _to_gpu(mode, width, height, frames, warmup, spin_wait)
    return _hop(mode, width, height, frames, warmup)


def _copy(width: int, height: int, frames: int, warmup: int) -> dict[str, Any]:
    import numpy as np

    src = _picture(width, height)
    dst = np.empty_like(src)
    latencies = []
    cpu0 = time.process_time()
    for i in range(warmup + frames):
        if i == warmup:
            cpu0 = time.process_time()
        t0 = time.monotonic_ns()
        np.copyto(dst, src)
        if i >= warmup:
            latencies.append((time.monotonic_ns() - t0) / 1e6)
    cpu = time.process_time() - cpu0
    return _summary(latencies, cpu, frames)


def _to_gpu(mode: str, width: int, height: int, frames: int, warmup: int, spin: bool) -> dict[str, Any]:
    """One frame at a time from a frame-pool slot (written before the clock starts) to GPU memory.
    `spin`: wait by spinning instead of on a blocking event (its CPU time is then the copy's time)."""
    import numpy as np

    cuda.require_device(0)
    cuda.set_device(0)
    layout = PoolLayout.plan(f"framewire-bench-gpu-{os.getpid()}", 4, {"image": ((height, width, 3), "uint8")})
    pool = FramePool.create(layout)
    stream, device = cuda.Stream(spin=spin), cuda.DeviceBuffer(width * height * 3)
    staging = cuda.HostBuffer(width * height * 3)
    registration = cuda.HostRegistration(pool.memory) if mode == "gpu-pinned" else None
    try:
        for slot in range(layout.slots):
            pool.view(slot, "image")[...] = _picture(width, height)
        latencies = []
        cpu0 = time.process_time()
        for i in range(warmup + frames):
            if i == warmup:
                cpu0 = time.process_time()
            view = pool.view(i % layout.slots, "image")
            t0 = time.monotonic_ns()
            source = int(view.ctypes.data)
            if mode == "gpu-staged":
                np.copyto(staging.view(np.uint8, view.shape), view)
                source = staging.ptr
            cuda.memcpy_htod_async(device.ptr, source, view.nbytes, stream)
            stream.synchronize()
            if i >= warmup:
                latencies.append((time.monotonic_ns() - t0) / 1e6)
        cpu = time.process_time() - cpu0
        del view
    finally:
        if registration is not None:
            registration.close()
        staging.close()
        device.close()
        stream.close()
        pool.close()
    out = _summary(latencies, cpu, frames)
    median = out["latency_ms"]["p50"]
    out["gbytes_per_s"] = width * height * 3 / (median * 1e6) if median else None
    return out


def _picture(width: int, height: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(7)
    return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def _hop(mode: str, width: int, height: int, frames: int, warmup: int) -> dict[str, Any]:
    """Two processes: this one sends (DEALER, as decode or a worker), a spawned one receives (ROUTER,
    as the hub), answering each frame."""
    import numpy as np
    import zmq

    folder = tempfile.mkdtemp(prefix="fw-transport-")
    endpoint = f"ipc://{folder}/hop.sock"
    ctx = zmq.Context()
    pool: FramePool | None = None
    receiver: Any = None
    try:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, b"sender")
        slots = 4
        pool_wire = None
        if mode.startswith("pool"):
            name = f"framewire-bench-{os.getpid()}-{width}x{height}"
            layout = PoolLayout.plan(name, slots, {"image": ((height, width, 3), "uint8")})
            pool = FramePool.create(layout)
            pool_wire = layout.to_wire()
        mp = multiprocessing.get_context("spawn")
        ready = mp.Event()
        out_q = mp.SimpleQueue()
        receiver = mp.Process(
            target=_receiver_main, args=(endpoint, mode, frames + warmup, warmup, ready, out_q), daemon=True
        )
        receiver.start()
        if not ready.wait(60):
            raise RuntimeError("transport receiver did not start")
        sock.connect(endpoint)
        image = _picture(width, height)
        cpu0 = time.process_time()
        for i in range(warmup + frames):
            if i == warmup:
                cpu0 = time.process_time()
            slot = i % slots
            t0 = time.monotonic_ns()
            header: dict[str, Any] = {"type": msg.FRAME, "source": "bench", "seq": i, "t0": t0}
            if pool is not None:
                if mode == "pool" or i < slots:
                    np.copyto(pool.view(slot, "image"), image)
                header.update(slot=slot, pool=pool_wire)
                sock.send_multipart(msg.encode(header), copy=False)
            else:
                sock.send_multipart(msg.encode(header, {"image": image}), copy=False)
            sock.recv_multipart()  # the credit back
        sender_cpu = time.process_time() - cpu0
        sock.send_multipart(msg.encode({"type": msg.STOP}))
        latencies, receiver_cpu = out_q.get()
        receiver.join(10)
        sock.close(linger=0)
        total = sender_cpu + receiver_cpu
        return _summary(latencies, total, frames, sender_cpu=sender_cpu, receiver_cpu=receiver_cpu)
    finally:
        if receiver is not None and receiver.is_alive():
            receiver.kill()
            receiver.join(5)
        ctx.term()
        if pool is not None:
            pool.close()
        shutil.rmtree(folder, ignore_errors=True)


def _receiver_main(endpoint: str, mode: str, total: int, warmup: int, ready: Any, out_q: Any) -> None:
    """The receiving process: a ROUTER like the hub's; each frame becomes a numpy array here."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)
    pools = PoolCache()
    ready.set()
    latencies: list[float] = []
    checksum = 0
    cpu0 = time.process_time()
    for i in range(total + 1):
        if i == warmup:
            cpu0 = time.process_time()
        parts = sock.recv_multipart(copy=False)
        header, tensors = msg.decode(parts[1:])
        if header["type"] == msg.STOP:
            break
        if mode.startswith("pool"):
            image = pools.get(header["pool"]).view(int(header["slot"]), "image")
        else:
            image = tensors["image"]
        arrived = time.monotonic_ns()
        checksum += int(image[0, 0, 0])  # the frame is there to read
        if i >= warmup:
            latencies.append((arrived - int(header["t0"])) / 1e6)
        credit = msg.encode({"type": msg.GRANT, "slots": [header.get("slot", 0)]})
        sock.send_multipart([parts[0].bytes, *credit])
    cpu = time.process_time() - cpu0
    out_q.put((latencies, cpu))
    pools.close()
    sock.close(linger=0)
    ctx.term()


# --- the hub with no-op stages -------------------------------------------------------------------


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


def _hub(width: int, height: int, frames: int) -> dict[str, Any]:
    """Frames through the real supervisor and the default job's processes, with no work in them."""
    import functools
    import json

    import psutil

    folder = tempfile.mkdtemp(prefix="fw-hub-")
    latencies_path = os.path.join(folder, "latencies.json")
    # As the default job's specs say: the model's stage sheds, the stages up to it skip stale frames.
    middle = tuple(
        StageSpec(name, 2 if name == "infer" else 1, functools.partial(_noop), sheds=name == "infer",
                  skips_stale=name in ("preprocess", "infer"))
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
        preload=("bench.transport",),
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
    out = _summary(latencies[first:last], cpu_s, counted)
    out["fps"] = counted / (t1 - t0) if t1 > t0 else None
    return out


def _summary(latencies: Sequence[float], cpu_s: float, frames: int, **extra: float) -> dict[str, Any]:
    out: dict[str, Any] = {
        "latency_ms": {
            "p50": harness.percentile(latencies, 50),
            "p99": harness.percentile(latencies, 99),
            "mean": sum(latencies) / len(latencies) if latencies else None,
        },
        "cpu_ms_per_frame": cpu_s / frames * 1000.0 if frames else None,
    }
    for key, value in extra.items():
        out[f"{key}_ms_per_frame"] = value / frames * 1000.0 if frames else None
    return out


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
