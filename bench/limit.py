"""The limit a job is judged against: the work alone, measured on the same input, and framewire's
time as a share of it (issue 20).

The work is what any program doing the job must do: decode the video (PyAV, one thread), run the
model (ONNX Runtime, one intra-op thread) on the task's own preprocessed input, and encode the output
(x264 with the job's preset and crf, one thread) when the job writes a video. Each piece is timed in
CPU seconds of the thread that runs it (`time.thread_time`), so the figures hold on a loaded machine
too: what another process takes from this one is not counted. No framewire machinery takes part:
no processes, no hub, no frame pool, no colour conversion or scaling in the timings (the model's
input is prepared once, outside them).

The ratios (`file_share`, `live_share`) set framewire's core-seconds a frame against the work's, and
its wall time against the limit on this machine: the work's core-seconds over the cores.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

WORK = ("decode", "model", "encode")
LOOP = ("convert", "preprocess", "postprocess")
"""What the plainest Python loop adds around the work, timed beside it (not part of the limit): the
frame converted to BGR (PyAV), the model's input made from it (the task's own preprocessing) and
the model's output decoded and written as a JSON line. A peer in the same run: what a hand-written
`for frame in container.decode(): ...` pays of its own before any machinery."""


@dataclass
class WorkTimer:
    """CPU seconds (of the calling thread) and counts of each piece of the work."""

    cpu_s: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in (*WORK, *LOOP, "demux")})
    count: dict[str, int] = field(default_factory=lambda: {k: 0 for k in (*WORK, *LOOP, "demux")})

    def add(self, piece: str, started: float, n: int = 1) -> None:
        """Count `n` of `piece` as the thread CPU time since `started` (a `time.thread_time()`)."""
        self.cpu_s[piece] += time.thread_time() - started
        self.count[piece] += n

    def ms_per_frame(self, pieces: tuple[str, ...] = WORK) -> dict[str, float | None]:
        """Each piece's mean CPU milliseconds a frame (None where it was not measured)."""
        return {
            k: (self.cpu_s[k] / self.count[k] * 1000.0 if self.count[k] else None) for k in pieces
        }


