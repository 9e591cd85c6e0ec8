"""`model:` and `engine:`: the model and its task, and the backend that runs it."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from framewire.config.base import _Model
from framewire.registry import BACKENDS


class ModelConfig(BaseModel):
    """The model and its task; the task's own parameters sit beside `path` and `task`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    path: str = Field(description="The ONNX model file.")
    task: str | None = Field(
        default=None,
        description="The model family: face_detection, detection, matting, ... or `package.module:Class`. "
        "Left out, it is told from the model file where that is beyond doubt: an Ultralytics detect "
        "export (its metadata), or one [B, 4+C, N] output, N the grid cells of the input at strides "
        "8/16/32 (YOLOv8, YOLO11): detection. Any other model needs it.",
    )
    version: str | None = Field(
        default=None,
        min_length=1,
        description="The label every frame's record names as the model that made it (`model` in the "
        "JSON record). Left out: the file's name and the first 12 hex digits of its SHA-256, "
        "`face_detection_yunet_2023mar.onnx@8f2383e4dd3c`. `POST /model` swaps in a new version "
        "while the job runs (guides/models.md).",
    )

    @property
    def params(self) -> dict[str, Any]:
        """The task parameters: every key but `path` and `task`."""
        return dict(self.model_extra or {})


class Backend(str, Enum):
    AUTO = "auto"
    ONNXRUNTIME = "onnxruntime"
    TENSORRT = "tensorrt"
    TRITON = "triton"
    OPENVINO = "openvino"


class CalibrationConfig(_Model):
    """INT8 calibration: frames of a video, through the task's own preprocessing."""

    video: str | None = Field(
        default=None, description="Video whose frames calibrate INT8 (required for precision int8)."
    )
    frames: int = Field(default=256, ge=1, description="Frames of the video used for calibration.")
    batch: int = Field(default=8, ge=1, le=256, description="Frames per calibration batch.")


class TritonConfig(_Model):
    """`backend: triton`: the Triton Inference Server that runs the model, over gRPC (KServe v2)."""

    url: str = Field(default="localhost:8001", description="Triton's gRPC address, host:port (no scheme).")
    model: str | None = Field(
        default=None, description="The model's name on the server; default: model.path's file name without .onnx."
    )
    version: str = Field(default="", description="The model version; empty: the server's version policy.")
    secondary: dict[str, str] = Field(
        default_factory=dict,
        description="Names on the server of the secondary models, by secondary[].name; default: each "
        "model file's name without .onnx.",
    )
    ssl: bool = Field(default=False, description="TLS to the server (grpcs).")
    root_certificates: str | None = Field(
        default=None, description="TLS: PEM file of the CAs the server's certificate is checked against."
    )
    private_key: str | None = Field(default=None, description="TLS client certificate: its PEM private key file.")
    certificate_chain: str | None = Field(
        default=None, description="TLS client certificate: its PEM certificate chain file."
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="gRPC headers sent with every call, e.g. `authorization: Bearer ${TRITON_TOKEN}`, or "
        "pytriton's `triton-grpc-protocol-triton-access-token` (its shared-memory and statistics "
        "endpoints need it). Use ${VAR} for secrets.",
    )
    timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="A request not answered within this is taken as an outage: the batch is tried again.",
    )
    connect_timeout_s: float = Field(
        default=10.0, gt=0, le=600, description="How long the start-up check waits for the server and the model."
    )
    in_flight: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Requests in flight per infer worker: a batch is split into this many requests sent "
        "at once, so that Triton can spread them over its model instances.",
    )
    shared_memory: Literal["none", "system", "cuda"] = Field(
        default="none",
        description="Tensors through shared memory instead of the socket: system (client and server on "
        "one host; regions registered once per worker and reused) or cuda (GPU memory of "
        "engine.devices; needs cuda-python; not run here).",
    )
    retry_max_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="While the server does not answer, the longest wait between tries (backoff from 0.1 s).",
    )
    stats_interval_s: float = Field(
        default=5.0,
        ge=0,
        le=3600,
        description="How often a worker reads the model's statistics (Triton's queue and compute times, "
        "in /metrics); 0: never. pytriton protects that endpoint: it needs the access-token header.",
    )

    @field_validator("url")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if "://" in value or not sep or not host or not port.isdigit():
            raise ValueError(f"must be host:port without a scheme, e.g. localhost:8001 (got {value!r})")
        return value


class EngineConfig(_Model):
    """How the model runs: the backend, its devices and precision, batching and the TensorRT build."""

    backend: Backend | str = Field(
        default=Backend.AUTO,
        union_mode="left_to_right",
        description="Inference backend; auto picks the best one available on this machine. A plug-in "
        "backend (the framewire.backends entry points) by its name.",
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
    precision: Literal["auto", "fp32", "fp16", "bf16", "int8"] = Field(
        default="auto",
        description="Numeric precision. auto: fp32 on ONNX Runtime and TensorRT; on OpenVINO the "
        "device's own default (bf16 on a CPU with AMX, else fp32) where the model passed the accuracy "
        "gate at it. TensorRT takes fp32, fp16, int8 (int8 needs calibration); OpenVINO all four (int8: "
        "a quantized model).",
    )
    device: str = Field(
        default="CPU",
        pattern=r"^(CPU|NPU|GPU(\.[0-9]+)?|AUTO(:[A-Z0-9.,]+)?)$",
        description="OpenVINO device: CPU, GPU (GPU.1 the second), NPU, or AUTO (AUTO:GPU,CPU in that "
        "order); backend openvino.",
    )
    streams: int = Field(
        default=1,
        ge=0,
        le=64,
        description="OpenVINO: execution streams per infer process, each running one frame of a batch "
        "at a time; 0 lets OpenVINO choose for throughput.",
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
    spin_wait: bool = Field(
        default=False,
        description="GPU backends: wait for each batch by spinning a core instead of sleeping in the "
        "driver (framewire's TensorRT waits, and through the GPU's scheduling flag ONNX Runtime's CUDA "
        "provider's); tens of microseconds less latency, a core busy for the batch's whole GPU time "
        "(trtexec's --useSpinWait).",
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

    triton: TritonConfig = Field(
        default_factory=TritonConfig, description="The Triton server (backend triton)."
    )

    @field_validator("backend")
    @classmethod
    def _registered(cls, value: Backend | str) -> Backend | str:
        if not isinstance(value, Backend) and value not in BACKENDS:
            raise ValueError(f"unknown backend {value!r} (auto or {', '.join(BACKENDS.names())})")
        return value

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
