"""`triton-repo`: a Triton Inference Server model repository for a config's model(s).

    python run_pipeline.py triton-repo -c configs/ocr.yaml -o models
    docker run --rm -p 8001:8001 -v "$PWD/models:/models" nvcr.io/nvidia/tritonserver:24.10-py3 \\
        tritonserver --model-repository=/models

One folder per model (the main model and each secondary model of a cascade): `config.pbtxt` and
`<version>/model.onnx` (or `model.plan`). The model written is the one framewire's own engines load:
the task's dynamic axes and a dynamic batch (where `engines.batch_rewrite` proves the graph keeps the
frames apart), so a daemon with `backend: triton` sends Triton the same tensors. Inputs and outputs
(names, types, dims) are read from that model; instance groups come from `engine.devices` and
`engine.processes_per_device`; dynamic batching from the flags or `engine.max_batch` / `max_delay_ms`.
The text is written here, not through tritonclient's protobuf classes: the command needs no extra.
"""

from __future__ import annotations

import argparse
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framewire.config import Config
    from framewire.pipeline.wire.tensors import TensorSpec

PLATFORMS = {"onnxruntime": "onnxruntime_onnx", "tensorrt": "tensorrt_plan", "openvino": "openvino"}
"""`--platform` short names and Triton's platform names (either is accepted); Triton's OpenVINO is a
backend (`backend: "openvino"`), which reads the same ONNX file."""
MODEL_FILES = {"onnxruntime_onnx": "model.onnx", "tensorrt_plan": "model.plan", "openvino": "model.onnx"}
"""Triton's default model file name per platform."""
CROSS_CLIENT_BATCH = 8
"""Default max_batch_size when the config batches less: Triton batches requests of every client."""
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_TYPES = {
    "bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "uint16": "TYPE_UINT16", "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64", "int8": "TYPE_INT8", "int16": "TYPE_INT16", "int32": "TYPE_INT32",
    "int64": "TYPE_INT64", "float16": "TYPE_FP16", "float32": "TYPE_FP32", "float64": "TYPE_FP64",
    "object": "TYPE_STRING",
}  # fmt: skip


def register(sub: Any, add_config_args: Callable[[argparse.ArgumentParser], None]) -> None:
    parser = sub.add_parser(
        "triton-repo",
        help="write a Triton Inference Server model repository for the config's model(s)",
        description="Write <repo>/<name>/config.pbtxt and <repo>/<name>/<version>/model.onnx (or model.plan) "
        "for model.path and every secondary model, as framewire's own engines load them. "
        "docs/guides/triton-repo.md says how to serve it.",
    )
    add_config_args(parser)
    parser.add_argument("-o", "--output", required=True, metavar="REPO", help="the model repository folder")
    parser.add_argument(
        "--platform", choices=sorted({*PLATFORMS, *PLATFORMS.values()}),
        help="onnxruntime (onnxruntime_onnx; the default), tensorrt (tensorrt_plan: needs --plan) or "
        "openvino (Triton's OpenVINO backend: engine.threads, streams and precision bf16 as its "
        "parameters; the default when engine.backend is openvino)",
    )  # fmt: skip
    parser.add_argument("--name", help="the main model's name in Triton (default: its file name without .onnx)")
    parser.add_argument(
        "--secondary-name", action="append", default=[], metavar="SECONDARY=NAME",
        help="a secondary model's name in Triton (default: its file name without .onnx); repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--max-batch", type=int, metavar="N",
        help=f"max_batch_size (default: engine.max_batch, at least {CROSS_CLIENT_BATCH}: Triton batches "
        "across clients; a secondary model: its crops per inference, at least as many)",
    )  # fmt: skip
    parser.add_argument(
        "--preferred-batch", type=int, action="append", default=[], metavar="N",
        help="dynamic batching: a preferred batch size, repeatable (default: engine.max_batch if above 1)",
    )  # fmt: skip
    parser.add_argument(
        "--queue-delay-us", type=int, metavar="US",
        help="dynamic batching: max_queue_delay_microseconds (default: engine.max_delay_ms x 1000)",
    )  # fmt: skip
    parser.add_argument(
        "--instances", choices=("cpu", "gpu"),
        help="KIND_CPU or KIND_GPU instance groups (default: gpu when engine.backend is tensorrt or "
        "engine.providers name cuda or tensorrt, or with --platform tensorrt; else cpu)",
    )  # fmt: skip
    parser.add_argument(
        "--plan", action="append", default=[], metavar="[SECONDARY=]FILE",
        help="--platform tensorrt: the TensorRT engine built for the target GPU and Triton's TensorRT "
        "version, for the main model (FILE) or a secondary one (SECONDARY=FILE); repeatable",
    )  # fmt: skip
    parser.add_argument("--version", type=int, default=1, metavar="N", help="the model version folder (default: 1)")
    parser.add_argument(
        "--link", action="store_true",
        help="symlink the ONNX file where framewire serves it unchanged, instead of copying it "
        "(a repository mounted into a container needs copies)",
    )  # fmt: skip
    parser.add_argument("--force", action="store_true", help="overwrite a version folder that exists")
    parser.set_defaults(handler=triton_repo)


