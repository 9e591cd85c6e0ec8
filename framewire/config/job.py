"""The whole config (`Config`) and its job-wide parts: stages, transport and HTTP."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from framewire.pipeline.paths import fields as paths_fields
from framewire.config.analytics import SourceAnalyticsConfig
from framewire.config.base import _Model
from framewire.config.cascade import SecondaryConfig, TrackingConfig
from framewire.config.engine import EngineConfig, ModelConfig
from framewire.config.fleet import FleetConfig
from framewire.config.outputs import CompositeConfig, JsonlOutput, Output, VideoFileOutput, ZmqOutput
from framewire.config.sources import Source
from framewire.config.steps import StepConfig
from framewire.config.tracing import TracingConfig

PREPROCESS, INFER, POSTPROCESS = "preprocess", "infer", "postprocess"
TRACK, SECONDARY, COMPOSITE = "track", "secondary", "composite"
"""The built-in stages' names, as their workers, metrics and latencies are called (framewire.app.compose
lists the job's stages; the runtime reads their specs, never these names)."""
MODEL_STAGES = (PREPROCESS, INFER, POSTPROCESS, TRACK, SECONDARY, COMPOSITE)
"""The built-in stages after the steps, in frame order (a frame record's latencies read in this order)."""
OUTPUTS = "outputs"
"""Every output in one process (`stages.fuse_outputs`)."""


def output_name(index: int, kind: str) -> str:
    """An output's stage name: `output0.video_file`, `output1.jsonl`, ..."""
    return f"output{index}.{kind}"


class StageConfig(_Model):
    workers: int = Field(default=1, ge=1, le=64, description="Processes running this stage.")


class StagesConfig(_Model):
    preprocess: StageConfig = Field(default_factory=StageConfig, description="Preprocess stage.")
    postprocess: StageConfig = Field(default_factory=StageConfig, description="Postprocess stage.")
    composite: StageConfig = Field(default_factory=StageConfig, description="Composite stage.")
    track: StageConfig = Field(
        default_factory=StageConfig,
        description="Tracking stage: each source sticks to one worker, so more workers help only with "
        "more sources.",
    )
    secondary: StageConfig = Field(
        default_factory=StageConfig,
        description="Secondary models stage (one process runs every secondary model; with "
        "reinfer_every its sources stick to one worker, as tracking's do).",
    )
    fuse: bool = Field(
        default=False,
        description="Run preprocess, postprocess, track, secondary and composite inside each infer process "
        "instead of processes of their own (their `workers` are then unused): fewer hops per frame, "
        "faster when those stages are light and cores are few (docs/benchmarks.md, Fused stages).",
    )
    fuse_outputs: bool = Field(
        default=False,
        description="Run every output in one process instead of one process each: fewer hops per "
        "frame; an output that is slow holds the others up.",
    )
    layout: Literal["default", "live"] = Field(
        default="default",
        description="How live sources (a drop policy) reach the model. default: each source has a decode "
        "process that hands its frames to the hub, which sends them to an infer worker. live: the infer "
        "workers share the live sources out and each decodes its own share, running the model on the "
        "newest frame of the source that waited longest; no decode process and two hops fewer a frame "
        "(implies stages.fuse; block sources keep their decode process either way; "
        "docs/guides/scaling.md, The live layout).",
    )
    frame_format: Literal["auto", "bgr"] = Field(
        default="auto",
        description="How frames wait in the frame pool: auto keeps them as decoded, YUV 4:2:0, when "
        "every stage takes that (the composites are blur or pixelate, the outputs video_file, jsonl, "
        "mqtt, kafka, webhook or zmq without jpeg, no steps or secondary models) and there is a "
        "video output (x264 takes them as they are: two full-frame conversions fewer) or the model "
        "scales a source's frames to half or a third (1280x720 or 1920x1080 to 640x360: the planes are "
        "scaled, then converted at the model's size); else BGR. The model sees the same pixels "
        "either way, within a level. bgr: always BGR (docs/results/history.md, Page faults).",
    )
    stall_timeout_s: float | None = Field(
        default=60.0,
        gt=0,
        description="A worker that has held a frame this long without answering is taken as hung: "
        "it is killed, counted (framewire_worker_stalls_total) and restarted like a worker that "
        "died, and its frames go to the next worker. null: never.",
    )
    on_frame_error: Literal["skip", "fail"] = Field(
        default="skip",
        description="A frame a stage fails on: skip passes it on unprocessed (counted, and the "
        "job exits 1); fail ends the job at once.",
    )


