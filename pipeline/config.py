"""The job configuration: pydantic models loaded from YAML, with `--set` overrides.

Every model forbids unknown keys and is frozen; every field is described where it is declared, so
`validate` and the README can be written from this file alone. Task parameters (`model:` keys beside
`path` and `task`) and composite parameters belong to the task and composite classes in `stages/`:
they are kept here as extra keys and checked there, since this package knows no model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipeline.errors import ConfigError
from pipeline import uris

SOURCE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Policy(str, Enum):
    """What a source does when the pipeline has no room for its next frame."""

    BLOCK = "block"
    """Wait: every frame is processed (files)."""
    DROP_OLDEST = "drop_oldest"
    """Keep only the freshest waiting frame; older ones are dropped and counted (live sources)."""
    DROP_NEWEST = "drop_newest"
    """Drop the frame just read and keep what is already waiting (live sources)."""


class ReconnectConfig(_Model):
    """How a live source comes back after it drops: delays double from initial_s up to max_s."""

    initial_s: float = Field(default=0.5, gt=0, le=3600, description="Delay before the first retry.")
    max_s: float = Field(default=30.0, gt=0, le=3600, description="Longest delay between two retries.")
    max_attempts: int | None = Field(
        default=None,
        ge=1,
        description="Failed attempts in a row before the source ends with an error; null: forever.",
    )

    @model_validator(mode="after")
    def _in_order(self) -> ReconnectConfig:
        if self.max_s < self.initial_s:
            raise ValueError(f"max_s ({self.max_s}) must be at least initial_s ({self.initial_s})")
        return self


class CameraConfig(_Model):
    """What to ask a V4L2 camera for (`v4l2-ctl --list-formats-ext` lists what it offers)."""

    width: int | None = Field(default=None, ge=1, le=16384, description="Frame width; with height.")
    height: int | None = Field(default=None, ge=1, le=16384, description="Frame height; with width.")
    fps: float | None = Field(default=None, gt=0, le=1000, description="Frame rate.")
    input_format: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9_]{1,32}$",
        description="What the camera sends: mjpeg, yuyv422, h264, ... (FFmpeg's v4l2 input_format).",
    )

    @model_validator(mode="after")
    def _both_sides(self) -> CameraConfig:
        if (self.width is None) != (self.height is None):
            raise ValueError("width and height go together")
        return self


class SourceConfig(_Model):
    id: str = Field(description="Name of the source: the ZeroMQ topic, `{source_id}` in output paths.")
    uri: str = Field(
        description="A video file path or file:// URI; rtsp://, rtmp://, http(s):// (HLS), srt:// "
        "streams; a V4L2 camera (/dev/video0); or zmq+tcp://host:port / zmq+ipc:///path (frames "
        "pushed by another program, see the README)."
    )
    policy: Policy = Field(
        default=Policy.BLOCK,
        description="block: process every frame; drop_oldest / drop_newest: drop when behind. "
        "Unset, it is drop_oldest for a live source and block for a file.",
    )
    live: bool | None = Field(
        default=None,
        description="A live source reconnects when it drops or ends; null: from the URI (cameras, "
        "ZeroMQ, rtsp, rtmp, srt, udp and .m3u8 playlists are live, files and plain http are not).",
    )
    max_staleness_ms: float | None = Field(
        default=None,
        gt=0,
        description="Drop (and count, reason stale) a frame that reaches inference this long after "
        "it was read; needs a drop policy.",
    )
    latency_budget_ms: float | None = Field(
        default=None,
        gt=0,
        description="The end-to-end latency (end of decode to the outputs) this source should stay "
        "under: each frame over it is counted (`framewire_latency_over_budget_total`) and logged. "
        "It is a check, not a control: `max_staleness_ms` (below the budget by about one inference "
        "and the later stages) is what keeps frames young.",
    )
    timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="Stream and camera sources: how long opening, or waiting for the next packet, may "
        "take before the connection counts as lost.",
    )
    reconnect: ReconnectConfig = Field(
        default_factory=ReconnectConfig, description="Live sources: retries after a drop, with backoff."
    )
    rtsp_transport: Literal["tcp", "udp"] | None = Field(
        default=None, description="rtsp:// sources: RTP over the RTSP connection (tcp, the default) or udp."
    )
    camera: CameraConfig | None = Field(
        default=None, description="V4L2 cameras (/dev/video*): size, frame rate and format to ask for."
    )
    ffmpeg_options: dict[str, str] = Field(
        default_factory=dict,
        description="Stream and camera sources: more FFmpeg options, e.g. {probesize: '32768'}.",
    )
    realtime: bool = Field(
        default=False, description="Pace a file at its own frame rate instead of as fast as possible."
    )
    max_frames: int | None = Field(
        default=None, ge=1, description="Stop after this many frames (a shorter job on a long file)."
    )
    curve_secret_key: str | None = Field(
        default=None,
        description="ZeroMQ sources: this source's secret certificate (`keys` makes one); producers "
        "must then connect with CurveZMQ and the matching public key.",
    )
    curve_clients: str | None = Field(
        default=None,
        description="ZeroMQ sources with curve_secret_key: a folder of producer public certificates; "
        "only those may connect (without it, any producer that knows the public key may).",
    )

    @field_validator("id")
    @classmethod
    def _id_is_a_name(cls, value: str) -> str:
        if not SOURCE_ID.match(value):
            raise ValueError("must be 1-64 letters, digits, '_', '.' or '-'")
        return value

    @model_validator(mode="before")
    @classmethod
    def _live_drops_by_default(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "policy" not in data and isinstance(data.get("uri"), str):
            live = data.get("live")
            if live is True or (live is None and uris.is_live(data["uri"])):
                return {**data, "policy": Policy.DROP_OLDEST}
        return data

    @model_validator(mode="after")
    def _fits_the_uri(self) -> SourceConfig:
        kind = uris.source_kind(self.uri)
        if self.rtsp_transport is not None and uris.scheme(self.uri) not in ("rtsp", "rtsps"):
            raise ValueError(f"rtsp_transport: only for rtsp:// sources, not {kind} {uris.redact(self.uri)}")
        if self.camera is not None and kind != "camera":
            raise ValueError(f"camera: only for V4L2 cameras (/dev/video*), not {uris.redact(self.uri)}")
        if self.realtime and self.is_live:
            raise ValueError("realtime: only for files (a live source keeps its own pace)")
        if self.max_staleness_ms is not None and self.policy == Policy.BLOCK:
            raise ValueError(
                "max_staleness_ms: needs policy drop_oldest or drop_newest (block drops nothing)"
            )
        if (
            self.max_staleness_ms is not None
            and self.latency_budget_ms is not None
            and self.max_staleness_ms >= self.latency_budget_ms
        ):
            raise ValueError(
                f"max_staleness_ms ({self.max_staleness_ms:g}) must be below latency_budget_ms "
                f"({self.latency_budget_ms:g}): a frame as old as that is already over the budget"
            )
        if kind != "zmq" and (self.curve_secret_key or self.curve_clients):
            raise ValueError(f"curve_secret_key: only for ZeroMQ sources, not {kind} {uris.redact(self.uri)}")
        if self.curve_clients and not self.curve_secret_key:
            raise ValueError("curve_clients: needs curve_secret_key (the source's own certificate)")
        if kind == "zmq":
            rest = uris.zmq_endpoint(self.uri)
            if not re.match(r"^(tcp://[^/:]+:\d{1,5}|ipc://.+)$", rest):
                raise ValueError(f"uri: {self.uri!r}: expected zmq+tcp://host:port or zmq+ipc:///path")
        return self

    @property
    def is_live(self) -> bool:
        """Whether this source reconnects and drops (the `live` key, or the URI's kind)."""
        return self.live if self.live is not None else uris.is_live(self.uri)


class ModelConfig(BaseModel):
    """The model and its task; the task's own parameters sit beside `path` and `task`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    path: str = Field(description="The ONNX model file.")
    task: str = Field(
        description="The model family: face_detection, matting, or `package.module:Class`."
    )

    @property
    def params(self) -> dict[str, Any]:
        """The task parameters: every key but `path` and `task`."""
        return dict(self.model_extra or {})


class Backend(str, Enum):
    AUTO = "auto"
    ONNXRUNTIME = "onnxruntime"
    TENSORRT = "tensorrt"


class CalibrationConfig(_Model):
    """INT8 calibration: frames of a video, through the task's own preprocessing."""

    video: str | None = Field(
        default=None, description="Video whose frames calibrate INT8 (required for precision int8)."
    )
    frames: int = Field(default=256, ge=1, description="Frames of the video used for calibration.")
    batch: int = Field(default=8, ge=1, le=256, description="Frames per calibration batch.")


class EngineConfig(_Model):
    backend: Backend = Field(
        default=Backend.AUTO,
        description="Inference backend; auto picks the best one available on this machine.",
    )
    providers: tuple[Literal["tensorrt", "cuda", "cpu"], ...] = Field(
        default=("cpu",),
        description="ONNX Runtime execution providers, in priority order (backend onnxruntime; "
        "auto picks its own).",
    )
    threads: int = Field(
        default=0, ge=0, description="Intra-op threads per infer process; 0 lets the runtime decide."
    )
    graph_optimization: Literal["disable", "basic", "extended", "all"] = Field(
        default="all", description="ONNX Runtime graph optimisation level."
    )
    processes_per_device: int = Field(
        default=1, ge=1, le=64, description="Infer processes per device (CPU counts as one device)."
    )
    max_batch: int = Field(
        default=1, ge=1, le=256, description="Dynamic batching: frames (of any source) per inference."
    )
    max_delay_ms: float = Field(
        default=2.0, ge=0, le=1000, description="Dynamic batching: how long a batch waits to fill."
    )
    precision: Literal["fp32", "fp16", "int8"] = Field(
        default="fp32",
        description="TensorRT (native or ONNX Runtime's provider) precision; int8 needs calibration.",
    )
    devices: tuple[int, ...] = Field(
        default=(0,),
        min_length=1,
        description="GPU ids; a GPU backend runs len(devices) x processes_per_device infer processes.",
    )
    min_batch: int = Field(default=1, ge=1, le=256, description="TensorRT profile: smallest batch.")
    opt_batch: int | None = Field(
        default=None, ge=1, le=256, description="TensorRT profile: batch tuned for; None = max_batch."
    )
    cache_dir: str | None = Field(
        default=None,
        description="TensorRT engines, timing and calibration caches, optimised models; "
        "None = ~/.cache/framewire/engines.",
    )
    optimized_model_cache: bool = Field(
        default=False,
        description="ONNX Runtime: save the optimised graph in cache_dir and load it next time.",
    )
    calibration: CalibrationConfig = Field(
        default_factory=CalibrationConfig, description="INT8 calibration data."
    )
    cuda_graph: bool = Field(
        default=False, description="TensorRT: capture each input shape's launch as a CUDA graph."
    )
    workspace_mb: int = Field(
        default=2048, ge=16, description="TensorRT build: workspace memory pool limit in MiB."
    )
    gpu_mem_limit_mb: int | None = Field(
        default=None,
        ge=64,
        description="ONNX Runtime CUDA provider: memory arena limit per infer process in MiB; "
        "None = 90% of the GPU's memory shared among processes_per_device (no limit with one).",
    )
    cudnn_conv_algo_search: Literal["exhaustive", "heuristic", "default"] | None = Field(
        default=None,
        description="ONNX Runtime CUDA provider: how cuDNN picks convolution algorithms; None = "
        "exhaustive with one process per GPU, heuristic with more (exhaustive search allocates "
        "large workspaces that several processes on one GPU would fight over).",
    )

    @field_validator("devices")
    @classmethod
    def _devices_are_ids(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(d < 0 for d in value) or len(set(value)) != len(value):
            raise ValueError("must be distinct GPU ids >= 0")
        return value

    @model_validator(mode="after")
    def _profile_in_order(self) -> EngineConfig:
        opt = self.opt_batch if self.opt_batch is not None else self.max_batch
        if not self.min_batch <= opt <= self.max_batch:
            raise ValueError(
                f"batch profile must satisfy min_batch <= opt_batch <= max_batch "
                f"(got {self.min_batch}, {opt}, {self.max_batch})"
            )
        return self


class StageConfig(_Model):
    workers: int = Field(default=1, ge=1, le=64, description="Processes running this stage.")


class StagesConfig(_Model):
    preprocess: StageConfig = Field(default_factory=StageConfig, description="Preprocess stage.")
    postprocess: StageConfig = Field(default_factory=StageConfig, description="Postprocess stage.")
    composite: StageConfig = Field(default_factory=StageConfig, description="Composite stage.")
    fuse: bool = Field(
        default=False,
        description="Run preprocess, postprocess and composite inside each infer process instead "
        "of processes of their own (their `workers` are then unused): three hops fewer per frame, "
        "faster when those stages are light and cores are few (docs/benchmarks.md, Fused stages).",
    )
    fuse_outputs: bool = Field(
        default=False,
        description="Run every output in one process instead of one process each: fewer hops per "
        "frame; an output that is slow holds the others up.",
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


class CompositeConfig(BaseModel):
    """One drawing step; its parameters belong to the composite `kind`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: str = Field(
        description="blur, pixelate, boxes (detections); background_replace, background_blur (mattes)."
    )

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class VideoFileOutput(_Model):
    kind: Literal["video_file"] = Field(description="H.264 MP4 of the composited frames.")
    path: str = Field(description="Output file; `{source_id}` is replaced by the source's id.")
    crf: int = Field(default=23, ge=0, le=51, description="x264 constant rate factor (quality).")
    preset: str = Field(default="veryfast", description="x264 preset (ultrafast ... veryslow).")
    audio: bool = Field(default=True, description="Copy the source's audio through when it has some.")


class JsonlOutput(_Model):
    kind: Literal["jsonl"] = Field(description="One JSON record per frame.")
    path: str = Field(description="Output file; `{source_id}` is replaced by the source's id.")


class ZmqOutput(_Model):
    kind: Literal["zmq"] = Field(description="Publish every frame's results on a ZeroMQ socket.")
    endpoint: str = Field(
        description="Where to bind, e.g. tcp://127.0.0.1:5560 or ipc:///tmp/framewire.sock."
    )
    mode: Literal["pub", "push"] = Field(
        default="pub",
        description="pub: fan-out, a slow subscriber loses messages; push: reliable, backpressure.",
    )
    jpeg: bool = Field(default=False, description="Append the composited frame as a JPEG part.")
    jpeg_quality: int = Field(default=85, ge=1, le=100, description="JPEG quality.")
    hwm: int = Field(default=1000, ge=1, description="Messages queued per peer before pub drops / push blocks.")
    curve_secret_key: str | None = Field(
        default=None,
        description="CurveZMQ: this output's secret certificate (`keys` makes one); encrypts the socket.",
    )
    curve_clients: str | None = Field(
        default=None,
        description="CurveZMQ: a folder of client public certificates; only those may connect.",
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint_scheme(cls, value: str) -> str:
        if not re.match(r"^(tcp|ipc|inproc)://.+", value):
            raise ValueError("must start with tcp://, ipc:// or inproc://")
        return value


Output = Annotated[VideoFileOutput | JsonlOutput | ZmqOutput, Field(discriminator="kind")]


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
    listen: str | None = Field(
        default=None,
        description="tcp://HOST:PORT where the hub also accepts workers from other hosts (the `worker` "
        "command); null: local workers only. Off loopback it needs curve_secret_key.",
    )
    curve_secret_key: str | None = Field(
        default=None,
        description="CurveZMQ on `listen`: the hub's secret certificate (`keys` makes one); workers "
        "connect with its public half.",
    )
    curve_clients: str | None = Field(
        default=None,
        description="CurveZMQ on `listen`: a folder of worker public certificates; only those may "
        "join (required with curve_secret_key: a worker receives frames).",
    )
    allow_plaintext: bool = Field(
        default=False,
        description="Allow `listen` off loopback without CurveZMQ (a trusted, private network only).",
    )
    remote_stages: tuple[str, ...] = Field(
        default=(),
        description="Stages with no local worker, run only by `worker` commands on other hosts: "
        "preprocess, infer, postprocess, composite, or an output by name (output0.video_file, ...); "
        "with stages.fuse, infer runs preprocess to composite, and with stages.fuse_outputs, outputs "
        "runs every output.",
    )
    remote_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="A remote worker silent this long (no result, no ping) is lost; its frames go "
        "to other workers.",
    )
    remote_wait_s: float | None = Field(
        default=None,
        gt=0,
        description="Fail the job when a remote_stages stage has had no worker this long; null: wait.",
    )

    @model_validator(mode="after")
    def _listen_is_safe(self) -> TransportConfig:
        if self.listen is None:
            if self.remote_stages or self.curve_secret_key or self.curve_clients:
                raise ValueError("transport.listen: remote_stages and curve keys need a tcp://HOST:PORT to listen on")
            return self
        found = re.match(r"^tcp://(\[[0-9a-fA-F:]+\]|[^/:\[\]]+):(\d{1,5})$", self.listen)
        if not found or not 0 < int(found.group(2)) < 65536:
            raise ValueError(f"transport.listen: expected tcp://HOST:PORT, got {self.listen!r}")
        if self.curve_secret_key and not self.curve_clients:
            raise ValueError(
                "transport.curve_clients: required with transport.curve_secret_key (a folder of the "
                "workers' public certificates: a worker receives frames, so only known ones may join)"
            )
        if self.curve_clients and not self.curve_secret_key:
            raise ValueError("transport.curve_secret_key: required with transport.curve_clients")
        if not self.curve_secret_key and not self.allow_plaintext and not uris.is_loopback(found.group(1)):
            raise ValueError(
                f"transport.listen: {self.listen} is reachable from other hosts: set "
                "transport.curve_secret_key and transport.curve_clients (or transport.allow_plaintext: "
                "true on a trusted network)"
            )
        return self


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

    @model_validator(mode="after")
    def _token_off_loopback(self) -> HttpConfig:
        if self.enabled and self.host not in ("127.0.0.1", "localhost", "::1") and not self.token:
            raise ValueError(f"http.host: listening on {self.host!r} needs http.token")
        return self


class Config(_Model):
    version: Literal[1] = Field(default=1, description="Config format version.")
    sources: tuple[SourceConfig, ...] = Field(min_length=1, description="Video sources to process.")
    model: ModelConfig = Field(description="The model and its task.")
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Inference backend.")
    composite: tuple[CompositeConfig, ...] = Field(
        default=(), description="Drawing steps applied, in order, to each frame before the outputs."
    )
    outputs: tuple[Output, ...] = Field(min_length=1, description="Where results go.")
    stages: StagesConfig = Field(default_factory=StagesConfig, description="Stage workers.")
    transport: TransportConfig = Field(default_factory=TransportConfig, description="Links and pool.")
    http: HttpConfig = Field(default_factory=HttpConfig, description="Metrics, health and control over HTTP.")

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
        names = self.stage_names()
        for name in self.transport.remote_stages:
            if name not in names:
                raise ValueError(
                    f"transport.remote_stages: {name!r} is not a stage of this job ({', '.join(names)})"
                )
        return self

    def stage_names(self) -> list[str]:
        """The job's stages after decode, as the hub and the `worker` command name them: with
        `stages.fuse`, one `infer` stage runs preprocess to composite; with `stages.fuse_outputs`
        (and more than one output), one `outputs` stage runs every output."""
        names = ["preprocess", "infer", "postprocess"] + (["composite"] if self.composite else [])
        if self.stages.fuse:
            names = ["infer"]
        outputs = [output_name(i, out.kind) for i, out in enumerate(self.outputs)]
        if self.stages.fuse_outputs and len(outputs) > 1:
            outputs = ["outputs"]
        return names + outputs


def output_name(index: int, kind: str) -> str:
    """An output's stage name: `output0.video_file`, `output1.jsonl`, ..."""
    return f"output{index}.{kind}"


# --- loading ---------------------------------------------------------------------------------


def load_config(
    path: str | Path, overrides: Sequence[str] = (), *, text: str | None = None
) -> Config:
    """Read a YAML config (or `text`), apply `key.path=value` overrides, validate.

    Raises ConfigError with one line naming the file, the key path and the bad value.
    """
    name = str(path)
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{name}: config file not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{name}: cannot read config file: {exc}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{name}:{where}: not valid YAML: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{name}: the top level must be a mapping of keys, got {type(raw).__name__}")
    for item in overrides:
        apply_override(raw, item)
    return validate_config(raw, name)


def validate_config(raw: Mapping[str, Any], name: str = "config") -> Config:
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{name}: {describe_validation_error(exc)}") from None


def describe_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One line for the first error: `key.path: what is wrong (got value)`, plus how many more."""
    errors = exc.errors(include_url=False)
    # A failing item also fails its list's length check; the item's own error is the useful one.
    locs = [tuple(e["loc"]) for e in errors]
    errors = [
        e for e in errors if not any(len(o) > len(e["loc"]) and o[: len(e["loc"])] == tuple(e["loc"]) for o in locs)
    ]
    first = errors[0]
    loc = [str(p) for p in first["loc"] if not _is_union_tag(p)]
    key = ".".join(([prefix] if prefix else []) + loc) or "(top level)"
    msg = first["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if first["type"] == "extra_forbidden":
        line = f"{key}: unknown key"
    elif first["type"] == "missing":
        line = f"{key}: required key is missing"
    elif not loc:
        line = msg  # a model validator already named the key
    else:
        got = first.get("input")
        shown = _short(got)
        line = f"{key}: {msg} (got {shown})" if not isinstance(got, dict) else f"{key}: {msg}"
    if len(errors) > 1:
        line += f" (and {len(errors) - 1} more)"
    return line.replace("\r", "\\r").replace("\n", "\\n")  # one line, whatever the value holds


def _is_union_tag(part: object) -> bool:
    return isinstance(part, str) and part in {"video_file", "jsonl", "zmq"}


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Apply `a.b.0.c=value` to a raw config mapping; the value is parsed as YAML (`5`, `true`, `[1, 2]`)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key.path=value")
    key, _, text = item.partition("=")
    parts = [p for p in key.strip().split(".")]
    if not key.strip() or any(not p for p in parts):
        raise ConfigError(f"--set {item!r}: empty key in {key!r}")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    node: Any = raw
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            if not part.isdigit():
                raise ConfigError(f"--set {key}: {where!r} must be a list index")
            index = int(part)
            if index > len(node):
                raise ConfigError(f"--set {key}: index {index} is past the end of a list of {len(node)}")
            if index == len(node):
                node.append({} if not last else value)
            if last:
                node[index] = value
            else:
                if not isinstance(node[index], dict | list):
                    node[index] = {}
                node = node[index]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                child = node.get(part)
                if not isinstance(child, dict | list):
                    child = {}
                    node[part] = child
                node = child
        else:
            raise ConfigError(f"--set {key}: {where!r} is not a mapping or list")


def resolve_path(template: str, source_id: str) -> str:
    """An output path with `{source_id}` filled in."""
    return template.replace("{source_id}", source_id)


def resolve_inputs(config: Config, roots: Sequence[str | Path]) -> Config:
    """Relative input paths (`model.path`, file sources) that do not exist from the current folder
    but do under one of `roots` (the project), resolved there: the shipped configs then run from
    anywhere. Output paths stay relative to the current folder."""

    def find(path: str) -> str:
        if "://" in path or Path(path).is_absolute() or Path(path).exists():
            return path
        for root in roots:
            candidate = Path(root) / path
            if candidate.exists():
                return str(candidate)
        return path

    sources = tuple(s.model_copy(update={"uri": find(s.uri)}) for s in config.sources)
    model = config.model.model_copy(update={"path": find(config.model.path)})
    return config.model_copy(update={"sources": sources, "model": model})