def usable_cores() -> int:
    """The cores this process may run on (`taskset` narrows them), which the limit spreads the work over."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def work_ms(pieces: Mapping[str, float | None], with_encode: bool) -> float:
    """Core-milliseconds of work a frame: decode + model (+ encode when the job writes a video)."""
    keys = WORK if with_encode else WORK[:2]
    return sum(float(pieces.get(k) or 0.0) for k in keys)


def file_share(
    *, frames: int, cpu_s: float, wall_s: float, work_ms_per_frame: float, cores: int,
    startup_s: float | None = None,
) -> dict[str, float | None]:
    """framewire's file job against the work alone on the same frames.

    `cpu_ratio`: its core-seconds a frame over the work's (1.0: framewire costs nothing of its own);
    `wall_ratio`: its wall time over the limit, the work's core-seconds spread over every core
    (1.10: within 10% of the limit); `after_startup_ratio`: the same from its first frame out (its
    imports and model loads left out, as the work alone leaves out its own)."""
    work_core_s = work_ms_per_frame * frames / 1000.0
    limit_s = work_core_s / cores if cores > 0 else None
    fw_ms = cpu_s / frames * 1000.0 if frames else None
    return {
        "framewire_ms_per_frame": fw_ms,
        "work_ms_per_frame": work_ms_per_frame,
        "own_ms_per_frame": (fw_ms - work_ms_per_frame) if fw_ms is not None else None,
        "cpu_ratio": (fw_ms / work_ms_per_frame) if fw_ms is not None and work_ms_per_frame > 0 else None,
        "work_core_s": work_core_s,
        "limit_wall_s": limit_s,
        "wall_s": wall_s,
        "wall_ratio": (wall_s / limit_s) if limit_s else None,
        "startup_s": startup_s,
        "after_startup_ratio": (wall_s - startup_s) / limit_s if limit_s and startup_s is not None else None,
    }


def live_share(
    *, streams: int, cpu_s: float, wall_s: float, work_ms_per_frame: float, fps: float, cores: int,
    frames_out: int | None = None,
) -> dict[str, float | None]:
    """framewire's live job against the work alone: cores a stream takes, and streams the cores hold.

    `work_cores_per_stream` = work a frame x the stream's rate; `stream_limit` = cores over it (what
    the machine could carry with nothing but the work); `framewire_stream_limit` the same with
    framewire's measured cores a stream; `cpu_ratio` framewire's cores a stream over the work's.
    These hold when every stream is kept at its rate. On a machine too busy to keep them, frames are
    dropped and a stream costs less: `frames_out` (frames put out in the window) gives framewire's
    CPU ms a frame out, `frame_ratio` that over the work's, and `framewire_stream_limit_per_frame`
    the streams the cores would carry at that cost a frame, every frame kept."""
    work_per_stream = work_ms_per_frame * fps / 1000.0
    fw_per_stream = cpu_s / wall_s / streams if wall_s > 0 and streams > 0 else None
    fw_ms = cpu_s / frames_out * 1000.0 if frames_out else None
    per_frame = {
        "framewire_ms_per_frame_out": fw_ms,
        "frame_ratio": fw_ms / work_ms_per_frame if fw_ms and work_ms_per_frame > 0 else None,
        "framewire_stream_limit_per_frame": cores / (fw_ms * fps / 1000.0) if fw_ms and fps > 0 else None,
    }
    return {
        **per_frame,
        "streams": streams,
        "fps": fps,
        "work_ms_per_frame": work_ms_per_frame,
        "work_cores_per_stream": work_per_stream,
        "framewire_cores_per_stream": fw_per_stream,
        "cpu_ratio": (fw_per_stream / work_per_stream) if fw_per_stream and work_per_stream > 0 else None,
        "stream_limit": (cores / work_per_stream) if work_per_stream > 0 else None,
        "framewire_stream_limit": (cores / fw_per_stream) if fw_per_stream else None,
    }


# --- measuring the work --------------------------------------------------------------------------


def _one_thread_decoder(container: Any) -> Any:
    stream = container.streams.video[0]
    stream.thread_type = "NONE"
    stream.thread_count = 1
    return stream


def _decoded(
    container: Any, stream: Any, timer: WorkTimer, limit: int | None, keep: list[Any] | None = None
) -> Iterator[Any]:
    """Each decoded frame, demux and decode timed as `decode`, up to `limit` frames; with `keep`,
    each packet is kept there too and its demuxing timed apart, as `demux`."""
    packets = iter(container.demux(stream))  # its last packet is empty: it flushes the decoder
    n = 0
    while limit is None or n < limit:
        started = time.thread_time()
        packet = next(packets, None)
        if packet is None:
            return
        if keep is not None:
            keep.append(packet)
            timer.add("demux", started, 0)
            started = time.thread_time()
        frames = packet.decode()
        timer.add("decode", started, len(frames))
        for frame in frames:
            n += 1
            yield frame


@dataclass
class _Model:
    """The job's task and engine on one thread, timing the model on the task's own input."""

    config: Any
    every: int
    task: Any = None
    engine: Any = None
    inputs: dict[tuple[int, int], Any] = field(default_factory=dict)  # frame size -> the model's input
    sink: Any = field(default_factory=lambda: open(os.devnull, "w", encoding="utf-8"))  # the JSON lines

    def __post_init__(self) -> None:
        from framewire.components import open_engine, task_from_config

        self.task = task_from_config(self.config)
        engine_config = self.config.engine.model_copy(update={"threads": 1, "max_batch": 1})
        self.engine = open_engine(engine_config, self.config.model.path, self.task.dynamic_axes())

    def run(self, frame: Any, index: int, timer: WorkTimer) -> None:
        """Every `every`-th frame: infer, timed as the work (`model`); the plain loop's steps around it
        (`LOOP`: BGR, the model's input, its output as a JSON line) timed apart."""
        if index % self.every:
            return
        import numpy as np

        key = (frame.width, frame.height)
        if key not in self.inputs:
            spec = self.task.input_spec(frame.width, frame.height)
            self.inputs[key] = np.empty(tuple(int(d) for d in spec.shape if d is not None), spec.dtype)
        buffer = self.inputs[key]
        started = time.thread_time()
        image = frame.to_ndarray(format="bgr24")
        timer.add("convert", started)
        started = time.thread_time()
        meta = self.task.preprocess(image, buffer)
        timer.add("preprocess", started)
        started = time.thread_time()
        outputs = self.engine.infer({self.task.input_name: buffer}, self.task.output_names)
        timer.add("model", started)
        started = time.thread_time()
        result = self.task.postprocess(outputs, meta, frame.width, frame.height)
        self.sink.write(json.dumps({"seq": index, "pts": frame.pts, **result.data}, default=_plain) + "\n")
        timer.add("postprocess", started)

    def close(self) -> None:
        self.engine.close()
        self.sink.close()


def _plain(value: Any) -> Any:
    """A NumPy number or array in a JSON line, as a plain one."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def _encoder(width: int, height: int, rate: Any, time_base: Any, output: Any) -> Any:
    """x264 with the job's video output settings, one thread, on the stream's own time base: x264's
    rate control reads each frame's duration from the timestamps, so frames without them (as a
    first version fed it) are coded with fewer bits and less work than any real output does
    (1280x720 at veryfast, crf 23: 657 KB against 1061 KB, 10.1 against 11.1 ms a frame)."""
    from fractions import Fraction

    import av

    codec = av.CodecContext.create(output.codec if hasattr(output, "codec") else "libx264", "w")
    codec.width, codec.height, codec.pix_fmt = width, height, "yuv420p"
    codec.time_base = Fraction(time_base) if time_base else Fraction(1, 1000)
    codec.framerate = Fraction(rate) if rate else Fraction(25)
    codec.thread_count = 1
    codec.options = {"crf": str(output.crf), "preset": output.preset}
    return codec


def _encode(codec: Any, frame: Any, timer: WorkTimer) -> list[Any]:
    yuv = frame if frame.format.name == "yuv420p" else frame.reformat(format="yuv420p")
    yuv.pts, yuv.time_base = frame.pts, frame.time_base  # reformat keeps them; said for the reader
    started = time.thread_time()
    packets = codec.encode(yuv)
    timer.add("encode", started)
    return packets


def _work(frames: Iterator[Any], stream: Any, model: _Model, video: Any, timer: WorkTimer) -> int:
    """Each decoded frame through the model and (for a video job) x264; returns the frames seen."""
    codec = None
    n = 0
    for frame in frames:
        if video is not None and codec is None:
            codec = _encoder(frame.width, frame.height, stream.average_rate, stream.time_base, video)
        model.run(frame, n, timer)
        if codec is not None:
            _encode(codec, frame, timer)
        n += 1
    if codec is not None:
        started = time.thread_time()
        codec.encode(None)  # flush: the frames x264 held back are encoded too
        timer.add("encode", started, 0)
    return n


def plain_loop(timer: WorkTimer, work_ms_per_frame: float) -> dict[str, Any]:
    """The plainest Python loop's own steps (`LOOP`), CPU ms a frame, and that loop's CPU a frame
    against the work's (`ratio`): how close to the limit a program can come before any machinery."""
    pieces = timer.ms_per_frame(LOOP)
    own = sum(float(v or 0.0) for v in pieces.values())
    return {
        "ms_per_frame": pieces,
        "own_ms_per_frame": own,
        "ratio": (work_ms_per_frame + own) / work_ms_per_frame if work_ms_per_frame > 0 else None,
    }