@dataclass(frozen=True)
class Tensor:
    """One input or output as config.pbtxt declares it: dims without the batch when batching."""

    name: str
    data_type: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class Entry:
    """One model of the repository: where it comes from, and what its config.pbtxt says."""

    key: str  # the config key it comes from: model, secondary.<i>
    name: str
    platform: str
    source: Path
    axes: Mapping[str, tuple[int, ...]]
    inputs: tuple[Tensor, ...] = ()
    outputs: tuple[Tensor, ...] = ()
    max_batch_size: int = 0
    preferred: tuple[int, ...] = ()
    queue_delay_us: int = 0
    instance_kind: str = "KIND_CPU"
    count: int = 1
    gpus: tuple[int, ...] = ()
    parameters: tuple[tuple[str, str], ...] = ()
    accelerator: tuple[tuple[str, str], ...] | None = None
    plan: Path | None = None
    unchanged: bool = False  # framewire serves the file as it is: --link may link it


def triton_repo(args: argparse.Namespace) -> int:
    from framewire.app.commands import load_job
    from framewire.app.compose.plan import check

    config = load_job(args)
    check(config)
    backend = getattr(config.engine.backend, "value", config.engine.backend)
    platform = args.platform or ("openvino" if backend == "openvino" else "onnxruntime")
    args.platform = PLATFORMS.get(platform, platform)
    entries = [_described(entry, args) for entry in _entries(config, args)]
    repo = Path(args.output)
    _check_writable(repo, entries, args)
    for entry in entries:
        _write(repo, entry, args)
        print(_summary(repo, entry))
    print(f"{repo}: {len(entries)} model(s); serve it with tritonserver --model-repository={repo} "
          "(docs/guides/triton-repo.md)")
    return 0


def _entries(config: Config, args: argparse.Namespace) -> list[Entry]:
    """The main model and each secondary one, named, with their axes, batching and instances."""
    from framewire.app.compose.cascade import build_secondaries
    from framewire.app.compose.model import build_task
    from framewire.engines.batch_rewrite import with_batch_axis
    from framewire.pipeline.errors import ConfigError

    names = _pairs(args.secondary_name, "--secondary-name", [s.name for s in config.secondary])
    plans = _plans(args.plan, [s.name for s in config.secondary])
    task = build_task(config)
    main = _base(config, args, "model", config.model.path, args.name, config.engine.max_batch)
    entries = [replace(main, axes=with_batch_axis(task.dynamic_axes(), task.input_name), plan=plans.get(""))]
    for i, (item, secondary) in enumerate(zip(config.secondary, build_secondaries(config), strict=True)):
        crops = item.max_batch or item.max_objects
        entry = _base(config, args, f"secondary.{i}", item.path, names.get(item.name), crops)
        axes = with_batch_axis(secondary.task.dynamic_axes(), secondary.task.input_name)
        entries.append(replace(entry, axes=axes, plan=plans.get(item.name)))
    seen: dict[str, str] = {}
    for entry, flag in zip(entries, ["FILE", *(f"{s.name}=FILE" for s in config.secondary)], strict=True):
        if entry.name in seen:
            raise ConfigError(
                f"{entry.key}: Triton model name {entry.name!r} is taken by {seen[entry.name]}: "
                f"give one of them another (--name, --secondary-name SECONDARY=NAME)"
            )
        seen[entry.name] = entry.key
        if entry.platform == "tensorrt_plan" and entry.plan is None:
            raise ConfigError(
                f"{entry.key}: --platform tensorrt needs the TensorRT engine built on the target GPU with "
                f"the Triton release's TensorRT (--plan {flag}; docs/guides/triton-repo.md says how)"
            )
    return entries


