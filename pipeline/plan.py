"""The job as the runtime takes it: a `Plan` of processes built by the composition root (framewire.app.compose),
and the `Report` of how it ended. The plan is the boundary: nothing past it knows a model."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from framewire.pipeline import stagespec
from framewire.pipeline.stagespec import StageSpec


class Policy(str, Enum):
    """What a source does when the pipeline has no room for its next frame."""

    BLOCK = "block"
    """Wait: every frame is processed (files)."""
    DROP_OLDEST = "drop_oldest"
    """Keep only the freshest waiting frame; older ones are dropped and counted (live sources)."""
    DROP_NEWEST = "drop_newest"
    """Drop the frame just read and keep what is already waiting (live sources)."""


SlotLayout = Callable[[str, Mapping[str, Any]], dict[str, tuple[tuple[int, ...], str]]]
"""Regions of a slot for a source, from its stream info: {"image": ((h, w, 3), "uint8"), ...}."""


@dataclass(frozen=True)
class SourceOptions:
    """How the decode worker feeds a source into the pipeline (the `sources:` keys it needs)."""

    policy: Policy = Policy.BLOCK
    realtime: bool = False
    """Pace a file at its own frame rate."""
    max_frames: int | None = None
    max_staleness_ms: float | None = None
    """A frame this old when it reaches inference is dropped (drop policies only)."""
    latency_budget_ms: float | None = None
    """Frames output later than this end to end are counted and logged."""
    max_waiting: int | None = None
    """Its share of the frames that may wait in the hub for a worker up to inference (drop policies
    only): the live sources' shares add up, and past their sum a source at or over its own drops
    its oldest or newest waiting frame, the one that lost the fewest lately (pipeline.hub.shedding);
    None: no bound."""
    trace_every: int | None = None
    """1 in this many of its frames (those whose seq it divides) gets a trace context where it enters
    (`Frame.trace`), and its spans are exported when it is done (`Plan.frame_hook`); None: none."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", Policy(self.policy))  # "drop_oldest" as well as the enum

    @property
    def staleness_ms(self) -> float | None:
        """The staleness limit in force: none under `block`, which drops nothing."""
        return None if self.policy == Policy.BLOCK else self.max_staleness_ms

    @property
    def waiting_limit(self) -> int | None:
        """The bound on frames waiting in the hub in force: none under `block`, which drops nothing."""
        return None if self.policy == Policy.BLOCK else self.max_waiting


@dataclass(frozen=True)
class SourcePlan:
    source_id: str
    factory: Callable[[], Any]
    """Builds the source's `FrameSource` inside its decode worker."""
    options: SourceOptions = field(default_factory=SourceOptions)
    expected_frames: int | None = None
    ran_before: bool = False
    """It ran before on another replica of a fleet (taken over): its file outputs write beside that
    run's files (numbered, as a later run in one job does) instead of over them, unless it resumes."""
    item: Mapping[str, Any] | None = None
    """The `sources:` item it was built from at run time (the control API's, the fleet's): a worker of
    the live layout builds it again from that (`Plan.make_source`); None: one of the config's."""


class EventStore(Protocol):
    """One recording output's event history as the HTTP API reads it (app.history_http opens the
    SQLite store read-only for each question); pipeline.ops.recordings serves it."""

    @property
    def name(self) -> str:
        """The output's stage name (`output2.recording`): `?output=` picks it."""
        ...

    def events(self, filters: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int | None]:
        """A page of events, newest first, and the cursor of the next (None at the end)."""
        ...

    def clips(self, filters: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int | None]:
        """A page of clips, newest first, and the cursor of the next."""
        ...

    def clip_file(self, clip_id: int) -> str | None:
        """The clip's file, None when the store has no such clip."""
        ...

    def snapshot_file(self, event_id: int) -> str | None:
        """The event's snapshot, None when it has none."""
        ...


@dataclass(frozen=True)
class HttpSettings:
    """Where /metrics, /healthz and the control API listen (see pipeline.control)."""

    host: str = "127.0.0.1"
    port: int = 8700
    token: str | None = None
    keep_running: bool = False
    """Stay up when every source has ended, waiting for sources added through the control API."""
    console: bool = True
    """Serve the web console at / (pipeline.ops.console)."""
    encode_preview: Callable[[Any], bytes] | None = None
    """A frame (BGR uint8) to JPEG bytes, for the console's previews; None: no previews."""
    preview_fps: float = 10.0
    """The most previews a second a watched source is encoded at."""
    hls: tuple[str, ...] = ()
    """The folder templates (`{source_id}`) of the hls outputs, served at /hls/<source_id>/."""
    recordings: tuple[EventStore, ...] = ()
    """The recording outputs' event histories, served at /events, /clips and /snapshots."""
    openapi: Callable[[], bytes] | None = None
    """Makes the API's OpenAPI document, served at /openapi.json (app.http_api: built from the models)."""