REMOVED_TRANSPORT_KEYS = (
    "listen", "remote_stages", "remote_timeout_s", "remote_wait_s", "curve_secret_key", "curve_clients", "allow_plaintext"
)
"""The keys of the retired tcp:// listener for stage workers on other hosts (framewire 0.1)."""


class TransportConfig(_Model):
    slots_per_source: int = Field(
        default=16, ge=2, le=1024, description="Frame-pool slots per source: frames in flight."
    )
    credits_per_worker: int = Field(
        default=2, ge=1, le=64, description="Frames a worker may hold at once (1 working, rest queued)."
    )
    ipc_dir: str | None = Field(
        default=None, description="Folder for the ipc:// sockets; a fresh temporary one by default."
    )
    shutdown_timeout_s: float = Field(
        default=10.0, gt=0, description="On SIGINT/SIGTERM: how long to drain before stopping hard."
    )
    max_restarts: int = Field(
        default=5, ge=0, description="Restarts of one stage's workers per minute before the job fails."
    )

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: Any) -> Any:
        """A config written for the remote stage workers fails on their keys, saying what replaced them."""
        if isinstance(data, dict):
            for key in REMOVED_TRANSPORT_KEYS:
                if key in data:
                    curve = "; CurveZMQ stays on zmq outputs and sources" if "curve" in key or "plain" in key else ""
                    raise ValueError(
                        f"transport.{key}: removed after framewire 0.1 with the remote stage workers (the "
                        "`worker` command): run inference on Triton (engine.backend: triton) or share "
                        f"sources across replicas (fleet:){curve}; docs: Guides, Past one machine"
                    )
        return data


class ConsoleConfig(_Model):
    """`http.console`: the web page at `/`; previews are encoded only while someone watches."""

    enabled: bool = Field(default=True, description="Serve the web console at / (docs: Guides, Web console).")
    preview_fps: float = Field(
        default=10.0, gt=0, le=60, description="The most preview frames a second each watched source is encoded at."
    )
    preview_width: int = Field(default=640, ge=16, le=7680, description="Previews are shrunk to this width at most.")
    jpeg_quality: int = Field(default=75, ge=10, le=100, description="JPEG quality of the previews.")


class HttpConfig(_Model):
    enabled: bool = Field(default=False, description="Serve /metrics, /healthz and the control API.")
    host: str = Field(
        default="127.0.0.1", description="Address to listen on; anything but loopback needs a token."
    )
    port: int = Field(default=8700, ge=0, le=65535, description="TCP port; 0 picks a free one (logged).")
    token: str | None = Field(
        default=None, description="Bearer token the control endpoints require (metrics and health are open)."
    )
    keep_running: bool = Field(
        default=False,
        description="Stay up when every source has ended, for sources added through the control API.",
    )
    console: ConsoleConfig = Field(
        default_factory=ConsoleConfig, description="The web console: sources, rates, previews, add and remove."
    )
    state_file: str | None = Field(
        default="state/sources.json",
        description="Where the daemon keeps the sources' settings changed at run time (PATCH "
        "/sources/{id}: lines, zones, classes, score threshold, interval), read back at start and "
        "applied before the first frame; relative to the working directory. null: not kept.",
    )

    @model_validator(mode="after")
    def _token_off_loopback(self) -> HttpConfig:
        if self.enabled and self.host not in ("127.0.0.1", "localhost", "::1") and not self.token:
            raise ValueError(f"http.host: listening on {self.host!r} needs http.token")
        return self