def _base(config: Config, args: argparse.Namespace, key: str, path: str, name: str | None, batch: int) -> Entry:
    """An entry's name, platform, batching and instance groups, from the flags and `engine:`."""
    from framewire.pipeline.errors import ConfigError

    engine = config.engine
    name = name or _default_name(Path(path))
    if not _NAME.match(name):
        raise ConfigError(f"{key}: {name!r} is not a usable Triton model name (letters, digits, _ . -)")
    max_batch = args.max_batch if args.max_batch is not None else max(batch, CROSS_CLIENT_BATCH)
    # A cascade's crops come in any number a frame: only the main model's batch is worth preferring.
    preferred = tuple(args.preferred_batch) or ((batch,) if key == "model" and 1 < batch <= max_batch else ())
    delay = args.queue_delay_us if args.queue_delay_us is not None else round(engine.max_delay_ms * 1000)
    if max_batch < 1 or delay < 0 or args.version < 1:
        raise ConfigError("--max-batch and --version must be at least 1, --queue-delay-us at least 0")
    if max_batch < batch:
        what = "engine.max_batch" if key == "model" else f"{key}.max_batch, or max_objects"
        raise ConfigError(
            f"{key}: --max-batch {max_batch} is below the batch framewire sends ({batch}: {what}): "
            "Triton would refuse those requests"
        )
    if any(not 1 <= size <= max_batch for size in preferred):
        raise ConfigError(
            f"--preferred-batch {list(preferred)}: each must be between 1 and max_batch_size {max_batch}"
        )
    gpu = _on_gpu(config, args)
    entry = Entry(key, name, args.platform, Path(path), {}, max_batch_size=max_batch, preferred=preferred,
                  queue_delay_us=delay, count=engine.processes_per_device)  # fmt: skip
    if gpu:
        entry = replace(entry, instance_kind="KIND_GPU", gpus=tuple(engine.devices))
    elif engine.threads > 0 and args.platform == "onnxruntime_onnx":
        entry = replace(entry, parameters=(("intra_op_thread_count", str(engine.threads)),))
    if args.platform == "openvino":
        entry = replace(entry, parameters=_openvino_parameters(config))
    if gpu and args.platform == "onnxruntime_onnx" and "tensorrt" in _providers(config):
        entry = replace(entry, accelerator=_trt_accelerator(config))
    return entry


def _on_gpu(config: Config, args: argparse.Namespace) -> bool:
    from framewire.pipeline.errors import ConfigError

    if args.platform == "tensorrt_plan":
        if args.instances == "cpu":
            raise ConfigError("--instances cpu: a TensorRT plan (--platform tensorrt) runs on GPUs only")
        return True
    if args.instances:
        return bool(args.instances == "gpu")
    return bool({"cuda", "tensorrt"} & set(_providers(config)))


def _providers(config: Config) -> tuple[str, ...]:
    """The providers the config asks for: `backend: tensorrt` counts as TensorRT."""
    backend = getattr(config.engine.backend, "value", config.engine.backend)
    return ("tensorrt",) if backend == "tensorrt" else tuple(config.engine.providers)


def _openvino_parameters(config: Config) -> tuple[tuple[str, str], ...]:
    """Triton's OpenVINO backend parameters (its README's names) of `engine:`: streams and threads
    per instance, latency or throughput, and bf16 where the config asks for it by name."""
    engine = config.engine
    params = [
        ("NUM_STREAMS", str(engine.streams) if engine.streams else "AUTO"),
        ("PERFORMANCE_HINT", "LATENCY" if engine.streams == 1 else "THROUGHPUT"),
    ]
    if engine.threads:
        params.append(("INFERENCE_NUM_THREADS", str(engine.threads)))
    if engine.precision == "bf16":
        params.append(("HINT_BF16", "YES"))
    return tuple(params)


