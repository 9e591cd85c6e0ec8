"""`bench transport`'s hops of one frame: copied in one process (`copy`), sent between two processes
through a frame-pool slot or inline (`pool`, `pool-ref`, `zmq`), and copied from a slot to the GPU
(`gpu-` modes); and the summary every mode reports (bench/transport.py says what each one measures)."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from bench import harness

# Internals on purpose, in this one place (docs/benchmarks.md, tests/unit/bench/test_public_api.py):
# these hops are the hub's own wire, its frame pool and messages, which no user drives directly, and
# the TensorRT backend's copies from a pool to the GPU (`cuda`).
from framewire.engines import cuda
from framewire.pipeline.wire import messages as msg
from framewire.pipeline.wire.framepool import FramePool, PoolCache, PoolLayout


def schedule_blocking() -> None:
    """Set the GPU's scheduling flag as a GPU infer worker does: every wait of this process sleeps."""
    cuda.schedule_blocking(0)


def copy_in_process(width: int, height: int, frames: int, warmup: int) -> dict[str, Any]:
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
    return summary(latencies, cpu, frames)


def to_gpu(mode: str, width: int, height: int, frames: int, warmup: int, spin: bool) -> dict[str, Any]:
    """One frame at a time from a frame-pool slot (written before the clock starts) to GPU memory.
    `spin`: wait by spinning instead of on a blocking event (its CPU time is then the copy's time)."""
    import numpy as np

    cuda.require_device(0)
    cuda.set_device(0)
    layout = PoolLayout.plan(
        f"framewire-bench-gpu-{os.getpid()}", 4, {"image": ((height, width, 3), "uint8")}
    )
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
    out = summary(latencies, cpu, frames)
    median = out["latency_ms"]["p50"]
    out["gbytes_per_s"] = width * height * 3 / (median * 1e6) if median else None
    return out


def _picture(width: int, height: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(7)
    return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def hop(mode: str, width: int, height: int, frames: int, warmup: int) -> dict[str, Any]:
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
        return summary(latencies, total, frames, sender_cpu=sender_cpu, receiver_cpu=receiver_cpu)
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


def summary(latencies: Sequence[float], cpu_s: float, frames: int, **extra: float) -> dict[str, Any]:
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
