"""`tracing:` on, against a real OTLP receiver the test starts: the default job run by the CLI sends
each frame's trace (a span for decode, every fused member and every output, each under the frame's
root span, in time order); the stages apart, over OTLP/HTTP, 1 frame in 2 is traced."""

from __future__ import annotations

from pathlib import Path

import pytest

import framewire
from tests.e2e.helpers import ROOT, run_cli
from tests.support.otlp import ReceivedSpan, Spans, grpc_receiver, http_receiver
from tests.support.ports import free_port

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

DEFAULT = str(ROOT / "configs" / "default.yaml")
FRAMES = 4
MEMBERS = ["preprocess", "infer", "postprocess", "composite"]
OUTPUTS = ["output0.video_file", "output1.jsonl", "output2.zmq"]


def _overrides(folder: Path, endpoint: str, *more: str) -> list[str]:
    return [
        f"sources.0.max_frames={FRAMES}",
        f"outputs.0.path={folder}/{{source_id}}.mp4",
        f"outputs.1.path={folder}/{{source_id}}.jsonl",
        f"outputs.2.endpoint=tcp://127.0.0.1:{free_port()}",
        "tracing.enabled=true",
        f"tracing.endpoint={endpoint}",
        *more,
    ]


def _traces(spans: Spans, frames: int) -> dict[int, list[ReceivedSpan]]:
    """Each frame's spans by its seq, once every frame's root came (the exporter sends in batches)."""
    got = spans.all
    by_trace: dict[str, list[ReceivedSpan]] = {}
    for span in got:
        by_trace.setdefault(span.trace_id, []).append(span)
    roots = {s.trace_id: s for s in got if s.name == "frame"}
    assert len(roots) == frames, f"{len(roots)} frame traces, {len(got)} spans"
    return {int(roots[t].attributes["framewire.seq"]): sorted(by_trace[t], key=lambda s: s.start_ns) for t in roots}


def _check_frame(spans: list[ReceivedSpan], stages: list[str], outputs: list[str], waits: list[str]) -> None:
    root = next(s for s in spans if s.name == "frame")
    children = [s for s in spans if s is not root]
    assert root.parent_id == "" and root.service == "framewire"
    assert {s.parent_id for s in children} == {root.span_id}  # every span under the frame's root
    names = [s.name for s in children]
    assert sorted(names) == sorted(["decode", *stages, *outputs, *(f"queue {w}" for w in waits)])
    by_name = {s.name: s for s in children}
    chain = [by_name[name] for name in ["decode", *stages]]
    for before, after in zip(chain, chain[1:], strict=False):  # the middle stages one after the other
        assert before.start_ns <= before.end_ns <= after.start_ns <= after.end_ns, (before.name, after.name)
    for name in outputs:  # each output after the last stage
        assert chain[-1].end_ns <= by_name[name].start_ns <= by_name[name].end_ns
    assert root.start_ns == by_name["decode"].start_ns and root.end_ns == max(s.end_ns for s in children)


def test_the_default_job_s_frames_each_send_a_trace_with_every_stage(tmp_path: Path) -> None:
    with grpc_receiver() as (endpoint, spans):
        done = run_cli("run", "-c", DEFAULT, *(a for o in _overrides(tmp_path, endpoint, "tracing.sample_every=1")
                                                for a in ("--set", o)), "--no-progress", timeout=180)  # fmt: skip
        assert done.returncode == 0, done.stderr
        traces = _traces(spans, FRAMES)  # the job's end waited for the last export
    assert sorted(traces) == list(range(FRAMES))
    for seq in range(FRAMES):
        _check_frame(traces[seq], MEMBERS, OUTPUTS, ["preprocess", OUTPUTS[0]])
    frame = traces[2]
    assert {s.attributes["framewire.source"] for s in frame} == {"carphone"}
    assert {s.attributes["framewire.kind"] for s in frame} == {"frame", "decode", "queue", "stage", "output"}


def test_apart_over_http_one_frame_in_two_is_traced_with_a_wait_before_each_stage(tmp_path: Path) -> None:
    more = ("tracing.sample_every=2", "tracing.protocol=http/protobuf", "stages.fuse=false", "stages.fuse_outputs=false")
    with http_receiver() as (endpoint, spans):
        config = framewire.load_config(DEFAULT, _overrides(tmp_path, endpoint, *more))
        report = framewire.start(config).wait(timeout=180)
        assert (report.exit_code, report.frames) == (0, {"carphone": FRAMES})
        traces = _traces(spans, FRAMES // 2)
    assert sorted(traces) == [0, 2]
    for spans_of in traces.values():
        _check_frame(spans_of, MEMBERS, OUTPUTS, [*MEMBERS, *OUTPUTS])


def test_in_the_live_layout_each_frame_read_by_its_worker_sends_the_same_trace(tmp_path: Path) -> None:
    more = ("tracing.sample_every=1", "stages.layout=live", "sources.0.policy=drop_oldest", "sources.0.realtime=true")
    with grpc_receiver() as (endpoint, spans):
        config = framewire.load_config(DEFAULT, _overrides(tmp_path, endpoint, *more))
        report = framewire.start(config).wait(timeout=180)
        assert report.exit_code == 0, report.error
        kept = report.frames["carphone"]  # a paced source drops what the model had no time for
        assert kept + report.dropped["carphone"] == FRAMES and kept > 0
        traces = _traces(spans, kept)
    for spans_of in traces.values():
        _check_frame(spans_of, MEMBERS, OUTPUTS, ["preprocess", OUTPUTS[0]])
