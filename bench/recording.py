"""`bench recording`: what recording a stream without re-encoding costs, in a fraction of a core.

One H.264 stream (made here: 720p by default, a key frame a second, AAC beside it) is demuxed the
way a decode worker demuxes it, and each mode adds its work to every packet:

- `demux`: the packets read and nothing else (what the decode worker does anyway; subtracted);
- `passthrough`: the decode worker's packet tap writing the passthrough recording (key-frame
  segments of fragmented MP4, framewire.sources.packets), every packet copied, not re-encoded;
- `clips`: the tap sending every packet to a clip output's socket, and that output's process
  keeping them in its ring (framewire.media.clips): both processes' CPU;
- `both`: the two together, as a `recording` output with passthrough and clips asks;
- `decode`: every frame decoded, for scale (what the decode worker spends on the same stream);
- `encode`: the same frames encoded again with libx264 veryfast (what re-encoding would cost), for scale.

The cost of a mode is its CPU time less `demux`'s, over the stream's seconds: the share of one core
a live stream of that kind takes, whatever its frame rate.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av

from bench import harness
from framewire import UsageError

# Internals on purpose, in this one place (tests/unit/bench/test_public_api.py): this benchmark
# measures the decode worker's packet tap and the clip output's ring, which no user drives directly.
from framewire.media.clips import PacketRing
from framewire.media.segments import Retention
from framewire.pipeline.wire.packets import STREAMS, PacketPull, endpoint_for
from framewire.sources.packets import PacketTap, TapSpec

MODES = ("demux", "passthrough", "clips", "both", "decode", "encode")
SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}
CONTAINERS = {"mp4": ".mp4", "mpegts": ".ts"}


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    parser.add_argument("--size", default="720p", choices=list(SIZES), help="the stream's size (%(default)s)")
    parser.add_argument("--seconds", type=int, default=30, help="the stream's length (%(default)s)")
    parser.add_argument("--fps", type=int, default=25, help="its frame rate (%(default)s)")
    parser.add_argument("--bitrate", type=int, default=3_000_000, help="its bit rate (%(default)s)")
    parser.add_argument(
        "--container",
        default="mp4",
        choices=list(CONTAINERS),
        help="the stream's container (%(default)s); mpegts: its H.264 packets with start codes, as an RTSP "
        "camera's come, which the tap gives NAL lengths for the clips, and AAC as ADTS (an SRT or UDP "
        "camera's), which loses its headers",
    )
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="what to measure")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each mode; medians reported")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")


def run(args: argparse.Namespace) -> int:
    if args.seconds < 2:
        raise UsageError("--seconds: at least 2")
    with tempfile.TemporaryDirectory(prefix="framewire-bench-rec-") as tmp:
        path = Path(tmp) / ("in" + CONTAINERS[args.container])
        clip = make_stream(path, *SIZES[args.size], args.seconds, args.fps, args.bitrate)
        runs: dict[str, list[float]] = {m: [] for m in MODES if m in args.modes or m == "demux"}
        for _ in range(max(1, args.repeat)):
            for mode in runs:
                runs[mode].append(measure(mode, clip, Path(tmp)))
    base = harness.median(runs["demux"]) or 0.0
    result: dict[str, Any] = {
        "machine": harness.machine(), "size": args.size, "container": args.container, "seconds": args.seconds, "fps": args.fps,
        "bitrate": args.bitrate, "runs": runs,
        "cpu_s": {m: harness.median(v) for m, v in runs.items()},
        "core_percent": {
            m: 100.0 * ((harness.median(v) or 0.0) - (0.0 if m == "demux" else base)) / args.seconds
            for m, v in runs.items()
        },
    }  # fmt: skip
    harness.write_json(args.json, result)
    rows = [[m, result["cpu_s"][m], result["core_percent"][m]] for m in runs]
    harness.say(harness.table(["mode", "CPU s (median)", "% of a core (less demux)"], rows))
    return 0


def make_stream(path: Path, width: int, height: int, seconds: int, fps: int, bitrate: int) -> Path:
    """A camera's stream: H.264 at `bitrate`, no B-frames, a key frame a second, AAC mono."""
    import numpy as np

    with av.open(str(path), mode="w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt, video.bit_rate = width, height, "yuv420p", bitrate
        video.options = {"preset": "ultrafast", "g": str(fps), "bf": "0", "sc_threshold": "0"}
        audio = container.add_stream("aac", rate=48000, layout="mono")
        base = np.random.default_rng(1).integers(0, 255, (height // 8, width // 8, 3), dtype=np.uint8)
        samples = 0
        for index in range(seconds * fps):
            image = np.ascontiguousarray(np.roll(base, index, axis=1).repeat(8, 0).repeat(8, 1))
            frame = av.VideoFrame.from_ndarray(image, format="bgr24")
            frame.pts = index
            container.mux(video.encode(frame))
            until = (index + 1) * 48000 // fps
            tone = av.AudioFrame.from_ndarray(
                np.zeros((1, until - samples), dtype=np.float32), format="fltp", layout="mono"
            )
            tone.sample_rate, tone.pts = 48000, samples
            container.mux(audio.encode(tone))
            samples = until
        container.mux(video.encode(None))
        container.mux(audio.encode(None))
    return path


def measure(mode: str, clip: Path, tmp: Path) -> float:
    """CPU seconds (this process, and the receiver's for clips) to read `clip` in `mode`."""
    folder = tmp / f"out-{mode}-{time.monotonic_ns()}"
    passthrough = (
        ((str(folder / "{source_id}-{index}.mp4"), 60.0, Retention()),)
        if mode in ("passthrough", "both")
        else ()
    )
    endpoints = (endpoint_for(str(folder)),) if mode in ("clips", "both") else ()
    receiver, result = _receiver(endpoints[0]) if endpoints else (None, None)
    start = time.process_time()
    with av.open(str(clip)) as container:
        streams = [container.streams.video[0], *container.streams.audio[:1]]
        if mode == "decode":
            for _ in container.decode(streams[0]):
                pass
        elif mode == "encode":
            _encode(container)
        else:
            tap = PacketTap.build("cam", TapSpec(passthrough, endpoints)) if mode != "demux" else None
            if tap is not None:
                tap.begin(streams)
            for packet in container.demux(*streams):
                if tap is not None and packet.size:
                    tap.packet(packet)
            if tap is not None:
                tap.close()
    spent = time.process_time() - start
    if receiver is not None and result is not None:
        receiver.join(timeout=60)
        spent += result.get(timeout=5)
    return spent


def _encode(container: Any) -> None:
    """Decode, then encode every frame again (libx264 veryfast, one thread), the packets dropped."""
    stream = container.streams.video[0]
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = stream.width, stream.height, "yuv420p"
    encoder.time_base = stream.time_base
    encoder.options = {"preset": "veryfast", "threads": "1"}
    for frame in container.decode(stream):
        encoder.encode(frame)
    encoder.encode(None)


def _receiver(endpoint: str) -> tuple[Any, Any]:
    """A child process that binds the clips' socket and keeps what comes in its ring (10 s), until
    it has heard nothing for a second; it reports its own CPU seconds."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    ready = context.Event()
    process = context.Process(target=_receive, args=(endpoint, queue, ready), daemon=True)
    process.start()
    ready.wait(timeout=30)
    return process, queue


def _receive(endpoint: str, queue: Any, ready: Any) -> None:
    pull = PacketPull(endpoint)
    ring = PacketRing(10.0, 64 << 20)
    ready.set()
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 1.0:
        got = False
        for kind, _, payload, data in pull.received():
            got = True
            if kind == STREAMS:
                ring.streams(payload)
            else:
                ring.add(payload, data)
        if got:
            quiet_since = time.monotonic()
        else:
            time.sleep(0.002)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    pull.close()
    ring.close()
    queue.put(usage.ru_utime + usage.ru_stime)  # its idle polling included: an upper bound
