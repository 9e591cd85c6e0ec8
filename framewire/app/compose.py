"""From a validated config to the processes of a job: the one place that wires stages together.

Everything here runs in the supervisor process and must stay cheap: the factories it hands out are
called inside each spawned worker, where the sessions, encoders and sockets are created.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import cv2

from framewire.app.audio_plan import audio_need, audio_rate, build_steps, check_audio
from framewire.app.io_check import check_io
from framewire.app.recordings import check_recordings, tap_spec
from framewire.app.preload import PRELOAD
from framewire.engines.base import Engine
from framewire.engines.batch_rewrite import with_batch_axis
from framewire.engines.registry import OpenOptions, choose_backend, device_of, infer_workers, open_engine, preflight
from framewire.config import (
    Config, JsonlOutput, SourceBase, SourceConfig, VideoFileOutput, ZmqOutput, output_name, resolve_path,
)  # fmt: skip
from framewire.config.engine import Backend
from framewire.config.job import resume_problem
from framewire.media import yuv
from framewire.media.jpeg import jpeg_encoder
from framewire.config.keys import suggest
from framewire.config.video_out import HlsOutput
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import FrameSource, Stage
from framewire.pipeline.plan import HttpSettings, Plan, SourceOptions, SourcePlan
from framewire.pipeline.names import COMPOSITE, INFER, OUTPUTS, POSTPROCESS, PREPROCESS, SECONDARY, TRACK
from framewire import registry
from framewire.pipeline import paths
from framewire.pipeline.uris import local_path, redact, source_kind
from framewire.sources import AudioNeed, build_source
from framewire.sources.file import FileSource
from framewire.sources.packets import tap_plan
from framewire.sources.resume import ResumeTargets
from framewire.stages.analytics import Analytics
from framewire.stages.cascade import CascadeStage, Secondary
from framewire.stages.composite import Composite, CompositeStage, resolve_composite
from framewire.stages.fused import Fused, Outputs
from framewire.stages.infer import Infer
from framewire.stages.postprocess import Postprocess
from framewire.stages.preprocess import Preprocess
from framewire.stages.schedule import Schedule, Scheduled
from framewire.stages.steps import resolve_step
from framewire.stages.steps.base import Step
from framewire.stages.tasks import resolve_object_task, resolve_task
from framewire.stages.tasks.base import ModelInfo, Task
from framewire.stages.tasks.detection_formats import detector_evidence
from framewire.stages.tasks.labels import class_filter
from framewire.stages.tracking import TrackStage, resolve_tracking

log = logging.getLogger(__name__)


def build_task(config: Config) -> Task:
    """The primary model's task, bound to what its model file says (input size, format, labels)."""
    name = config.model.task if config.model.task is not None else task_from_model(config)
    task = resolve_task(name, config.model.params)
    task.use_model(model_info(config.model.path, "model.path"))
    return task


def task_from_model(config: Config) -> str:
    """The task of a `model:` that names none, where the model file shows it beyond doubt: an
    Ultralytics detect export or a YOLOv8-style detector (detection_formats.detector_evidence)."""
    for key in config.model.params:  # `taks: detection` is a misspelt task, not a task parameter
        if suggest(key, ["task"]):
            raise ConfigError(f"model.{key}: unknown key (did you mean task?)")
    info = model_info(config.model.path, "model.path")
    found, why = detector_evidence(info.inputs, info.outputs, info.metadata)
    if not found:
        raise ConfigError(f"model.task: required key is missing ({why})")
    log.debug("model.task: detection, from the model (%s)", why)
    return "detection"