class Config(_Model):
    version: Literal[1] = Field(default=1, description="Config format version.")
    sources: tuple[Source, ...] = Field(min_length=1, description="Video sources to process.")
    model: ModelConfig = Field(description="The model and its task.")
    secondary: tuple[SecondaryConfig, ...] = Field(
        default=(), description="Models run on crops of the model's detections (a cascade), in order."
    )
    tracking: TrackingConfig | None = Field(
        default=None, description="Track the model's detections per source (a track_id on each); null: off."
    )
    analytics: dict[str, SourceAnalyticsConfig] = Field(
        default_factory=dict,
        description="Counting lines and zones on the tracks, keyed by source id (needs tracking; "
        "docs: Guides, Analytics).",
    )
    steps: tuple[StepConfig, ...] = Field(
        default=(),
        description="Stages run on each frame before preprocessing, in order: audio features, voice "
        "activity, the region a generator works on (docs: Guides, Audio).",
    )
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Inference backend.")
    composite: tuple[CompositeConfig, ...] = Field(
        default=(), description="Drawing steps applied, in order, to each frame before the outputs."
    )
    outputs: tuple[Output, ...] = Field(min_length=1, description="Where results go.")
    stages: StagesConfig = Field(default_factory=StagesConfig, description="Stage workers.")
    transport: TransportConfig = Field(default_factory=TransportConfig, description="Links and pool.")
    http: HttpConfig = Field(default_factory=HttpConfig, description="Metrics, health and control over HTTP.")
    fleet: FleetConfig = Field(
        default_factory=FleetConfig, description="Replicas that share the sources out (docs: Guides, Fleet)."
    )
    tracing: TracingConfig = Field(
        default_factory=TracingConfig,
        description="OpenTelemetry traces of sampled frames across the stages (docs: Guides, Tracing).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        seen: set[str] = set()
        for i, source in enumerate(self.sources):
            if source.id in seen:
                raise ValueError(f"sources.{i}.id: duplicate source id {source.id!r}")
            seen.add(source.id)
        paths: set[str] = set()
        endpoints: set[str] = set()
        for i, out in enumerate(self.outputs):
            if isinstance(out, VideoFileOutput | JsonlOutput):
                if len(self.sources) > 1 and "{source_id}" not in out.path:
                    raise ValueError(
                        f"outputs.{i}.path: {out.path!r} needs {{source_id}} with several sources"
                    )
                if out.path in paths:
                    raise ValueError(f"outputs.{i}.path: {out.path!r} is written by two outputs")
                paths.add(out.path)
            elif isinstance(out, ZmqOutput):
                if out.endpoint in endpoints:
                    raise ValueError(f"outputs.{i}.endpoint: {out.endpoint!r} is bound twice")
                endpoints.add(out.endpoint)
        self._check_resume()
        if self.fleet.store is not None and not self.http.enabled:
            raise ValueError("fleet.store: needs http.enabled: true (sources are added, and the fleet shown, "
                             "through the control API)")  # fmt: skip
        self._check_secondary()
        self._check_analytics()
        self._steps_fit()
        return self

    def _check_resume(self) -> None:
        resumed = [s.id for s in self.sources if getattr(s, "resume", False)]
        problem = resume_problem(self.outputs) if resumed else None
        if problem:
            raise ValueError(f"{problem} (source {resumed[0]} resumes)")

    def _check_secondary(self) -> None:
        names: set[str] = set()
        for i, item in enumerate(self.secondary):
            if item.name in names:
                raise ValueError(f"secondary.{i}.name: duplicate name {item.name!r}")
            names.add(item.name)
            if item.reinfer_every is not None and self.tracking is None:
                raise ValueError(f"secondary.{i}.reinfer_every: needs tracking: (a track id on each object)")

    def _check_analytics(self) -> None:
        ids = [source.id for source in self.sources]
        for source_id in self.analytics:
            if source_id not in ids:
                raise ValueError(f"analytics.{source_id}: no source has this id (sources: {', '.join(ids)})")
            if self.tracking is None:
                raise ValueError(f"analytics.{source_id}: needs tracking: (lines and zones count tracks)")

    def _steps_fit(self) -> None:
        seen = {*MODEL_STAGES, OUTPUTS}
        for i, step in enumerate(self.steps):
            if step.stage in seen or step.stage.startswith("output"):
                raise ValueError(f"steps.{i}.name: {step.stage!r} is already a stage name; name the step")
            seen.add(step.stage)


def resume_problem(outputs: tuple[Output, ...]) -> str | None:
    """Why these outputs cannot be resumed, naming the key; None when they can. A resumed source
    appends to its recording: one fragmented MP4 per source, found again by its name."""
    for i, out in enumerate(outputs):
        if not isinstance(out, VideoFileOutput):
            continue
        fields = {name for name, _ in paths_fields(out.path)} - {"source_id"}
        if out.container != "fmp4":
            return f"outputs.{i}.container: mp4 cannot be resumed (unplayable when cut short); use fmp4"
        if out.segment_s is not None:
            return f"outputs.{i}.segment_s: a recording in segments cannot be resumed; one file per source can"
        if fields:
            field = sorted(fields)[0]
            return f"outputs.{i}.path: {{{field}}} names another file each run; resuming needs one file per source"
    return None
