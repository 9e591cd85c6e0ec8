"""The plainest careful program a user would write for the file job, run beside framewire on the same
clip (`bench budget --peer`, without --streams; issue 20): a peer that says how close to the file
limit a Python program with no machinery comes, measured in the same run as framewire.

One process, as a user who knows that FFmpeg, ONNX Runtime and OpenCV let go of the GIL would write
it. A reader thread decodes the clip (PyAV, one decoder thread, as the work alone does) into a
bounded queue. A pool of model threads, one a core (`concurrent.futures`), each with its own
session (ONNX Runtime, one thread) and input buffer, converts each frame to BGR, makes the model's
input with the task's own preprocessing, runs the model, decodes its output and blurs the faces
with the job's own composites (`composites_from_config`). The main thread takes their results in
the frames' order (at most `IN_FLIGHT` a model thread at once), writes a JSON line for each and
hands the frame to a writer thread, which converts it to YUV 4:2:0 (OpenCV) and encodes it with x264 (the job's preset and crf, one
thread) into an MP4 at the frame's own timestamps. No hub, no frame pool, no processes: what it spends over the work is the
plain loop's own steps (`limit.LOOP`), the blur, the conversion back to YUV for x264, and its
start-up (the imports and the model's session, which framewire pays in its fork server).

It writes when it began (after the interpreter's own start), when its first line went out and when
it ended (`<summary>`); `run_file_peer` times it from its start to its exit and reads its CPU from
the kernel when it is reaped.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from bench import harness
from bench.live_peer import ModelLoop

QUEUE = 8
"""Frames each queue holds: enough to keep every thread busy, few enough to bound the memory."""
IN_FLIGHT = 2
"""Frames given to the model threads at once, for each of them."""
END = None
TIMEOUT_S = 600.0


def read(uri: str, frames: queue.Queue[Any], errors: list[str]) -> None:
    """The reader thread: every frame of `uri`, in order, then END."""
    import av

    from bench.limit import _one_thread_decoder

    try:
        with av.open(uri) as container:
            stream = _one_thread_decoder(container)
            for frame in container.decode(stream):
                frames.put(frame)
    except Exception as exc:  # noqa: BLE001 - reported by the main thread, which exits non-zero
        errors.append(f"reading {uri}: {type(exc).__name__}: {' '.join(str(exc).split())}")
    frames.put(END)


def write(path: str, video: Any, stream_info: dict[str, Any], pictures: queue.Queue[Any], errors: list[str]) -> None:
    """The writer thread: each BGR picture (with its pts) converted to YUV 4:2:0 and encoded by x264
    into `path`, at the source's time base; END flushes the encoder and closes the file."""
    import av
    import cv2

    ended = False
    try:
        with av.open(path, "w", format="mp4") as container:
            stream = container.add_stream("libx264", rate=stream_info["rate"])
            stream.width, stream.height, stream.pix_fmt = stream_info["width"], stream_info["height"], "yuv420p"
            stream.time_base = stream_info["time_base"]
            stream.codec_context.time_base = stream_info["time_base"]
            stream.codec_context.thread_count = 1
            stream.options = {"crf": str(video.crf), "preset": video.preset}
            while (item := pictures.get()) is not END:
                image, pts = item
                # OpenCV's conversion: 0.29 ms a 720p frame, against 1.22 for PyAV's `reformat`
                frame = av.VideoFrame.from_ndarray(cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420), format="yuv420p")
                frame.pts, frame.time_base = pts, stream_info["time_base"]
                container.mux(stream.encode(frame))
            ended = True
            container.mux(stream.encode(None))
    except Exception as exc:  # noqa: BLE001 - reported by the main thread, which exits non-zero
        errors.append(f"writing {path}: {type(exc).__name__}: {' '.join(str(exc).split())}")
        if not ended:  # the file may fail at its first write or only when it closes, after END
            deque(iter(pictures.get, END), maxlen=0)  # drained to END: the main thread must not block on a full queue


class ModelThreads:
    """What each model thread keeps: its own model (`live_peer.ModelLoop`: a session on one ONNX
    Runtime thread and an input buffer), and the job's composites, which all of them apply."""

    def __init__(self, config: Any) -> None:
        from framewire.components import composites_from_config

        self.config = config
        self.composites = composites_from_config(config)
        self.local = threading.local()
        self.loops: list[ModelLoop] = []
        self.lock = threading.Lock()

    def run(self, frame: Any) -> tuple[Any, Any, dict[str, Any]]:
        """One frame: BGR, the model's input, the model, its output decoded, the faces blurred;
        (the picture, its pts, the result's data)."""
        loop = getattr(self.local, "loop", None)
        if loop is None:
            loop = self.local.loop = ModelLoop(self.config)
            with self.lock:
                self.loops.append(loop)
        image, result = loop.run(frame)
        for composite in self.composites:
            if composite.draws(result):
                composite.apply(image, result)
        return image, frame.pts, result.data

    def close(self) -> None:
        for loop in self.loops:
            loop.close()


