"""`composite:` and `outputs:`: what is drawn on the frames and where results go."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ByteSize, ConfigDict, Field, SerializeAsAny, field_validator, model_validator

from framewire.pipeline import paths, uris
from framewire.config.base import _Model
from framewire.config.kinds import by_kind, variants
from framewire.registry import OUTPUTS


class CompositeConfig(BaseModel):
    """One drawing step; its parameters belong to the composite `kind`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: str = Field(
        description="blur, pixelate, boxes (detections); background_replace, background_blur (mattes)."
    )

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class OutputConfig(_Model):
    """Base of an `outputs:` item: the `Config` of an entry of the `framewire.outputs` group (a
    plug-in's output subclasses it, with its `kind` literal and keys)."""

    kind: str = Field(description="Which output: video_file, jsonl, zmq, or a plug-in's.")

    @classmethod
    def variants(cls) -> tuple[type[BaseModel], ...]:
        """The config model of every registered output (imports them all)."""
        return variants(OUTPUTS)

    def destination(self, source_id: str) -> str | None:
        """Where it writes a source's results, for the run's summary line (a file, a folder, an
        endpoint, credentials redacted); None where it does not say (a plug-in's output)."""
        return None


class VideoFileOutput(OutputConfig):
    """An H.264 file per source of the composited frames, with the source's audio where asked."""

    kind: Literal["video_file"] = Field(description="H.264 MP4 of the composited frames.")
    path: str = Field(
        description="Output file, a template: `{source_id}`, `{index}` (the segment's number, e.g. "
        "`{index:04d}`) and `{start}` (when its first frame was read, UTC; a strftime spec such as "
        "`{start:%Y%m%d-%H%M%S}`) are filled in. A source id added again while the job runs (POST "
        "/sources after the first one ended) keeps the earlier files: with neither {index} nor {start} "
        "its file is numbered, `out/cam.2.mp4` (the first number from 2 not on disk)."
    )
    crf: int = Field(default=23, ge=0, le=51, description="x264 constant rate factor (quality).")
    preset: str = Field(default="veryfast", description="x264 preset (ultrafast ... veryslow).")
    threads: int | Literal["auto"] = Field(
        default="auto",
        description="x264's threads: N, 0 (x264's own choice: 1.5 a core), or auto: 1 when the job's "
        "processes (a decode per source, the infer workers, the outputs) already fill the cores, "
        "else x264's choice. Its threads cost 20-40% more CPU for the same frames; on a machine the "
        "job keeps busy they only take it from the other stages (docs/results/history.md).",
    )
    audio: bool = Field(
        default=True,
        description="The source's audio, when it has some: copied as it is when MP4 players take it "
        "(AAC, MP3, ALAC, Opus), else encoded as AAC (FLAC, AC-3, PCM...).",
    )
    container: Literal["fmp4", "mp4"] = Field(
        default="fmp4",
        description="fmp4: fragmented MP4, playable up to its last complete fragment even when the "
        "process is killed; mp4: one index written at the end, unplayable unless closed cleanly.",
    )
    fragment_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="fmp4: a keyframe and a fragment at least this often: what a crash may lose.",
    )
    segment_s: float | None = Field(
        default=None,
        gt=0,
        description="Start a new file every this many seconds of video (the path needs {index} or "
        "{start}); each closed segment is announced. null: one file per source.",
    )
    keep_segments: int | None = Field(
        default=None, ge=1, description="Retention: keep at most this many segment files per source."
    )
    keep_bytes: ByteSize | None = Field(
        default=None, description="Retention: keep at most this much per source (bytes, or '20GiB', '500MB')."
    )
    keep_age_s: float | None = Field(
        default=None, gt=0, description="Retention: delete segment files older than this many seconds."
    )

    @field_validator("path")
    @classmethod
    def _path_template(cls, value: str) -> str:
        paths.check(value)
        return value

    @model_validator(mode="after")
    def _segments(self) -> VideoFileOutput:
        names = {name for name, _ in paths.fields(self.path)}
        if self.segment_s is not None and not names & {"index", "start"}:
            raise ValueError(
                f"path: {self.path!r} needs {{index}} or {{start}} with segment_s (one file per segment)"
            )
        keep = [k for k in ("keep_segments", "keep_bytes", "keep_age_s") if getattr(self, k) is not None]
        if keep and self.segment_s is None:
            raise ValueError(f"{keep[0]}: retention needs segment_s (it deletes old segments)")
        return self

    def destination(self, source_id: str) -> str | None:
        return self.path.replace("{source_id}", source_id)  # segments keep their {index} or {start}


class JsonlOutput(OutputConfig):
    """A JSON Lines file per source: one record per frame, and the events."""

    kind: Literal["jsonl"] = Field(
        description="One JSON record per frame (and the events, such as closed segments)."
    )
    path: str = Field(
        description="Output file; `{source_id}` is replaced by the source's id. A source id added again "
        "while the job runs (POST /sources after the first one ended) writes a new file beside the "
        "earlier one, numbered: `out/cam.2.jsonl` (the first number from 2 not on disk)."
    )

    @field_validator("path")
    @classmethod
    def _path_template(cls, value: str) -> str:
        extra = {name for name, _ in paths.fields(value)} - {"source_id"}
        if extra:
            raise ValueError(f"only {{source_id}} is filled in a jsonl path, not {{{sorted(extra)[0]}}}")
        return value

    def destination(self, source_id: str) -> str | None:
        return self.path.replace("{source_id}", source_id)


class ZmqOutput(OutputConfig):
    """Every frame's record published on a ZeroMQ socket (`pub` or `push`), as framewire.Client reads it."""

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
    hwm: int = Field(
        default=1000, ge=1, description="Messages queued per peer before pub drops / push blocks."
    )
    wait_subscribers: int = Field(
        default=0,
        ge=0,
        description=(
            "pub: before the first frame, wait for this many subscriptions (a subscriber counts once per"
            " topic it subscribes to), so subscribers that connect as the job starts miss nothing."
        ),
    )
    wait_subscribers_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="How long wait_subscribers waits; then the output logs one warning and sends anyway.",
    )
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
        problem = uris.endpoint_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _wait_for_pub(self) -> ZmqOutput:
        if self.wait_subscribers and self.mode != "pub":
            raise ValueError("wait_subscribers: only for mode pub (a push output already waits for a puller)")
        return self

    def destination(self, source_id: str) -> str | None:
        return f"zmq {self.mode} {self.endpoint}"


Output = Annotated[SerializeAsAny[OutputConfig], by_kind(OUTPUTS)]
"""An `outputs:` item, validated by the model of the output its `kind` names (framewire.registry.OUTPUTS)."""