def versus_loop(framewire_ms_per_frame: float | None, work: Mapping[str, Any]) -> float | None:
    """framewire's CPU a frame over the plain loop's (the work and the loop's own steps, `work_alone`)."""
    loop = work.get("loop") or {}
    total = float(work.get("work_ms_per_frame") or 0.0) + float(loop.get("own_ms_per_frame") or 0.0)
    return framewire_ms_per_frame / total if framewire_ms_per_frame and total > 0 else None


def _redecoded(packets: list[Any], stream: Any, timer: WorkTimer, limit: int | None) -> Iterator[Any]:
    """A live stream's kept packets decoded again, back to back, by a decoder of its own (one thread)."""
    import av

    codec = av.CodecContext.create(stream.codec_context.name, "r")
    codec.extradata = stream.codec_context.extradata
    codec.thread_type = "NONE"
    codec.thread_count = 1
    n = 0
    # None flushes the frames the decoder holds back (a file's own empty last packet is left out)
    for packet in [*(p for p in packets if p.size), None]:
        started = time.thread_time()
        frames = codec.decode(packet)
        timer.add("decode", started, len(frames))
        for frame in frames:
            if limit is not None and n >= limit:
                return
            if frame.time_base is None:  # a bare decoder's frames: the stream's, as x264 needs them
                frame.time_base = stream.time_base
            n += 1
            yield frame