def peer_main(config_path: str, uri: str, video_path: str, records_path: str, summary_path: str, threads: int) -> int:
    """The job's file through the threads; 0 when every frame went out, 1 when a thread failed."""
    began = time.time()
    from concurrent.futures import Future, ThreadPoolExecutor

    import av

    from bench.limit import _plain
    from framewire import validate_config
    from framewire.components import VideoFileOutput

    config = validate_config(json.loads(Path(config_path).read_text(encoding="utf-8")), "bench budget file peer")
    video = next((o for o in config.outputs if isinstance(o, VideoFileOutput)), None)
    work = ModelThreads(config)
    with av.open(uri) as probe:
        source = probe.streams.video[0]
        info = {"rate": source.average_rate, "time_base": source.time_base, "width": source.width, "height": source.height}
    errors: list[str] = []
    frames: queue.Queue[Any] = queue.Queue(QUEUE)
    pictures: queue.Queue[Any] = queue.Queue(QUEUE)
    reader = threading.Thread(target=read, args=(uri, frames, errors), daemon=True)
    writer = threading.Thread(target=write, args=(video_path, video, info, pictures, errors), daemon=True) if video else None
    reader.start()
    if writer is not None:
        writer.start()
    first: float | None = None
    seq = 0
    waiting: deque[Future[Any]] = deque()
    with open(records_path, "w", encoding="utf-8") as records, ThreadPoolExecutor(threads) as pool:

        def put_out(done: Future[Any]) -> None:
            nonlocal first, seq
            image, pts, data = done.result()
            records.write(json.dumps({"seq": seq, "pts": pts, **data}, default=_plain) + "\n")
            if writer is not None:
                pictures.put((image, pts))
            first = first or time.time()
            seq += 1

        while (frame := frames.get()) is not END:
            waiting.append(pool.submit(work.run, frame))
            if len(waiting) >= IN_FLIGHT * threads:
                put_out(waiting.popleft())
        while waiting:
            put_out(waiting.popleft())
    if writer is not None:
        pictures.put(END)
        writer.join()
    work.close()
    summary = {"began": began, "first_out": first, "ended": time.time(), "frames": seq, "errors": errors}
    Path(summary_path).write_text(json.dumps(summary), encoding="utf-8")
    for error in errors:
        print(f"bench budget file peer: {error}", file=sys.stderr)
    return 1 if errors else 0


def run_file_peer(config: Any, uri: str, folder: Path, threads: int) -> dict[str, Any]:
    """The file peer on `uri` in a process of its own: its wall time from its start to its exit, its
    start-up (to its first line out), its CPU seconds (from the kernel, at its exit) and frames."""
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / "file-peer-config.json"
    config_path.write_text(json.dumps(config.model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    summary = folder / "file-peer.summary.json"
    records = folder / "file-peer.jsonl"
    args = [sys.executable, "-m", "bench.file_peer", "--config", str(config_path), "--uri", uri,
            "--video", str(folder / "file-peer.mp4"), "--records", str(records), "--summary", str(summary),
            "--threads", str(threads)]  # fmt: skip
    error = folder / "file-peer.err"
    with error.open("w", encoding="utf-8") as err:
        started = time.time()
        process = subprocess.Popen(args, cwd=harness.ROOT, env=harness.checkout_env(), stdout=subprocess.DEVNULL, stderr=err)
        code, cpu_s = _reap(process, TIMEOUT_S)
        ended = time.time()
    if code != 0 or not summary.exists():
        said = error.read_text(encoding="utf-8").strip().splitlines()
        raise RuntimeError(f"bench budget file peer: exit {code}: {said[-1] if said else 'no message'}")
    told = json.loads(summary.read_text(encoding="utf-8"))
    frames = int(told["frames"])
    return {
        "threads": threads,
        "frames": frames,
        "wall_s": ended - started,
        "startup_s": told["first_out"] - started if told["first_out"] else None,
        "interpreter_s": told["began"] - started,  # the interpreter's own start, before the imports
        "cpu_s": cpu_s,
        "ms_per_frame": cpu_s * 1000.0 / frames if frames else None,
        "lines": len(harness.read_jsonl(records)),
    }


def _reap(process: subprocess.Popen[Any], timeout_s: float) -> tuple[int, float]:
    """Wait for `process` (killed after `timeout_s`); its exit code and CPU seconds, user and system,
    as the kernel counts them when it is reaped."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return process.returncode, usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            process.kill()
        time.sleep(0.01)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.file_peer", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the job's config, as JSON")
    parser.add_argument("--uri", required=True, help="the clip")
    parser.add_argument("--video", required=True, help="the MP4 it writes (when the job has a video output)")
    parser.add_argument("--records", required=True, help="the JSON lines it writes, one a frame")
    parser.add_argument("--summary", required=True, help="when it began, put out its first line and ended")
    parser.add_argument("--threads", type=int, default=2, help="model threads (default: 2)")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads {args.threads}: at least 1")
    return peer_main(args.config, args.uri, args.video, args.records, args.summary, args.threads)


if __name__ == "__main__":
    sys.exit(main())