def model_info(path: str, key: str) -> ModelInfo:
    """The model file's tensors and metadata (read once per process and file version)."""
    file = Path(path)
    try:
        stat = file.stat()
    except OSError:
        raise ConfigError(f"{key}: model file not found: {path}") from None
    return _model_info(str(file.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _model_info(path: str, mtime_ns: int, size: int) -> ModelInfo:
    from framewire.engines.onnx_model import read_model

    inputs, outputs, metadata = read_model(path)
    return ModelInfo(path, inputs, outputs, metadata)


def build_composites(config: Config) -> list[Composite]:
    return [resolve_composite(c.kind, c.params, index) for index, c in enumerate(config.composite)]


def build_secondaries(config: Config) -> list[Secondary]:
    """The secondary models' tasks, each bound to its model file; errors name `secondary.<index>`."""
    out = []
    for i, item in enumerate(config.secondary):
        key = f"secondary.{i}"
        task = resolve_object_task(item.task, item.params, key)
        task.use_model(model_info(item.path, f"{key}.path"))
        out.append(
            Secondary(
                item.name, task, item.classes, item.min_size, item.max_objects, item.max_batch, item.expand,
                item.reinfer_every,
            )
        )
    return out


# Factories: module-level so that spawn can pickle them by reference.


def _scheduled(config: Config, stage: Stage, *, last: bool = False) -> Stage:
    """The stage as is, or skipping the frames `tracking.interval` leaves to the tracker."""
    interval = config.tracking.interval if config.tracking else 0
    return Scheduled(stage, Schedule(interval), last=last) if interval else stage


def _step(config: Config, index: int) -> Step:
    return resolve_step(config.steps[index], index, config.engine, audio_rate(config))


def _preprocess(config: Config, own_input: int = 0) -> Stage:
    return _scheduled(config, Preprocess(build_task(config), own_input))


def own_model_input(config: Config) -> bool:
    """Whether the model input lives in the infer worker's own memory, not in the frame pool: when
    preprocess runs in the infer process (`stages.fuse`) and the engine does not read the pool as
    pinned memory (TensorRT does). The pool then has no `input` region (for YuNet at 640x288, 2.2
    MB a slot against 0.5 MB of the frame), and the model reads a buffer still in the cache."""
    return config.stages.fuse and choose_backend(config.engine, quiet=True).backend is not Backend.TENSORRT


def _engine(config: Config, index: int = 0) -> Engine:
    task = build_task(config)
    axes = engine_axes(config, task)
    return open_engine(config.engine, config.model.path, axes, engine_options(config, task, index))


def engine_axes(config: Config, task: Task) -> dict[str, tuple[int, ...]]:
    """The input axes the engine makes dynamic: the task's, plus the batch when batching is on (a
    batch-of-1 export is rewritten where its graph allows it, else it runs frame by frame)."""
    axes = task.dynamic_axes()
    return with_batch_axis(axes, task.input_name) if config.engine.max_batch > 1 else axes


def engine_options(config: Config, task: Task, index: int = 0) -> OpenOptions:
    """Infer worker `index`'s GPU, and the task's data a TensorRT build needs (read only if built)."""
    from framewire.app.engine_inputs import calibration_batches, source_input_shapes

    calibration = config.engine.calibration
    return OpenOptions(
        device=device_of(config.engine, index),
        input_shapes=functools.partial(source_input_shapes, task, config.sources),
        calibration=(
            functools.partial(calibration_batches, task, calibration.video, calibration.frames)
            if calibration.video
            else None
        ),
    )


def _infer(config: Config) -> Stage:
    infer = Infer(
        build_task(config),
        functools.partial(_engine, config),
        max_batch=config.engine.max_batch,
        max_delay_ms=config.engine.max_delay_ms,
    )
    return _scheduled(config, infer)


def _postprocess(config: Config) -> Stage:
    return _scheduled(config, Postprocess(build_task(config)), last=True)


def _track(config: Config) -> TrackStage:
    assert config.tracking is not None
    analytics = Analytics(config.analytics) if config.analytics else None
    return TrackStage(resolve_tracking(config.tracking.params), analytics)


def _secondary_engine(config: Config, secondary: int, index: int = 0) -> Engine:
    """A secondary model's engine in worker `index`: its task's axes plus the batch of crops."""
    item = config.secondary[secondary]
    task = build_secondaries(config)[secondary].task
    axes = with_batch_axis(task.dynamic_axes(), task.input_name)
    options = OpenOptions(device=device_of(config.engine, index), secondary=item.name)
    return open_engine(config.engine, item.path, axes, options)


def _cascade(config: Config) -> CascadeStage:
    return CascadeStage(build_secondaries(config), functools.partial(_secondary_engine, config))


def _after_model(config: Config) -> list[tuple[str, int, Any]]:
    """The stages between postprocess and composite: tracking, then the secondary models."""
    stages: list[tuple[str, int, Any]] = []
    if config.tracking:
        stages.append((TRACK, config.stages.track.workers, functools.partial(_track, config)))
    if config.secondary:
        stages.append((SECONDARY, config.stages.secondary.workers, functools.partial(_cascade, config)))
    return stages


def _composite(config: Config) -> CompositeStage:
    return CompositeStage(build_composites(config))


def _fused(config: Config) -> Fused:
    stages: list[tuple[str, Any]] = [
        *((step.stage, _step(config, i)) for i, step in enumerate(config.steps)),
        (PREPROCESS, _preprocess(config, max(1, config.engine.max_batch) if own_model_input(config) else 0)),
        (INFER, _infer(config)),
        (POSTPROCESS, _postprocess(config)),
    ]
    stages += [(name, factory()) for name, _, factory in _after_model(config)]
    if config.composite:
        stages.append((COMPOSITE, _composite(config)))
    return Fused(stages)


def _outputs(config: Config) -> Outputs:
    return Outputs([(output_name(i, out.kind), _output(config, i)) for i, out in enumerate(config.outputs)])


def _output(config: Config, index: int) -> Any:
    """Output `index`, built in its worker by the class its kind names (framewire.registry.OUTPUTS)."""
    out = config.outputs[index]
    if isinstance(out, VideoFileOutput) and out.threads == "auto":
        out = out.model_copy(update={"threads": encoder_threads(config)})
    return registry.OUTPUTS.get(out.kind, f"outputs.{index}.kind")(out)


def encoder_threads(config: Config, cores: int | None = None) -> int:
    """`threads: auto` of a video output: 1 when the job's processes (a decode per source, the
    infer workers, the output processes) are at least as many as the cores, else 0 (x264's own
    choice). x264's threads spend 20-40% more CPU on the same frames (docs/benchmarks.md): worth it
    only where cores would otherwise be idle."""
    cores = cores or len(os.sched_getaffinity(0))
    outputs = 1 if config.stages.fuse_outputs else len(config.outputs)
    processes = len(config.sources) + infer_workers(config.engine, quiet=True) + outputs  # in an output worker
    return 1 if processes >= cores else 0


def _source(source: SourceBase, need: AudioNeed = AudioNeed(), slots: int = 16) -> FrameSource:
    # A file, a live stream or camera, or a ZeroMQ source; with audio, held for the steps' `need`.
    return build_source(source, need, slots)


def slot_layout(config: Config, source_id: str, info: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """The frame pool regions of a source: its frames, the model input, and the composited frame."""
    width, height = int(info["width"]), int(info["height"])
    spec = build_task(config).input_spec(width, height)
    regions: dict[str, tuple[tuple[int, ...], str]] = {"image": ((height, width, 3), "uint8")}
    if not own_model_input(config):
        regions["input"] = (tuple(int(d) for d in spec.shape), str(spec.dtype))  # type: ignore[arg-type]
    if yuv_frames(config, (width, height)) and width % 2 == 0 and height % 2 == 0:
        regions["image"] = (yuv.shape(width, height), "uint8")
    if config.composite:
        regions["output"] = (regions["image"][0], "uint8")
    return regions


YUV_SOURCES = frozenset({"file", "stream", "camera"})
"""Sources read by PyAV, whose frames write their planes into a slot as they are."""
YUV_OUTPUTS = frozenset({"video_file", "jsonl", "mqtt", "kafka", "webhook"})
"""Outputs that take I420 frames (video_file encodes them as they are) or never look at pixels."""


def yuv_frames(config: Config, size: tuple[int, int] | None = None) -> bool:
    """Whether the job keeps its frames as decoded, I420 (framewire.media.yuv; `stages.frame_format`):
    every stage takes them, and it saves a conversion. With a video output, x264 takes the frames
    as they are; without one, a source whose frames the model scales down to half or a third
    (`size`, 1280x720 or 1920x1080 to 640x360: `Task.scales_planes`) has its planes scaled first
    and converted at the model's size, instead of converted whole by the decoder and scaled after."""
    if config.stages.frame_format != "auto" or config.steps or config.secondary:
        return False
    if not all(s.kind in YUV_SOURCES for s in config.sources):  # others hand over BGR arrays
        return False
    if not all(o.kind in YUV_OUTPUTS or (isinstance(o, ZmqOutput) and not o.jpeg) for o in config.outputs):
        return False
    if not all(getattr(c, "takes_yuv", False) for c in build_composites(config)):
        return False
    task = build_task(config)
    if type(task).preprocess_frame is not Task.preprocess_frame:  # it reads pixels its own way
        return False
    if any(isinstance(o, VideoFileOutput) for o in config.outputs):
        return True
    return size is not None and task.scales_planes(*size)


def check(config: Config) -> Task:
    """Everything `validate` checks without running: task and composite parameters, the model file
    and that its inputs and outputs fit the task."""
    from framewire.engines.onnx_model import describe

    task = build_task(config)
    build_composites(config)
    steps = build_steps(config)
    model = Path(config.model.path)
    if not model.is_file():
        raise ConfigError(f"model.path: model file not found: {config.model.path}")
    inputs, outputs = describe(str(model), task.dynamic_axes())
    task.check_model(inputs, outputs)
    check_cascade(config, task)
    check_audio(config, task, steps)
    return task


def check_cascade(config: Config, task: Task) -> None:
    """Secondary models and tracking need a primary that gives boxes, and classes it has."""
    follows = [f"secondary.{i}" for i in range(len(config.secondary))]
    follows += ["tracking"] if config.tracking else []
    if follows and not task.gives_boxes:
        raise ConfigError(
            f"{follows[0]}: needs a model that gives boxes, but model.task {task.name!r} gives none "
            f"(detection, face_detection, text_detection do)"
        )
    labels = task.labels()
    for i, secondary in enumerate(build_secondaries(config)):
        class_filter(secondary.classes, labels, len(labels) if labels else None, f"secondary.{i}.classes")
    if config.tracking:
        params = resolve_tracking(config.tracking.params)
        class_filter(params.classes, labels, len(labels) if labels else None, "tracking.classes")
    check_analytics(config, labels)
    check_recordings(config, labels)


def check_analytics(config: Config, labels: Sequence[str] | None) -> None:
    """Each line's and zone's classes are the model's; pixel points lie inside each local video's frame."""
    for source_id, spec in config.analytics.items():
        for kind, i, _, _, classes in spec.shapes():
            key = f"analytics.{source_id}.{kind}.{i}.classes"
            class_filter(classes, labels, len(labels) if labels else None, key)
        if spec.normalized:
            continue
        size = _frame_size(next(s for s in config.sources if s.id == source_id))
        problem = spec.outside(*size) if size else None
        if problem:
            raise ConfigError(f"analytics.{source_id}.{problem}")


def _frame_size(source: SourceBase) -> tuple[int, int] | None:
    """A local video file's frame size, read from the file; None for streams, cameras and the rest
    (their lines and zones are checked on the first frame, in the tracking stage)."""
    from framewire.media.video_reader import VideoReader

    if not isinstance(source, SourceConfig) or source_kind(source.uri) != "file" or local_path(source.uri) is None:
        return None
    try:
        with VideoReader(source.id, source.uri) as reader:
            info = reader.info
    except Exception:  # an unreadable file is check_io's error to report, with its own key
        return None
    return info.width, info.height


def build_plan(
    config: Config, *, log_level: int = logging.WARNING, log_format: str = "text", check_engine: bool = True,
    check_inputs_outputs: bool = True,
) -> Plan:  # fmt: skip
    """The job's processes. `check_engine=False` skips the backend's preflight, for a `worker`
    command on a host that runs another stage than infer; `check_inputs_outputs=False` skips
    `check_io` (sources are videos, outputs can be written), for a host that runs neither."""
    check(config)
    if check_inputs_outputs:
        check_io(config)
    if check_engine:
        preflight(config.engine, config.model.path)  # no TensorRT / no GPU: one line now, not from every infer worker
    middle: list[tuple[str, int, Any]] = [
        *((step.stage, step.workers, functools.partial(_step, config, i)) for i, step in enumerate(config.steps)),
        (PREPROCESS, config.stages.preprocess.workers, functools.partial(_preprocess, config)),
        (INFER, infer_workers(config.engine), functools.partial(_infer, config)),
        (POSTPROCESS, config.stages.postprocess.workers, functools.partial(_postprocess, config)),
    ]
    middle += _after_model(config)
    if config.composite:
        middle.append((COMPOSITE, config.stages.composite.workers, functools.partial(_composite, config)))
    members: dict[str, tuple[str, ...]] = {}
    if config.stages.fuse:
        members[INFER] = tuple(name for name, _, _ in middle)
        middle = [(INFER, infer_workers(config.engine), functools.partial(_fused, config))]
    outputs = tuple(
        (output_name(i, out.kind), functools.partial(_output, config, i)) for i, out in enumerate(config.outputs)
    )
    if config.stages.fuse_outputs and len(outputs) > 1:
        members[OUTPUTS] = tuple(name for name, _ in outputs)
        outputs = ((OUTPUTS, functools.partial(_outputs, config)),)
    sources = source_plans(config)
    t = config.transport
    return Plan(
        middle=tuple(middle),
        outputs=outputs,
        sources=sources,
        slot_layout=functools.partial(slot_layout, config),
        slots_per_source=t.slots_per_source,
        credits_per_worker=t.credits_per_worker,
        max_restarts=t.max_restarts,
        shutdown_timeout_s=t.shutdown_timeout_s,
        skip_failed_frames=config.stages.on_frame_error == "skip",
        stall_timeout_s=config.stages.stall_timeout_s,
        stage_credits={INFER: max(t.credits_per_worker, 2 * config.engine.max_batch)},
        ipc_dir=t.ipc_dir,
        log_level=log_level,
        log_format=log_format,
        preload=PRELOAD,
        http=_http(config),
        make_source=functools.partial(make_source, config),
        members=members,
        ordered=frozenset(name for name, _, factory in middle if factory().ordered),
        restartable=frozenset(name for name, _, _ in middle),
        worker_init=single_threaded_opencv,
        binds=tuple(
            (f"outputs.{i}.endpoint", out.endpoint) for i, out in enumerate(config.outputs) if isinstance(out, ZmqOutput)
        ),
    )


def source_plans(config: Config) -> tuple[SourcePlan, ...]:
    """Each source's plan, its packets shown to the recording outputs' tap (sources.packets)."""
    spec, slots = tap_spec(config), config.transport.slots_per_source
    return tuple(tap_plan(source_plan(s, audio_need(config), slots, resume_targets(config, s.id)), spec)
                 for s in config.sources)  # fmt: skip


def single_threaded_opencv() -> None:
    """Every worker's first step (`Plan.worker_init`): OpenCV's own thread pool off. The job is
    already spread over processes, and the pool's threads spin while they wait for work, which a
    busy machine pays for (the decode process's CPU a frame fell by a quarter with it off, 8 live
    streams on 2 cores: docs/benchmarks.md, framewire's own cost)."""
    cv2.setNumThreads(1)


def _preview(encode: Any, image: Any) -> bytes:
    """A console preview's JPEG, of a BGR frame or of an I420 one (a job that keeps YUV frames)."""
    return bytes(encode(yuv.to_bgr(image)))


def _http(config: Config) -> HttpSettings | None:
    h = config.http
    if not h.enabled:
        return None
    c = h.console
    hls = tuple(out.path for out in config.outputs if isinstance(out, HlsOutput))
    return HttpSettings(host=h.host, port=h.port, token=h.token, keep_running=h.keep_running, console=c.enabled,
                        encode_preview=functools.partial(_preview, jpeg_encoder(c.preview_width, c.jpeg_quality))
                        if c.enabled else None,
                        preview_fps=c.preview_fps, hls=hls)  # fmt: skip


def resume_targets(config: Config, source_id: str) -> ResumeTargets:
    """The files a resumed source's outputs write, rendered for it (config.job checks they can be)."""
    jsonl = tuple(resolve_path(o.path, source_id) for o in config.outputs if isinstance(o, JsonlOutput))
    video = tuple(paths.render(o.path, source_id) for o in config.outputs if isinstance(o, VideoFileOutput))
    return ResumeTargets(jsonl, video)


MAX_WAITING = 4
"""`max_waiting` of a live source that does not set it: frames of one stream queued in the hub behind
every other stream's when the machine is busy (docs/benchmarks.md, "framewire's own cost")."""


def source_plan(
    source: SourceBase, need: AudioNeed = AudioNeed(), slots: int = 16, resume: ResumeTargets | None = None
) -> SourcePlan:
    """How the decode worker builds and feeds a source; `resume` (a file with `resume: true`): the
    files it goes on from."""
    factory: Any = functools.partial(_source, source, need, slots)
    if resume is not None and isinstance(source, SourceConfig) and source.resume:
        factory = functools.partial(FileSource.resuming, source, resume)
    return SourcePlan(
        source.id,
        factory,
        SourceOptions(
            policy=source.policy,
            realtime=source.realtime,
            max_frames=source.max_frames,
            max_staleness_ms=source.max_staleness_ms,
            latency_budget_ms=source.latency_budget_ms,
            max_waiting=source.max_waiting if source.max_waiting is not None else MAX_WAITING,
        ),
    )


def make_source(config: Config, raw: Mapping[str, Any]) -> SourcePlan:
    """A source added at run time (control API): validated like a `sources:` item of the config."""
    from pydantic import TypeAdapter, ValidationError

    from framewire.app.io_check import check_source
    from framewire.config import describe_validation_error, resolve_inputs
    from framewire.config.sources import Source

    try:  # chosen by kind (or uri) from the registry, as the config file's sources are
        source = TypeAdapter(Source).validate_python(raw)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, "source", model=SourceConfig)) from None
    resolved = resolve_inputs(config.model_copy(update={"sources": (source,)}), [Path(__file__).resolve().parents[2]])
    added = resolved.sources[0]
    if isinstance(added, SourceConfig):  # a plug-in's source checks itself when it opens
        path, kind = local_path(added.uri), source_kind(added.uri)
        if path is not None and kind in ("file", "camera") and not Path(path).exists():
            # Refused now (400) rather than accepted and failed in the decode worker, seen only in the log.
            raise ConfigError(f"source.uri: {kind} not found: {redact(added.uri)}")
        check_source(added, "source.uri")  # a file that is not a video, a camera that is not V4L2
    if source.audio is not None or any(s.audio_span() for s in build_steps(config)):
        check_audio(resolved, build_task(config), build_steps(config))
    problem = resume_problem(config.outputs) if getattr(added, "resume", False) else None
    if problem:  # the job's outputs must fit resuming, as for the config's own sources
        raise ConfigError(f"source.resume: {problem}")
    slots = config.transport.slots_per_source
    plan = source_plan(added, audio_need(config), slots, resume_targets(config, added.id))
    return tap_plan(plan, tap_spec(config))
