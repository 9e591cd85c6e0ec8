"""`bench console -c FILE`: what the web console's previews cost, with no viewer and with one.

Two parts. `tap`: the hub's side on its own, per frame size: the time `Previews.frame_done` takes
for a frame nobody watches (a dict lookup), the time it takes to hand a watched frame over (the
copy out of its pool slot, in the hub loop), and the encoder's time and JPEG size per preview
(shrunk to `--width`, on its own thread). `job`: the config's job run twice through
`framewire.start` with the HTTP server on, once with no viewer and once with one (a separate
process long-polling the source's previews as the page does): frames per second, and the CPU
time of the daemon's own process (hub, HTTP threads, encoder; the workers are other processes)
per frame, with the previews encoded. JSON and a table.
"""

from __future__ import annotations

import argparse
import functools
import resource
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bench import harness

SIZES = ((272, 640), (720, 1280), (1080, 1920))


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    add_config_args(parser)
    parser.add_argument("--frames", type=int, default=250, help="frames of the config's first source per job run")
    parser.add_argument("--tap-frames", type=int, default=100, help="frames per size in the tap part")
    parser.add_argument("--width", type=int, default=640, help="http.console.preview_width (previews no wider)")
    parser.add_argument("--preview-fps", type=float, default=10.0, help="http.console.preview_fps in the job part")
    parser.add_argument("--repeat", type=int, default=3, help="job runs per case (after one warm-up run); medians")
    parser.add_argument("--skip-job", action="store_true", help="the tap part only")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")


def run(args: argparse.Namespace) -> int:
    result: dict[str, Any] = {"machine": harness.machine(), "width": args.width}
    result["tap"] = [tap(size, args.tap_frames, args.width) for size in SIZES]
    if not args.skip_job:
        from framewire import load_config
        from framewire.components import resolve_inputs

        overrides = [*args.overrides, f"sources.0.max_frames={args.frames}", "sources.0.realtime=false",
                     "http.enabled=true", f"http.console.preview_width={args.width}",
                     f"http.console.preview_fps={args.preview_fps}"]  # fmt: skip
        result["config"], result["overrides"] = str(args.config), overrides
        run_job = functools.partial(job, load_config, resolve_inputs, args.config, overrides)
        run_job(False)  # warm-up: the fork server's imports, the page cache
        runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        for _ in range(max(1, args.repeat)):  # alternated, so a change in the machine's load hits both
            for viewer in (False, True):
                runs[viewer].append(run_job(viewer))
        result["job"] = [{**harness.median_of(runs[v]), "viewer": v, "runs": runs[v]} for v in (False, True)]
    harness.write_json(args.json, result)
    harness.say(format_table(result))
    return 1 if any(r["exit_code"] for case in result.get("job", []) for r in case["runs"]) else 0


def _picture(height: int, width: int) -> np.ndarray:
    """A real frame (bikes.mp4's 50th) at this size: JPEG time depends on the picture."""
    import av
    import cv2

    with av.open(str(harness.ROOT / "assets" / "videos" / "bikes.mp4")) as container:
        for index, frame in enumerate(container.decode(video=0)):
            if index == 50:
                image = frame.to_ndarray(format="bgr24")
                return np.ascontiguousarray(cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA))
    raise RuntimeError("bikes.mp4 has fewer than 51 frames")