def work_alone(
    config: Any, uri: str, *, frames: int | None = None, model_every: int = 1, options: Any = None,
    live: bool = False,
) -> dict[str, Any]:
    """The work of the job `config` on `uri` (a file or a live stream), alone, one thread a piece.

    Decodes up to `frames` frames (all, for a file), runs the model on every `model_every`-th and
    encodes every one when the job has a video output. Returns CPU ms a frame of each piece and the
    frames seen.

    A `live` stream's frames come 40 ms apart, and work done on each as it comes runs cold: each
    frame's decode and model find their code and data gone from the caches (YuNet at 640x288: 4.5 ms
    a frame with a 40 ms pause before each, 3.55 back to back, on the 2-core development machine).
    A machine near its limit runs the work of many streams back to back, so the limit is measured so:
    the stream's packets are kept as they come (their demuxing timed, and counted as decode), then
    decoded, run through the model and encoded back to back. The figures as each frame came are kept
    too (`paced`)."""
    import av

    from framewire.components import VideoFileOutput

    video = next((o for o in config.outputs if isinstance(o, VideoFileOutput)), None)
    timer = WorkTimer()
    model = _Model(config, max(1, model_every))
    process0 = time.process_time()
    container = av.open(uri, options=options or {})
    paced: dict[str, Any] | None = None
    try:
        stream = _one_thread_decoder(container)
        if live:
            as_they_came = WorkTimer()
            packets: list[Any] = []
            _work(_decoded(container, stream, as_they_came, frames, keep=packets), stream, model, video, as_they_came)
            demux_s = as_they_came.cpu_s["demux"]  # receiving the stream is work too: counted as decode
            as_they_came.cpu_s["decode"] += demux_s
            timer.cpu_s["decode"] += demux_s
            pieces = as_they_came.ms_per_frame()
            paced = {"ms_per_frame": pieces, "work_ms_per_frame": work_ms(pieces, with_encode=video is not None)}
            n = _work(_redecoded(packets, stream, timer, frames), stream, model, video, timer)
        else:
            n = _work(_decoded(container, stream, timer, frames), stream, model, video, timer)
        size = (stream.width, stream.height)
    finally:
        container.close()
        model.close()
    pieces = timer.ms_per_frame()
    return {
        "uri": uri,
        "frames": n,
        "size": list(size),
        "model_frames": timer.count["model"],
        "model_input": [list(v.shape) for v in model.inputs.values()],
        "encode": {"codec": "libx264", "preset": video.preset, "crf": video.crf} if video else None,
        "ms_per_frame": pieces,
        "cpu_s": {k: v for k, v in timer.cpu_s.items() if k in WORK},
        "work_ms_per_frame": work_ms(pieces, with_encode=video is not None),
        "loop": plain_loop(timer, work_ms(pieces, with_encode=video is not None)),
        "paced": paced,
        "process_cpu_s": time.process_time() - process0,  # everything, the untimed preparation too
    }
