"""The plainest program a user would write for the live job, run beside framewire on the same streams
(`bench budget --streams N --peer`, issue 20): a peer that says how close to the limit any Python
program comes, measured in the same run as framewire.

Three layouts (`LAYOUTS`). `stream`: a process a stream, as people write one script a camera.
`core`: a process a core, each with a share of the streams, as a more careful hand-written program
would do. `pool`: one process for every stream with a model thread a core, each with its own
session, taking the frame of whichever stream was served longest ago (ONNX Runtime lets go of the
GIL while it runs), so no core waits while another process has frames: what `core` cannot do.
In each process, a thread a stream reads and decodes it (PyAV, one decoder thread, as the
work alone does) and keeps only its newest frame (`drop_oldest`: FFmpeg lets go of the GIL while it
reads and decodes). The model thread (in the pool, each of them) takes the newest frames, drops
those older than the staleness limit, and for each converts it to BGR, makes the model's input
with the task's own preprocessing, runs the model (ONNX Runtime, one thread) and writes the decoded
output as a JSON line. No hub, no
frame pool, no messages between processes: what it spends over the work is the plain loop's own
steps (`limit.LOOP`), its threads and each process's wake-ups.

Each line carries the stream time and the latency from the end of the frame's decode to its line,
as framewire's records do, and the wall time it was written at, so the streams are measured over
the same window of wall time (`peer_stats`). `run_peer` starts the processes, waits until each has
put out a frame, measures their CPU over `seconds` and stops them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import harness
from bench.limit import _plain

START_TIMEOUT_S = 180.0
SETTLE_S = 2.0  # after the last stream's first frame, before the window: the first frames' backlog
WAIT_S = 0.2  # the main thread's longest wait for a frame: it hears a stop this often


class Newest:
    """The newest decoded frame of each of a process's streams and when it was decoded (epoch); an
    older one not taken yet is replaced and counted (`dropped`). One condition for all of them: the
    main thread waits for a frame of any stream."""

    def __init__(self, streams: int = 1) -> None:
        self._cond = threading.Condition()
        self._frames: list[tuple[Any, float] | None] = [None] * streams
        self.dropped = [0] * streams
        self.ended = [False] * streams
        self.errors: list[str | None] = [None] * streams
        self._served = [-1] * streams
        """`take_one`: the turn each stream was last served at (-1: never)."""
        self._turns = 0

    def put(self, index: int, frame: Any, decoded_at: float) -> None:
        with self._cond:
            if self._frames[index] is not None:
                self.dropped[index] += 1
            self._frames[index] = (frame, decoded_at)
            self._cond.notify()

    def end(self, index: int, error: str | None = None) -> None:
        with self._cond:
            self.ended[index], self.errors[index] = True, error
            self._cond.notify()

    def take_one(self, timeout_s: float, busy: set[int]) -> tuple[int, Any, float] | None:
        """`pool`: the newest frame of the stream served longest ago, among the streams not in
        `busy` (another model thread has one of theirs: each stream's lines stay in order), waiting
        up to `timeout_s` for one; the stream joins `busy` until `release`. None when none came (or
        every stream has ended). Served longest ago, not decoded first: a frame replaced by a newer
        one looks young again, and a first version that took the oldest frame left some streams at
        8 fps while others kept 25."""
        with self._cond:
            def ready() -> list[int]:
                return [i for i, f in enumerate(self._frames) if f is not None and i not in busy]

            self._cond.wait_for(lambda: bool(ready()) or all(self.ended), timeout_s)
            waiting = ready()
            if not waiting:
                return None
            index = min(waiting, key=lambda i: self._served[i])
            frame, decoded_at = self._frames[index]  # type: ignore[misc]
            self._frames[index] = None
            self._served[index] = self._turns
            self._turns += 1
            busy.add(index)
            return index, frame, decoded_at

    def release(self, index: int, busy: set[int]) -> None:
        """A model thread is done with stream `index`'s frame: another may take its next."""
        with self._cond:
            busy.discard(index)
            self._cond.notify_all()

    def take(self, timeout_s: float) -> list[tuple[int, Any, float]]:
        """Each stream's newest frame not taken yet, as (stream, frame, decoded at), waiting up to
        `timeout_s` for one; [] when none came (or every stream has ended)."""
        with self._cond:
            self._cond.wait_for(lambda: any(f is not None for f in self._frames) or all(self.ended), timeout_s)
            taken = [(i, *f) for i, f in enumerate(self._frames) if f is not None]
            self._frames = [None] * len(self._frames)
            return taken


def read(uri: str, newest: Newest, index: int, options: Mapping[str, str]) -> None:
    """A reader thread: every frame of `uri` decoded, each handed to `newest` as it comes with its
    time in the stream (a missing or repeated pts derived as framewire's reader derives it)."""
    import av

    from bench.limit import _one_thread_decoder

    error = None
    try:
        with av.open(uri, options=dict(options), timeout=10.0) as container:
            stream = _one_thread_decoder(container)
            base = stream.time_base
            step = max(1, round(1 / (float(stream.average_rate or 25) * base)))
            last: int | None = None
            for frame in container.decode(stream):
                # a stream's first frames may have none, or repeat one: the next after the last, as
                # framewire's reader derives them
                last = frame.pts if frame.pts is not None and (last is None or frame.pts > last) else (
                    0 if last is None else last + step)  # fmt: skip
                newest.put(index, (frame, float(last * base)), time.time())
    except Exception as exc:  # noqa: BLE001 - reported by the main thread, which exits non-zero
        error = f"{type(exc).__name__}: {exc}"
    newest.end(index, error)


class Lines:
    """Each stream's JSON lines, frames put out and frames dropped as stale."""

    def __init__(self, out_paths: Sequence[str], ids: Sequence[str], staleness_ms: float) -> None:
        self.ids = ids
        self.staleness_s = staleness_ms / 1000.0 if staleness_ms else None
        self.seq = [0] * len(out_paths)
        self.stale = [0] * len(out_paths)
        self.outs = [open(path, "w", encoding="utf-8") for path in out_paths]

    def is_stale(self, index: int, decoded_at: float) -> bool:
        if self.staleness_s is not None and time.time() - decoded_at > self.staleness_s:
            self.stale[index] += 1
            return True
        return False

    def write(self, index: int, time_s: float, decoded_at: float, data: Mapping[str, Any]) -> None:
        now = time.time()
        record = {"source": self.ids[index], "seq": self.seq[index], "time": time_s, "at": now,
                  "latency_ms": {"total": (now - decoded_at) * 1000.0}, **data}  # fmt: skip
        self.outs[index].write(json.dumps(record, default=_plain) + "\n")
        if self.seq[index] == 0:
            self.outs[index].flush()  # the first line tells `run_peer` that this stream is under way
        self.seq[index] += 1

    def close(self) -> None:
        for out in self.outs:
            out.close()


class ModelLoop:
    """The model on one thread (the job's task, its engine on one ONNX Runtime thread, as the work
    alone runs them) and its input buffer: a decoded frame in; its BGR picture and the task's result
    out. A thread that runs the model has one of its own (the file peer's too)."""

    def __init__(self, config: Any) -> None:
        from bench.limit import _Model

        self.model = _Model(config, 1)
        self.buffer: Any = None

    def run(self, frame: Any) -> tuple[Any, Any]:
        import numpy as np

        task, engine = self.model.task, self.model.engine
        if self.buffer is None:
            spec = task.input_spec(frame.width, frame.height)
            self.buffer = np.empty(tuple(int(d) for d in spec.shape if d is not None), spec.dtype)
        image = frame.to_ndarray(format="bgr24")
        meta = task.preprocess(image, self.buffer)
        outputs = engine.infer({task.input_name: self.buffer}, task.output_names)
        return image, task.postprocess(outputs, meta, frame.width, frame.height)

    def close(self) -> None:
        self.model.close()


def peer_main(
    config_path: str, uri: str, out_paths: Sequence[str], staleness_ms: float, ids: Sequence[str], model_threads: int = 1
) -> int:
    """The plain loop of one or more streams of `uri` (a reader thread each, `out_paths` and `ids` in
    the same order) on `model_threads` model threads, until SIGTERM (0) or every stream ends (0, or 1
    when one failed)."""
    from framewire import validate_config

    config = validate_config(json.loads(Path(config_path).read_text(encoding="utf-8")), "bench budget peer")
    loops = [ModelLoop(config) for _ in range(model_threads)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    newest = Newest(len(out_paths))
    for index in range(len(out_paths)):
        threading.Thread(target=read, args=(uri, newest, index, {"rtsp_transport": "tcp"}), daemon=True).start()
    lines = Lines(out_paths, ids, staleness_ms)
    try:
        if model_threads == 1:
            _in_turn(loops[0], newest, lines, stop)
        else:
            busy: set[int] = set()
            failed: list[BaseException] = []
            threads = [threading.Thread(target=_pooled, args=(loop, newest, lines, stop, busy, failed)) for loop in loops]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if failed:
                raise failed[0]
    finally:
        lines.close()
    seq, stale = lines.seq, lines.stale
    for index, path in enumerate(out_paths):
        summary = {"source": ids[index], "frames": seq[index], "stale": stale[index],
                   "dropped": newest.dropped[index], "error": newest.errors[index]}  # fmt: skip
        summary_path(path).write_text(json.dumps(summary), encoding="utf-8")
        if newest.errors[index]:
            print(f"bench budget peer {ids[index]}: {newest.errors[index]}", file=sys.stderr)
    os._exit(1 if any(newest.errors) else 0)  # the reader threads may sit in FFmpeg's read: not joined


def _in_turn(loop: ModelLoop, newest: Newest, lines: Lines, stop: threading.Event) -> None:
    """One model thread: the newest frame of every stream, in turn."""
    while not stop.is_set():
        taken = newest.take(WAIT_S)
        if not taken and all(newest.ended):
            return
        for index, (frame, time_s), decoded_at in taken:
            if not lines.is_stale(index, decoded_at):
                lines.write(index, time_s, decoded_at, loop.run(frame)[1].data)


def _pooled(
    loop: ModelLoop, newest: Newest, lines: Lines, stop: threading.Event, busy: set[int], failed: list[BaseException]
) -> None:
    """One of the `pool` layout's model threads: the stream served longest ago. A failure stops
    every thread and is raised by the main thread (`failed`)."""
    try:
        _take_in_turn(loop, newest, lines, stop, busy)
    except BaseException as exc:  # noqa: BLE001 - the main thread raises it
        failed.append(exc)
        stop.set()


def _take_in_turn(loop: ModelLoop, newest: Newest, lines: Lines, stop: threading.Event, busy: set[int]) -> None:
    while not stop.is_set():
        taken = newest.take_one(WAIT_S, busy)
        if taken is None:
            if all(newest.ended):
                return
            continue
        index, (frame, time_s), decoded_at = taken
        try:
            if not lines.is_stale(index, decoded_at):
                lines.write(index, time_s, decoded_at, loop.run(frame)[1].data)
        finally:
            newest.release(index, busy)


def summary_path(out_path: str | Path) -> Path:
    """Where a stream's loop writes its totals when it ends: frames put out, replaced, stale."""
    return Path(f"{out_path}.summary.json")


LAYOUTS = ("stream", "core", "pool")
"""How the peer lays its streams out: a process a stream (one script a camera); a process a core
with a reader thread a stream, the frames of all of its streams run through the model in turn; or
one process, a reader thread a stream and a model thread a core."""


def run_peer(
    config: Any, uri: str, streams: int, seconds: float, staleness_ms: float, folder: Path, fps: float | None,
    layout: str = "stream", cores: int = 1,
) -> dict[str, Any]:
    """`streams` plain loops on `uri`, laid out by `layout` over processes (a process a stream, or
    `cores` processes); their CPU over `seconds` of wall time once every stream has put out a frame,
    and each stream's frames kept a second and latency in that window."""
    if layout not in LAYOUTS:
        raise ValueError(f"bench budget peer: layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / "peer-config.json"
    config_path.write_text(json.dumps(config.model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    outs = [folder / f"peer{i}.jsonl" for i in range(streams)]
    count = {"stream": streams, "core": max(1, min(cores, streams)), "pool": 1}[layout]
    model_threads = max(1, min(cores, streams)) if layout == "pool" else 1
    groups = [list(range(k, streams, count)) for k in range(count)]  # stream i in process i % count
    errors = [folder / f"peer-process{k}.err" for k in range(len(groups))]
    started = time.time()
    processes = []
    for group, error in zip(groups, errors):
        args = [sys.executable, "-m", "bench.live_peer", "--config", str(config_path), "--uri", uri,
                "--staleness-ms", str(staleness_ms), "--model-threads", str(model_threads)]  # fmt: skip
        for i in group:
            args += ["--out", str(outs[i]), "--id", f"peer{i}"]
        with error.open("w", encoding="utf-8") as err:
            processes.append(subprocess.Popen(args, cwd=harness.ROOT, env=harness.checkout_env(), stdout=subprocess.DEVNULL, stderr=err))
    out: dict[str, Any] = {"streams": streams, "layout": layout, "processes": len(processes), "startup_s": None}
    try:
        _wait_for_first(processes, outs, errors)
        out["startup_s"] = time.time() - started
        time.sleep(SETTLE_S)
        cpu0, t0 = _cpu(processes), time.time()
        time.sleep(seconds)
        cpu1, t1 = _cpu(processes), time.time()
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes = [_ended(p) for p in processes]
    records = [harness.read_jsonl(path) for path in outs]
    out.update(peer_stats(records, (t0, t1), fps), cpu_s=cpu1 - cpu0, window_s=t1 - t0)
    out["cores_used"] = out["cpu_s"] / out["window_s"]
    frames = out["frames_in_window"]
    out["ms_per_frame_out"] = out["cpu_s"] * 1000.0 / frames if frames else None
    out["exit_codes"] = codes
    summaries = [json.loads(summary_path(path).read_text(encoding="utf-8")) for path in outs if summary_path(path).exists()]
    out["stale"] = sum(int(s["stale"]) for s in summaries)
    out["replaced"] = sum(int(s["dropped"]) for s in summaries)
    return out


def _wait_for_first(processes: Sequence[Any], outs: Sequence[Path], errors: Sequence[Path]) -> None:
    """Until every stream has put out its first line; a process that ends first fails the run
    (`errors`: each process's stderr)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not all(path.exists() and path.stat().st_size > 0 for path in outs):
        for process, err in zip(processes, errors):
            if process.poll() is not None:
                said = err.read_text(encoding="utf-8").strip().splitlines()
                raise RuntimeError(f"bench budget peer: a process ended ({process.returncode}) "
                                   f"before every stream had put out a frame: {said[-1] if said else 'no message'}")  # fmt: skip
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench budget peer: no first frame from every stream in {START_TIMEOUT_S:.0f} s")
        time.sleep(0.1)


def _cpu(processes: Sequence[Any]) -> float:
    """The processes' CPU seconds so far, all together; one that is gone fails the run."""
    times = [harness.cpu_s(p.pid) for p in processes]
    if any(t is None for t in times):
        raise RuntimeError("bench budget peer: a process ended during the measured window")
    return sum(t for t in times if t is not None)


def _ended(process: Any) -> int:
    try:
        return int(process.wait(10))
    except subprocess.TimeoutExpired:
        process.kill()
        return int(process.wait())


def peer_stats(
    records: Sequence[Sequence[Mapping[str, Any]]], window: tuple[float, float], fps: float | None
) -> dict[str, Any]:
    """Per stream (frames kept a second, latency) over the lines written inside `window` (epoch
    seconds), and over all the streams as `budget_live.live_stats` gives framewire's."""
    start, end = window
    per = {}
    for index, lines in enumerate(records):
        inside = [r for r in lines if start <= r["at"] <= end]
        per[f"peer{index}"] = harness.stream_stats(inside, skip_s=0.0)
    rates = [p["fps"] for p in per.values() if p["fps"] is not None]
    p99 = [p["latency_p99_ms"] for p in per.values() if p["latency_p99_ms"] is not None]
    whole = len(rates) == len(per) and bool(per)
    return {
        "fps_min": min(rates) if whole else 0.0,
        "fps_median": harness.median(rates),
        "fps_max": max(rates) if rates else 0.0,
        "kept": sum(rates) / (len(per) * fps) if fps and whole else None,
        "latency_p99_ms_max": max(p99) if p99 else None,
        "frames_in_window": round(sum(rates) * (end - start)),
        "per_stream": per,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.live_peer", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the job's config, as JSON")
    parser.add_argument("--uri", required=True)
    parser.add_argument("--out", action="append", required=True, help="a stream's JSON lines (once a stream)")
    parser.add_argument("--id", action="append", help="a stream's id, in the order of --out")
    parser.add_argument("--staleness-ms", type=float, default=500.0)
    parser.add_argument("--model-threads", type=int, default=1, help="threads running the model (pool: a core each)")
    args = parser.parse_args(argv)
    ids = args.id or [f"peer{i}" for i in range(len(args.out))]
    if len(ids) != len(args.out):
        parser.error(f"{len(args.out)} --out but {len(ids)} --id: one of each a stream")
    if args.model_threads < 1:
        parser.error(f"--model-threads {args.model_threads}: at least 1")
    return peer_main(args.config, args.uri, args.out, args.staleness_ms, ids, args.model_threads)


if __name__ == "__main__":
    sys.exit(main())
