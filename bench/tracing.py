"""`bench tracing -c FILE`: what `tracing:` costs the daemon, off, on at 1 frame in 1 and at 1 in 100.

The config's job is run through `framewire.start` in each case, alternated over `--repeat` rounds
(after one warm-up run), with spans sent over OTLP/gRPC to a real receiver: OpenTelemetry's
TraceService (grpcio, opentelemetry-proto) in a process of its own, so that its CPU is not the
daemon's. Measured per run: frames per second, and the CPU time of the daemon's own process a frame
(the hub, which builds each traced frame's spans, and the exporter's thread; the workers, whose
only extra work is a trace id for each traced frame, are other processes), and the spans the
receiver got. Medians; JSON and a table. Needs the otel extra.
"""

from __future__ import annotations

import argparse
import functools
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import Any

from bench import harness
from bench.pipeline import redirect_outputs

CASES = (("off", None), ("1 in 1", 1), ("1 in 100", 100))

RECEIVER = """
import sys, threading
from concurrent import futures
import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb, trace_service_pb2_grpc as rpc
count = [0]
lock = threading.Lock()
class Service(rpc.TraceServiceServicer):
    def Export(self, request, context):
        n = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        with lock:
            count[0] += n
        return pb.ExportTraceServiceResponse()
server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
rpc.add_TraceServiceServicer_to_server(Service(), server)
print(server.add_insecure_port("127.0.0.1:0"), flush=True)
server.start()
for line in sys.stdin:  # each line asks for the count so far
    with lock:
        print(count[0], flush=True)
"""
"""The receiver: prints its port, then the spans received so far for each line it reads."""


def add_arguments(
    parser: argparse.ArgumentParser, add_config_args: Callable[[argparse.ArgumentParser], None]
) -> None:
    add_config_args(parser)
    parser.add_argument("--frames", type=int, default=300, help="frames of the config's first source per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (after one warm-up run); medians")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")


def run(args: argparse.Namespace) -> int:
    from framewire import load_config
    from framewire.components import resolve_inputs

    folder = Path(tempfile.mkdtemp(prefix="fw-bench-tracing-"))  # the outputs' files and sockets
    overrides = [*args.overrides, f"sources.0.max_frames={args.frames}", "sources.0.realtime=false"]
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)  # fmt: skip
    assert receiver.stdout is not None and receiver.stdin is not None
    try:
        endpoint = f"http://127.0.0.1:{int(receiver.stdout.readline())}"
        received = functools.partial(_received, receiver)
        run_job = functools.partial(job, load_config, resolve_inputs, args.config, overrides, folder, endpoint,
                                    received)  # fmt: skip
        run_job(None)  # warm-up: the fork server's imports, the page cache
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in CASES}
        for _ in range(max(1, args.repeat)):  # alternated, so a change in the machine's load hits each
            for name, every in CASES:
                runs[name].append(run_job(every))
    finally:
        receiver.stdin.close()
        receiver.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
    result: dict[str, Any] = {
        "benchmark": "tracing",
        "machine": harness.machine(),
        "config": str(args.config),
        "overrides": overrides,
        "cases": [{**harness.median_of(runs[name]), "case": name, "runs": runs[name]} for name, _ in CASES],
    }
    harness.write_json(args.json, result)
    harness.say(format_table(result))
    return 1 if any(r["exit_code"] for case in result["cases"] for r in case["runs"]) else 0


def _received(receiver: subprocess.Popen[str]) -> int:
    assert receiver.stdin is not None and receiver.stdout is not None
    receiver.stdin.write("\n")
    receiver.stdin.flush()
    return int(receiver.stdout.readline())


def job(
    load: Any, resolve: Any, config_path: str, overrides: Sequence[str], folder: Path, endpoint: str,
    received: Callable[[], int], every: int | None,
) -> dict[str, Any]:
    """One run of the job, traced 1 frame in `every` (None: tracing off)."""
    import framewire

    tracing = ["tracing.enabled=false"] if every is None else [
        "tracing.enabled=true", f"tracing.sample_every={every}", f"tracing.endpoint={endpoint}"]  # fmt: skip
    config = redirect_outputs(resolve(load(config_path, [*overrides, *tracing]), [harness.ROOT]), folder)
    spans_before = received()
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    report = framewire.start(config).wait(600)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    frames = sum(report.frames.values())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "every": every,
        "frames": frames,
        "fps": frames / elapsed if elapsed > 0 else None,
        "daemon_process_cpu_ms_per_frame": cpu * 1000 / frames if frames else None,
        "spans": received() - spans_before,  # the job's end sent its last spans
        "exit_code": report.exit_code,
    }


def format_table(result: dict[str, Any]) -> str:
    return "Tracing off and on; the daemon's own process (hub, exporter):\n" + harness.table(
        ["tracing", "frames", "fps", "daemon CPU ms/frame", "spans received"],
        [[c["case"], c["frames"], c["fps"], c["daemon_process_cpu_ms_per_frame"], c["spans"]] for c in result["cases"]],
    )
