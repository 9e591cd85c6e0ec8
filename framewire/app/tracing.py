"""`tracing:` on: the sampled frames' spans, exported by OTLP from the supervisor (docs: Guides, Tracing).

The runtime knows nothing of OpenTelemetry. Each source's decode worker gives 1 frame in
`sample_every` a trace context (`SourceOptions.trace_every`, `Frame.trace`), every worker carries it
on in the frame's header beside the stages' timings, and when every output has written the frame the
hub hands its header to the `Plan.frame_hook` made here. That hook builds the frame's spans from the
timings (framewire.app.trace_spans) and hands them to OpenTelemetry's BatchSpanProcessor, whose own
thread sends them to the OTLP receiver: the hub's loop never waits on the network. With tracing off,
nothing here is imported (opentelemetry included) and the hub does nothing per frame for it.

The spans are made as finished spans (the SDK's `ReadableSpan`, with the ids decode chose and the
times the stages stamped) rather than started and ended through a tracer: their times are in the
past, and their ids are the frame's own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from framewire.app.trace_spans import Chain, FrameTrace, frame_trace
from framewire.config.tracing import GRPC, TracingConfig
from framewire.pipeline.errors import ConfigError, one_line

log = logging.getLogger(__name__)

SCOPE = "framewire"
"""The instrumentation scope the spans carry."""
QUEUE_SIZE = 65536
"""Spans the processor holds before it drops (and logs that it dropped): 8 spans a frame at 1 in 1,
a few hundred frames a second, for the 1 s between two exports and a receiver a few seconds slow."""
EXPORT_EVERY_MS = 1000


def check_installed(config: TracingConfig) -> None:
    """ConfigError naming `tracing.enabled` when the otel extra is not installed."""
    if not config.enabled:
        return
    try:
        import opentelemetry.sdk.trace
        if config.protocol == GRPC:
            import opentelemetry.exporter.otlp.proto.grpc.trace_exporter
        else:
            import opentelemetry.exporter.otlp.proto.http.trace_exporter
    except ImportError as exc:
        raise ConfigError(
            f"tracing.enabled: needs the otel extra (pip install 'framewire[otel]'): {one_line(exc)}"
        ) from None


def _exporter(config: TracingConfig) -> Any:
    if config.protocol == GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        return Grpc(endpoint=config.endpoint, timeout=config.timeout_s)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http(endpoint=config.endpoint, timeout=config.timeout_s)


class FrameTracer:
    """The `Plan.frame_hook` of a job with tracing on: spans of each traced frame, to the exporter.

    The exporter and its thread are made at the first traced frame, in the hub's process, so that a
    plan built and never run (`validate`, a benchmark's) starts none."""

    def __init__(self, config: TracingConfig, chain: Chain) -> None:
        self.config = config
        self.chain = chain
        self._processor: Any = None
        self._convert: Any = None
        self.exported = 0
        """Frames whose spans went to the processor (which sends them on its own thread)."""
        self._failed = False

    def frame_done(self, header: Mapping[str, Any]) -> None:
        if "trace" not in header:
            return
        try:
            trace = frame_trace(header, self.chain)
            if trace is None:
                return
            if self._processor is None:
                self._start()
            for span in self._convert(trace):
                self._processor.on_end(span)
            self.exported += 1
        except Exception as exc:  # the hub's loop must go on: said once, then quiet
            if not self._failed:
                self._failed = True
                log.error("tracing: cannot export the spans of source %s frame %s: %s",
                          header.get("source"), header.get("seq"), one_line(exc))

    def close(self) -> None:
        """Send the spans still held (up to `timeout_s`) and stop the exporter's thread."""
        if self._processor is None:
            return
        try:
            self._processor.shutdown()
        except Exception as exc:
            log.error("tracing: the last spans could not be sent: %s", one_line(exc))
        self._processor = None

    def _start(self) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self._processor = BatchSpanProcessor(
            _exporter(self.config),
            max_queue_size=QUEUE_SIZE,
            schedule_delay_millis=EXPORT_EVERY_MS,
            export_timeout_millis=self.config.timeout_s * 1000.0,
        )
        self._convert = _Converter(Resource.create({"service.name": self.config.service_name}))
        log.info("tracing: 1 frame in %d of each source, to %s over %s", self.config.sample_every,
                 self.config.endpoint or "the OTLP default endpoint", self.config.protocol)


class _Converter:
    """A `FrameTrace` as the SDK's finished spans."""

    def __init__(self, resource: Any) -> None:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, TraceFlags

        self.resource = resource
        self.scope = InstrumentationScope(SCOPE)
        self.readable, self.context = ReadableSpan, SpanContext
        self.flags = TraceFlags(TraceFlags.SAMPLED)

    def __call__(self, trace: FrameTrace) -> list[Any]:
        out = []
        for span in trace.spans:
            context = self.context(trace.trace_id, span.span_id, is_remote=False, trace_flags=self.flags)
            parent = None
            if span.parent_id is not None:
                parent = self.context(trace.trace_id, span.parent_id, is_remote=False, trace_flags=self.flags)
            attributes = {**span.attributes, "framewire.kind": span.kind}
            out.append(self.readable(
                span.name,
                context=context,
                parent=parent,
                resource=self.resource,
                attributes=attributes,
                instrumentation_scope=self.scope,
                start_time=int(span.start_s * 1e9),
                end_time=int(span.end_s * 1e9),
            ))
        return out


def frame_hook(config: TracingConfig, chain: Chain) -> FrameTracer | None:
    """The plan's frame hook for `tracing:`, None when it is off (ConfigError: the extra is missing)."""
    if not config.enabled:
        return None
    check_installed(config)
    return FrameTracer(config, chain)