def _trt_accelerator(config: Config) -> tuple[tuple[str, str], ...]:
    """ONNX Runtime's TensorRT provider inside Triton, at the config's precision."""
    from framewire.pipeline.errors import ConfigError

    precision = "fp32" if config.engine.precision == "auto" else config.engine.precision
    if precision == "int8":
        raise ConfigError(
            "engine.precision: int8 needs a calibration table Triton's ONNX Runtime backend does not take "
            "from framewire: use fp16 or fp32 here, or --platform tensorrt with an int8 plan"
        )
    workspace = config.engine.workspace_mb * 1024 * 1024
    return (("precision_mode", precision.upper()), ("max_workspace_size_bytes", str(workspace)))


def _default_name(path: Path) -> str:
    stem = path.name.removesuffix(".onnx")
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem).lstrip(".-") or "model"


def _pairs(values: Sequence[str], flag: str, secondaries: Sequence[str]) -> dict[str, str]:
    """`SECONDARY=VALUE` flags by secondary name; an unknown name is a usage error."""
    from framewire.pipeline.errors import UsageError

    out = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not rest:
            raise UsageError(f"{flag} {value!r}: expected SECONDARY=VALUE")
        if key not in secondaries:
            known = ", ".join(secondaries) or "none"
            raise UsageError(
                f"{flag} {value!r}: the config has no secondary model {key!r} (secondary names: {known})"
            )
        out[key] = rest
    return out


def _plans(values: Sequence[str], secondaries: Sequence[str]) -> dict[str, Path]:
    """`--plan FILE` (key "") and `--plan SECONDARY=FILE`; every file must exist."""
    from framewire.pipeline.errors import UsageError

    main = [v for v in values if v.partition("=")[0] not in secondaries]
    if len(main) > 1:
        raise UsageError(f"--plan: {len(main)} plans for the main model ({', '.join(main)}): give one")
    plans = {"": Path(main[0])} if main else {}
    named = _pairs([v for v in values if v not in main], "--plan", secondaries)
    plans.update({key: Path(value) for key, value in named.items()})
    for path in plans.values():
        if not path.is_file():
            raise UsageError(f"--plan: file not found: {path}")
    return plans


def _described(entry: Entry, args: argparse.Namespace) -> Entry:
    """The entry with its tensors read from the model as framewire loads it; a model whose batch
    cannot be made dynamic gets max_batch_size 0 (its full shapes, no dynamic batching)."""
    from framewire.engines.onnx_model import describe

    as_loaded = describe(entry.source, entry.axes)
    unchanged = describe(entry.source) == as_loaded
    inputs, outputs = as_loaded
    batched = all(t.shape and _free(t.shape[0]) for t in (*inputs, *outputs))
    if not batched:
        print(
            f"{entry.key}: {entry.source} keeps its fixed batch (framewire cannot prove its graph keeps "
            "frames apart): max_batch_size 0, no dynamic batching"
        )
        entry = replace(entry, max_batch_size=0, preferred=())
    skip = 1 if batched else 0
    return replace(
        entry,
        inputs=tuple(_tensor(t, skip, entry.key) for t in inputs),
        outputs=tuple(_tensor(t, skip, entry.key) for t in outputs),
        unchanged=unchanged,
    )


def _tensor(spec: TensorSpec, skip: int, key: str) -> Tensor:
    from framewire.pipeline.errors import ConfigError

    dtype = _TYPES.get(spec.dtype.name if spec.dtype.kind != "O" else "object")
    if dtype is None:
        raise ConfigError(f"{key}: tensor {spec.name!r} has type {spec.dtype}, which Triton has no type for")
    if not spec.shape:
        raise ConfigError(f"{key}: tensor {spec.name!r} declares no shape: Triton needs its dims")
    dims = tuple(-1 if _free(d) else int(d) for d in spec.shape[skip:])  # type: ignore[arg-type]
    return Tensor(spec.name, dtype, dims)


