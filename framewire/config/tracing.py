"""`tracing:`: OpenTelemetry traces of sampled frames across the stages (docs: Guides, Tracing)."""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import Field, field_validator

from framewire.config.base import _Model

Protocol = Literal["grpc", "http/protobuf"]
"""The OTLP protocols, spelled as OpenTelemetry's OTEL_EXPORTER_OTLP_PROTOCOL spells them."""
GRPC: Final = "grpc"


class TracingConfig(_Model):
    """Off by default; on, 1 in `sample_every` frames of each source is traced and exported by OTLP
    from the supervisor (needs the otel extra: `pip install 'framewire[otel]'`)."""

    enabled: bool = Field(
        default=False,
        description="Trace frames: a span for each stage a sampled frame goes through (decode, each "
        "wait in a queue, each stage or fused member, each output) under one root span per frame, "
        "exported by OTLP. Off: nothing is imported and nothing is done per frame.",
    )
    endpoint: str | None = Field(
        default=None,
        description="Where the OTLP receiver (a collector, Jaeger, Tempo) listens: "
        "http://host:4317 for grpc, http://host:4318/v1/traces for http/protobuf (https:// for "
        "TLS); null: OpenTelemetry's own default, or its OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / "
        "OTEL_EXPORTER_OTLP_ENDPOINT environment variables.",
    )
    protocol: Protocol = Field(
        default=GRPC, description="OTLP over gRPC (port 4317 by convention) or HTTP with protobuf (4318)."
    )
    sample_every: int = Field(
        default=100,
        ge=1,
        le=1_000_000,
        description="Trace 1 frame in this many of each source (those whose seq it divides); 1: every "
        "frame. A traced frame costs the supervisor's process about 1.5 ms of CPU (docs: Guides, Tracing).",
    )
    service_name: str = Field(
        default="framewire",
        min_length=1,
        max_length=128,
        description="The `service.name` of the spans' resource: how the trace viewer lists this daemon.",
    )
    timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=120,
        description="How long one export may take, and how long the job's end waits for the last spans.",
    )

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value