@dataclass(frozen=True)
class FleetSettings:
    """This daemon as one replica of a fleet that shares its sources through a store (pipeline.ops.fleet)."""

    store: str
    """The coordination store's URL (redis://host:port/db)."""
    replica: str
    """This replica's id in the fleet (unique among the live replicas)."""
    lease_s: float = 10.0
    """A replica that has not renewed its leases for this long has its sources taken over."""
    namespace: str = "framewire"
    """The prefix of the store's keys: fleets sharing one store use different ones."""
    seed: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    """(source id, `sources:` item) of the config's sources: added to the wanted sources at start."""
    resume: Callable[[Mapping[str, Any]], Mapping[str, Any]] = lambda item: item
    """The item of a source started again (taken over from a replica that died): a file source's with
    `resume: true`, so it continues where its outputs stop."""


class FrameHook(Protocol):
    """Told of each frame once every output wrote it, in the hub's thread (framewire.app.tracing:
    the traced frames' spans, exported); must be quick and must not raise."""

    def frame_done(self, header: Mapping[str, Any]) -> None:
        """The frame's last header: its `source`, `seq`, `trace`, and `ts` with every stage's span,
        each output's included."""

    def close(self) -> None:
        """The job ended (the hub closes): send what is left."""


@dataclass(frozen=True)
class ModelVersion:
    """The model a job's stages run, as an operator names it: its file and the label its records carry."""

    path: str
    version: str
    """The label each frame's record names (`model` in its JSON): `model.version`, else the file's
    name and the start of its SHA-256."""


@dataclass(frozen=True)
class StageUpdate:
    """New specs for some of the job's stages, built by the layer that knows models (a model's new
    version): the hub starts their workers beside the old ones, and they take over (pipeline.hub.swap)."""

    model: ModelVersion
    stages: tuple[StageSpec, ...]
    """The new specs, by the names the job's stages already have, in frame order."""


@dataclass(frozen=True)
class SettingsHooks:
    """Sources' settings changed at run time (lines, zones, thresholds: pipeline.ops.settings): how
    a change is checked, the settings a job starts with, and the file that keeps them."""

    keys: frozenset[str]
    """The keys of a change (also taken beside a `sources:` item by POST /sources)."""
    check: Callable[[str, Any, Mapping[str, Any], tuple[int, int] | None], dict[str, Any]]
    """(source id, the change as sent, its current settings, its frame size if known) -> its new
    settings, whole; raises ConfigError naming the key at fault."""
    initial: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Each source's settings at start (read from `state_file`, checked): applied before any frame."""
    state_file: str | None = None
    """Where every change is kept (JSON, written whole and renamed in place); None: not kept."""
    shown: Callable[[str, Mapping[str, Any]], dict[str, Any]] = lambda source_id, settings: dict(settings)
    """(source id, its settings) -> what applies to it: the settings over the config's own lines and
    zones (GET /sources/{id}, what the console edits)."""


