"""`tracing:`: a traced frame's spans from its header's timings (app.trace_spans), the config, the plan
it gives, and the tracer's spans as a real OTLP/HTTP receiver gets them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from framewire.app.compose.plan import build_plan
from framewire.app.trace_spans import QUEUE, Chain, frame_trace, parse_traceparent
from framewire.app.tracing import FrameTracer
from framewire.config import TracingConfig, load_config
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import Frame, traceparent
from tests.support.otlp import http_receiver

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "configs" / "default.yaml"
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID, ROOT_ID = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
FUSED = Chain(
    middle=(("preprocess", "infer", "postprocess", "composite"),),
    outputs=(("output0.video_file", "output1.jsonl"),),
    processes=frozenset({"outputs"}),
)
TIMINGS = {
    "decode": [100.000, 100.002],
    "preprocess": [100.010, 100.012],
    "infer": [100.012, 100.020],
    "postprocess": [100.020, 100.021],
    "composite": [100.021, 100.022],
    "outputs": [100.030, 100.036],
    "output0.video_file": [100.030, 100.035],
    "output1.jsonl": [100.035, 100.036],
}


def header(**more: Any) -> dict[str, Any]:
    return {"source": "cam", "seq": 7, "pts": 3003, "trace": TRACE, "ts": dict(TIMINGS), **more}


def test_a_fused_job_s_frame_has_a_root_and_a_span_for_each_stage_and_wait_under_it() -> None:
    trace = frame_trace(header(), FUSED)
    assert trace is not None and trace.trace_id == TRACE_ID
    root, *children = trace.spans
    assert (root.name, root.span_id, root.parent_id) == ("frame", ROOT_ID, None)
    assert (root.start_s, root.end_s) == (100.000, 100.036)
    assert root.attributes == {"framewire.source": "cam", "framewire.seq": 7, "framewire.pts": 3003}
    assert [(s.name, s.kind, s.start_s, s.end_s) for s in children] == [
        ("decode", "decode", 100.000, 100.002),
        (QUEUE + "preprocess", "queue", 100.002, 100.010),  # the hop from decode to the infer process
        ("preprocess", "stage", 100.010, 100.012),
        ("infer", "stage", 100.012, 100.020),
        ("postprocess", "stage", 100.020, 100.021),
        ("composite", "stage", 100.021, 100.022),
        (QUEUE + "output0.video_file", "queue", 100.022, 100.030),
        ("output0.video_file", "output", 100.030, 100.035),
        ("output1.jsonl", "output", 100.035, 100.036),
    ]  # `outputs` (the fused outputs' own span, its members') is left out
    assert {s.parent_id for s in children} == {ROOT_ID}
    assert len({s.span_id for s in trace.spans}) == len(trace.spans)
    assert all(s.attributes["framewire.seq"] == 7 for s in children)


def test_apart_each_process_waits_in_its_own_queue_and_each_output_from_the_last_stage() -> None:
    chain = Chain(middle=(("preprocess",), ("infer",)), outputs=(("output0.jsonl",), ("output1.zmq",)))
    ts = {"decode": [1.0, 1.5], "preprocess": [2.0, 3.0], "infer": [4.0, 6.0], "output0.jsonl": [7.0, 8.0],
          "output1.zmq": [6.5, 6.75]}  # fmt: skip
    trace = frame_trace({"source": "cam", "seq": 0, "trace": TRACE, "ts": ts}, chain)
    assert trace is not None
    assert [(s.name, s.start_s, s.end_s) for s in trace.spans[1:]] == [
        ("decode", 1.0, 1.5),
        (QUEUE + "preprocess", 1.5, 2.0),
        ("preprocess", 2.0, 3.0),
        (QUEUE + "infer", 3.0, 4.0),
        ("infer", 4.0, 6.0),
        (QUEUE + "output0.jsonl", 6.0, 7.0),
        ("output0.jsonl", 7.0, 8.0),
        (QUEUE + "output1.zmq", 6.0, 6.5),
        ("output1.zmq", 6.5, 6.75),
    ]
    assert (trace.spans[0].start_s, trace.spans[0].end_s) == (1.0, 8.0)


def test_a_stage_that_failed_leaves_no_span_and_the_next_wait_starts_where_the_frame_was() -> None:
    chain = Chain(middle=(("preprocess",), ("infer",)), outputs=(("output0.jsonl",),))
    ts = {"decode": [1.0, 1.5], "preprocess": [2.0, 3.0], "output0.jsonl": [5.0, 6.0]}  # infer failed
    trace = frame_trace({"source": "cam", "seq": 0, "trace": TRACE, "ts": ts, "error": "infer: boom"}, chain)
    assert trace is not None
    assert [(s.name, s.start_s) for s in trace.spans[1:]][-2:] == [(QUEUE + "output0.jsonl", 3.0), ("output0.jsonl", 5.0)]
    assert trace.spans[0].attributes["framewire.error"] == "infer: boom"


def test_a_stage_the_chain_does_not_name_still_gets_its_span() -> None:
    ts = {"decode": [1.0, 1.5], "infer": [2.0, 3.0], "output0.jsonl": [4.0, 5.0]}
    trace = frame_trace({"source": "cam", "seq": 0, "trace": TRACE, "ts": ts}, Chain((), (("output0.jsonl",),)))
    assert trace is not None
    assert sorted(s.name for s in trace.spans) == sorted(["frame", "decode", "infer", "output0.jsonl", QUEUE + "output0.jsonl"])


@pytest.mark.parametrize("value", [None, "", "00-" + "0" * 32 + "-b7ad6b7169203331-01", TRACE.replace("00-", "01-"),
                                   TRACE[:-1], TRACE.replace("0af7", "xyz0"), 5])  # fmt: skip
def test_a_frame_without_a_valid_trace_context_is_not_traced(value: Any) -> None:
    assert parse_traceparent(value) is None
    assert frame_trace(header(trace=value), FUSED) is None


def test_the_trace_context_is_new_for_each_frame_and_travels_in_the_header() -> None:
    one, two = traceparent(), traceparent()
    assert one != two and parse_traceparent(one) is not None
    frame = Frame("cam", 3, 0, 0.0, 4, 4, trace=one)
    assert Frame.from_wire(frame.to_header(), {}, None).trace == one
    assert "trace" not in Frame("cam", 3, 0, 0.0, 4, 4).to_header()


def test_the_config_section_checks_its_keys_in_one_line() -> None:
    assert TracingConfig() == TracingConfig(enabled=False, protocol="grpc", sample_every=100)
    with pytest.raises(ConfigError, match=r"tracing\.endpoint: .*expected an http:// or https:// URL"):
        load_config(DEFAULT, ["tracing.endpoint=localhost:4317"])
    with pytest.raises(ConfigError, match=r"tracing\.sample_every"):
        load_config(DEFAULT, ["tracing.sample_every=0"])
    with pytest.raises(ConfigError, match=r"tracing\.sampling"):
        load_config(DEFAULT, ["tracing.sampling=1"])


def test_off_the_plan_has_no_hook_and_the_sources_trace_nothing_on_every_source() -> None:
    off = build_plan(load_config(DEFAULT))
    assert off.frame_hook is None and off.sources[0].options.trace_every is None
    on = build_plan(load_config(DEFAULT, ["tracing.enabled=true", "tracing.sample_every=10"]))
    assert isinstance(on.frame_hook, FrameTracer) and on.sources[0].options.trace_every == 10
    assert on.frame_hook.chain == Chain(
        middle=(("preprocess", "infer", "postprocess", "composite"),),
        outputs=(("output0.video_file", "output1.jsonl", "output2.zmq"),),
        processes=frozenset({"outputs"}),
    )
    added = on.make_source({"id": "late", "uri": str(ROOT / "assets/videos/carphone_pristine.mp4")})  # type: ignore[misc]
    assert added.options.trace_every == 10


def test_off_nothing_of_opentelemetry_is_imported() -> None:
    code = (
        "import sys; from framewire.config import load_config; from framewire.app.compose.plan import build_plan; "
        f"build_plan(load_config({str(DEFAULT)!r})); print(any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False"]


def test_the_tracer_sends_a_frame_s_spans_to_an_otlp_http_receiver() -> None:
    with http_receiver() as (endpoint, received):
        tracer = FrameTracer(TracingConfig(enabled=True, endpoint=endpoint, protocol="http/protobuf",
                                           service_name="cams"), FUSED)  # fmt: skip
        tracer.frame_done({"source": "cam", "seq": 8, "ts": TIMINGS})  # not traced: nothing
        tracer.frame_done(header())
        tracer.close()
        spans = received.all
    assert tracer.exported == 1
    assert len(spans) == 10 and {s.trace_id for s in spans} == {f"{TRACE_ID:032x}"}
    root = next(s for s in spans if s.name == "frame")
    assert (root.span_id, root.parent_id, root.service) == (f"{ROOT_ID:016x}", "", "cams")
    assert {s.parent_id for s in spans if s is not root} == {root.span_id}
    infer = next(s for s in spans if s.name == "infer")
    assert (infer.start_ns, infer.end_ns) == (int(100.012 * 1e9), int(100.020 * 1e9))
    assert infer.attributes["framewire.kind"] == "stage" and infer.attributes["framewire.source"] == "cam"


def test_enabled_without_the_extra_is_one_line_naming_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from framewire.app import tracing

    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"^tracing\.enabled: needs the otel extra \(pip install 'framewire\[otel\]'\)"):
        tracing.check_installed(TracingConfig(enabled=True))