def _free(dim: int | str | None) -> bool:
    """A dim the model leaves open: symbolic, unknown, or -1 (as Paddle's exporter writes it)."""
    return not isinstance(dim, int) or dim < 0


def _check_writable(repo: Path, entries: Sequence[Entry], args: argparse.Namespace) -> None:
    """Refuse before writing anything: a file where the repository goes, or a version that exists."""
    from framewire.pipeline.errors import UsageError

    if repo.exists() and not repo.is_dir():
        raise UsageError(f"--output {repo}: exists and is not a folder")
    for entry in entries:
        version = repo / entry.name / str(args.version)
        if version.exists() and not args.force:
            raise UsageError(f"{version}: exists (--force overwrites it, --version N writes another version)")


def _write(repo: Path, entry: Entry, args: argparse.Namespace) -> None:
    from framewire.engines.onnx_model import load_model_bytes

    version = repo / entry.name / str(args.version)
    if version.exists():
        shutil.rmtree(version)
    version.mkdir(parents=True)
    target = version / MODEL_FILES[entry.platform]
    if entry.plan is not None:
        shutil.copyfile(entry.plan, target)
    elif args.link and entry.unchanged:
        target.symlink_to(entry.source.resolve())
    else:
        target.write_bytes(load_model_bytes(entry.source, entry.axes))
    (repo / entry.name / "config.pbtxt").write_text(render(entry))


def render(entry: Entry) -> str:
    """config.pbtxt (protobuf text format of Triton's ModelConfig) for one entry."""
    kind = f'backend: "{entry.platform}"' if entry.platform == "openvino" else f'platform: "{entry.platform}"'
    lines = [f'name: "{entry.name}"', kind, f"max_batch_size: {entry.max_batch_size}"]
    lines += [f'default_model_filename: "{MODEL_FILES[entry.platform]}"'] if entry.platform == "openvino" else []
    for field, tensors in (("input", entry.inputs), ("output", entry.outputs)):
        for t in tensors:
            lines += [f"{field} {{", f'  name: "{_quote(t.name)}"', f"  data_type: {t.data_type}",
                      f"  dims: [ {', '.join(map(str, t.dims))} ]", "}"]  # fmt: skip
    if entry.max_batch_size > 0:
        lines.append("dynamic_batching {")
        lines += [f"  preferred_batch_size: [ {', '.join(map(str, entry.preferred))} ]"] if entry.preferred else []
        lines += [f"  max_queue_delay_microseconds: {entry.queue_delay_us}", "}"]
    lines += ["instance_group {", f"  count: {entry.count}", f"  kind: {entry.instance_kind}"]
    lines += [f"  gpus: [ {', '.join(map(str, entry.gpus))} ]"] if entry.gpus else []
    lines.append("}")
    for key, value in entry.parameters:
        lines += ["parameters {", f'  key: "{key}"', f'  value: {{ string_value: "{value}" }}', "}"]
    if entry.accelerator is not None:
        lines += ["optimization { execution_accelerators {", "  gpu_execution_accelerator {"]
        lines.append('    name: "tensorrt"')
        for key, value in entry.accelerator:
            lines.append(f'    parameters {{ key: "{key}" value: "{value}" }}')
        lines += ["  }", "} }"]
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _summary(repo: Path, entry: Entry) -> str:
    batching = (
        f"max_batch_size {entry.max_batch_size}, queue {entry.queue_delay_us} us"
        + (f", preferred {list(entry.preferred)}" if entry.preferred else "")
        if entry.max_batch_size
        else "no batching"
    )
    where = f"GPUs {list(entry.gpus)}" if entry.gpus else "the CPU"
    tensors = ", ".join(f"{t.name} {t.data_type.removeprefix('TYPE_')} {list(t.dims)}" for t in entry.inputs)
    return (
        f"{repo / entry.name}: {entry.key} {entry.source} as {entry.platform}, {batching}, "
        f"{entry.count} instance(s) per device on {where}; input {tensors}"
    )