@dataclass(frozen=True)
class Plan:
    """The job, as processes: built by the layer that knows models (framewire.app.compose), run here."""

    stages: tuple[StageSpec, ...]
    """Every stage after decode, in frame order: the middle stages (preprocess, infer, ...), then the
    outputs (`writes_output`: one process each, every frame goes to all of them)."""
    sources: tuple[SourcePlan, ...]
    slot_layout: SlotLayout
    slots_per_source: int = 16
    credits_per_worker: int = 2
    worker_init: Callable[[], None] | None = None
    """Run first thing in every worker process (module-level: it is pickled with the worker's spec)."""
    max_restarts: int = 5
    shutdown_timeout_s: float = 10.0
    skip_failed_frames: bool = True
    ipc_dir: str | None = None
    log_level: int = logging.WARNING
    log_format: str = "text"
    """How the workers log: text or json (pipeline.logs)."""
    http: HttpSettings | None = None
    make_source: Callable[[Mapping[str, Any]], SourcePlan] | None = None
    """Builds a source added at run time from its config (raises ConfigError)."""
    restart_backoff_s: tuple[float, float] = (0.1, 5.0)
    """First and longest delay before a dead worker is started again; doubles each time."""
    stall_timeout_s: float | None = None
    """A worker holding a frame this long is taken as hung and killed (then restarted); None: never."""
    preload: tuple[str, ...] = ()
    """Modules every worker imports, imported once in the fork server that starts them."""
    binds: tuple[tuple[str, str], ...] = ()
    """(config key, endpoint) of each address a worker will bind (a zmq output's): the supervisor
    checks them before it starts any, so one in use fails at once, naming its key."""
    fleet: FleetSettings | None = None
    """A replica of a fleet: its sources come from the store (then `sources` is empty); None: alone."""
    frame_hook: FrameHook | None = None
    """Told of each finished frame (`tracing:`); None: nothing is done per frame for it."""
    model: ModelVersion | None = None
    """The model the job starts with (`GET /model`); None: the job names none."""
    update_model: Callable[[Mapping[str, Any]], StageUpdate] | None = None
    """Builds the stages that hold the model from a request's body (`POST /model`: `path`, `version`),
    checked as the config's model is (raises ConfigError naming the key); None: this job cannot."""
    settings: SettingsHooks | None = None
    """Sources' settings changed at run time (PATCH /sources/{id}); None: they cannot change."""

    def __post_init__(self) -> None:
        stagespec.check_specs(self.stages)

    @property
    def middle(self) -> tuple[StageSpec, ...]:
        return stagespec.middle(self.stages)

    @property
    def outputs(self) -> tuple[StageSpec, ...]:
        return stagespec.outputs(self.stages)

    @property
    def stage_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.middle)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.outputs)

    def spec(self, stage: str) -> StageSpec:
        """The spec of the stage (or output) called `stage`; KeyError if the job has none."""
        for spec in self.stages:
            if spec.name == stage:
                return spec
        raise KeyError(stage)

    def credits_for(self, stage: str) -> int:
        """Frames a worker of `stage` may hold: an output at least 4 (it is one process)."""
        spec = self.spec(stage)
        if spec.writes_output:
            return max(4, self.credits_per_worker)
        return spec.credits if spec.credits is not None else self.credits_per_worker


@dataclass
class Report:
    """How a job ended."""

    exit_code: int = 0
    error: str | None = None
    frames: dict[str, int] = field(default_factory=dict)
    """Frames every output wrote, per source."""
    read: dict[str, int] = field(default_factory=dict)
    """Frames each source's decode worker delivered (its end of stream says how many)."""
    failed: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    source_errors: dict[str, str] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    reconnects: dict[str, int] = field(default_factory=dict)
    stale: dict[str, int] = field(default_factory=dict)
    """Frames dropped because they reached inference after the source's max_staleness_ms (also in
    `dropped`, which counts every drop)."""
    overflow: dict[str, int] = field(default_factory=dict)
    """Frames of live sources dropped while they waited for a worker, beyond what their
    `max_waiting` add up to (also in `dropped`)."""
    offline_s: dict[str, float] = field(default_factory=dict)
    """Seconds live sources spent reconnecting, in gaps that ended."""
    active_s: dict[str, float] = field(default_factory=dict)
    """Seconds each source ran: from its first frame in to its last frame written, so that its rate
    leaves out the time the job waited before it was added and after it ended."""
    rejected: dict[str, dict[str, int]] = field(default_factory=dict)
    """Bad messages a ZeroMQ source dropped, by reason."""
    over_budget: dict[str, int] = field(default_factory=dict)
    """Frames output later than their source's latency_budget_ms (sources with a budget only)."""
    outputs: dict[str, dict[str, int]] = field(default_factory=dict)
    """Each output's running totals at its end, by output name (`Stage.counters`: a sink's sent,
    delivered, dropped, failed, reconnects...); outputs without counters are not listed."""
    elapsed_s: float = 0.0
    stopped: bool = False

    def conclude(self) -> None:
        """The exit code and error of a job that ended without failing: 1 when a source failed or
        frames were passed on unprocessed."""
        if self.exit_code != 0:
            return
        if self.source_errors:
            self.exit_code = 1
            first, *others = self.source_errors
            self.error = self.source_errors[first]
            if others:
                self.error += f" (sources {', '.join(others)} failed too: see the log)"
        elif any(self.failed.values()):
            self.exit_code = 1
            total = sum(self.failed.values())
            self.error = f"{total} frame(s) could not be processed and were passed on unprocessed"