def tap(size: tuple[int, int], frames: int, width: int) -> dict[str, Any]:
    """The hub's cost per frame without and with a viewer, and the encoder's, at one frame size."""
    import os

    from framewire.media.jpeg import jpeg_encoder
    from framewire.pipeline.ops.preview import Previews
    from framewire.pipeline.wire.framepool import FramePool, PoolLayout

    height, full = size
    shape = (height, full, 3)
    pool = FramePool.create(PoolLayout.plan(f"framewire-bench-console-{os.getpid()}", 2,
                                            {"image": (shape, "uint8"), "output": (shape, "uint8")}))  # fmt: skip
    try:
        pool.view(0, "output")[:] = _picture(height, full)
        encode = jpeg_encoder(width, 75)
        timed: list[float] = []

        def encoder(image: np.ndarray) -> bytes:
            started = time.perf_counter()
            data = encode(image)
            timed.append(time.perf_counter() - started)
            return data

        previews = Previews(encoder, fps=1e6)
        written = frozenset({"image", "output"})
        started = time.perf_counter()
        for _ in range(frames * 100):
            previews.frame_done("cam", pool, 0, written)
        idle = (time.perf_counter() - started) / (frames * 100)
        handover: list[float] = []
        size_bytes = 0
        for number in range(1, frames + 1):
            previews.watch("cam")
            started = time.perf_counter()
            previews.frame_done("cam", pool, 0, written)
            handover.append(time.perf_counter() - started)
            got = previews.wait_frame("cam", number - 1, timeout=10)
            assert got is not None, "the encoder did not answer"
            size_bytes = len(got[1])
        previews.close()
    finally:
        pool.close()
    return {
        "frame": f"{full}x{height}",
        "no_viewer_us": idle * 1e6,
        "handover_ms": float(np.median(handover)) * 1000,
        "encode_ms": float(np.median(timed)) * 1000,
        "jpeg_kib": size_bytes / 1024,
    }


VIEWER = """
import json, sys, time, urllib.request
url, source = sys.argv[1], sys.argv[2]
after = 0
while True:
    try:
        with urllib.request.urlopen(f"{url}/console/preview/{source}?after={after}", timeout=10) as r:
            if r.status == 200:
                after = int(r.headers["X-Frame"])
                r.read()
    except Exception:
        time.sleep(0.05)
"""
"""The viewer: what the page's preview loop does, in a process of its own (its CPU is not the daemon's)."""


def job(load: Any, resolve: Any, config_path: str, overrides: Sequence[str], viewer: bool) -> dict[str, Any]:
    """One run of the job; with `viewer`, a process watches the first source's previews throughout.
    The daemon is kept running (http.keep_running) until the source has ended and its metrics are
    read over HTTP, then stopped."""
    import framewire

    port = harness.free_port()
    config = resolve(load(config_path, [*overrides, f"http.port={port}", "http.keep_running=true"]), [harness.ROOT])
    source = config.sources[0].id
    url = f"http://127.0.0.1:{port}"
    watcher = None
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    running = framewire.start(config)
    try:
        if viewer:
            watcher = subprocess.Popen([sys.executable, "-c", VIEWER, url, source])
        while not any(s["id"] == source and s["state"] in ("ended", "failed") for s in running.sources()):
            if running.done:
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        frames = next((s["frames"] for s in running.sources() if s["id"] == source), 0)
        encoded, encode_s = _previews(url)
    finally:
        if watcher is not None:
            watcher.kill()
            watcher.wait()
        running.stop()
    report = running.wait(60)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "viewer": viewer,
        "frames": frames,
        "fps": frames / elapsed if elapsed > 0 else None,
        "daemon_process_cpu_ms_per_frame": cpu * 1000 / frames if frames else None,
        "previews_encoded": encoded,
        "encode_ms_per_preview": encode_s * 1000 / encoded if encoded else None,
        "exit_code": report.exit_code,
    }


def _previews(url: str) -> tuple[int, float]:
    """Previews encoded so far and the seconds spent on them, from the daemon's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    totals = {"framewire_preview_frames_total": 0.0, "framewire_preview_encode_seconds_total": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    return int(totals["framewire_preview_frames_total"]), totals["framewire_preview_encode_seconds_total"]


def format_table(result: dict[str, Any]) -> str:
    lines = ["The hub's side and the encoder, per frame (previews no wider than "
             f"{result['width']} px):", harness.table(
        ["frame", "no viewer (us)", "hand-over (ms)", "encode (ms)", "JPEG (KiB)"],
        [[t["frame"], t["no_viewer_us"], t["handover_ms"], t["encode_ms"], t["jpeg_kib"]] for t in result["tap"]])]  # fmt: skip
    if result.get("job"):
        lines += ["", "The job, with no viewer and with one:", harness.table(
            ["viewer", "frames", "fps", "daemon CPU ms/frame", "previews", "encode ms/preview"],
            [[j["viewer"], j["frames"], j["fps"], j["daemon_process_cpu_ms_per_frame"], j["previews_encoded"],
              j["encode_ms_per_preview"]] for j in result["job"]])]  # fmt: skip
    return "\n".join(lines)

