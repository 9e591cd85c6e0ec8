"""A real OTLP trace receiver for the tests: OpenTelemetry's TraceService over gRPC (grpcio, the
service and messages of opentelemetry-proto), or its HTTP/protobuf endpoint (`POST /v1/traces`) on
the standard library's HTTP server; both bound to port 0 on localhost, both keeping every span they
are sent, decoded, for the test to read.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    service: str


class Spans:
    """What a receiver got: every span of every export, in order; `wait` for a count."""

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._changed = threading.Condition()

    def add_request(self, request: Any) -> None:
        got = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    got.append(ReceivedSpan(
                        span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(), span.name,
                        span.start_time_unix_nano, span.end_time_unix_nano,
                        {a.key: _value(a.value) for a in span.attributes}, str(resource.get("service.name")),
                    ))  # fmt: skip
        with self._changed:
            self._spans.extend(got)
            self._changed.notify_all()

    def wait(self, count: int, timeout_s: float) -> list[ReceivedSpan]:
        """The spans once at least `count` came (or what came within `timeout_s`)."""
        with self._changed:
            self._changed.wait_for(lambda: len(self._spans) >= count, timeout_s)
            return list(self._spans)

    @property
    def all(self) -> list[ReceivedSpan]:
        with self._changed:
            return list(self._spans)


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@contextmanager
def grpc_receiver() -> Iterator[tuple[str, Spans]]:
    """A TraceService on a free port: (its endpoint `http://127.0.0.1:PORT`, what it receives)."""
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    spans = Spans()

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # the service's name
            spans.add_request(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", spans
    finally:
        server.stop(grace=None).wait(5)


@contextmanager
def http_receiver() -> Iterator[tuple[str, Spans]]:
    """OTLP/HTTP's trace endpoint on a free port: (`http://127.0.0.1:PORT/v1/traces`, what it receives)."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    spans = Spans()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # the standard library's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_error(404 if self.path != "/v1/traces" else 415)
                return
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            spans.add_request(request)
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", spans
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
