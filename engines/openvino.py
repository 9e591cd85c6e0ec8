"""OpenVINO backend: ONNX files and OpenVINO IR (.xml/.bin) on Intel CPUs, GPUs and NPUs behind the
`Engine` interface.

The model is compiled for one frame (batch 1, and the task's input size where the sources all give
one): OpenVINO's CPU plugin is fastest on static shapes. A batch of several frames is split into one
asynchronous infer request per frame, run across the compiled model's streams, and the outputs are
stacked again, so that framewire's dynamic batching works as it does with ONNX Runtime, and a
batch-of-1 export batches too. Compiled models are cached (OpenVINO's CACHE_DIR): a restart imports
the blob instead of compiling again (`loaded_from_cache`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.properties as props
import openvino.properties.hint as hints

from framewire.engines.base import Engine
from framewire.engines.onnx_model import load_model_bytes
from framewire.pipeline.errors import ConfigError, EngineError
from framewire.pipeline.wire.tensors import Dim, TensorSpec

log = logging.getLogger(__name__)

DEVICES = ("CPU", "GPU", "NPU", "AUTO")
"""The device families `engine.device` names; `GPU.1` or `AUTO:GPU,CPU` choose among them."""

HINTS: dict[str, str] = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}
"""engine.precision -> OpenVINO's INFERENCE_PRECISION_HINT. `auto` and `int8` set none: the device's
own default runs (on a CPU: bf16 where it has AMX, else f32); int8 comes from the model's nodes."""

NAMES: dict[str, str] = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}
"""OpenVINO's element types, by name, as framewire's precisions."""

DEFAULT_CACHE_DIR = "~/.cache/framewire/engines"

# ONNX QuantizeLinear/DequantizeLinear pairs (`quantize`) and NNCF's int8 both read as FakeQuantize.
_QUANTIZED_OPS = frozenset({"FakeQuantize"})

InputShapes = Callable[[], Mapping[str, Sequence[tuple[int, ...]]]]


class OpenVinoEngine(Engine):
    """One model compiled by OpenVINO for `device`.

    `precision` is framewire's (`auto`, fp32, bf16, fp16, int8); `precision_run` says what the
    device actually runs, which may differ (a CPU without bf16 runs f32: one warning says so).
    `threads` (0: OpenVINO's choice) and `streams` (0: OpenVINO's choice for throughput) are this
    process's. `dynamic_axes` asks for dynamic dims as for ONNX Runtime (axis 0: batches, split
    across requests); `input_shapes` gives the shapes the sources feed, to compile static ones.
    """

    backend = "openvino"

    def __init__(
        self,
        model_path: str,
        *,
        device: str = "CPU",
        precision: str = "auto",
        threads: int = 0,
        streams: int = 1,
        dynamic_axes: Mapping[str, tuple[int, ...]] | None = None,
        input_shapes: InputShapes | None = None,
        cache_dir: str | None = None,
        cache: bool = True,
    ) -> None:
        self.model_path = str(model_path)
        if precision not in (*HINTS, "auto", "int8"):
            raise ConfigError(f"engine.precision: {precision!r} is not one of auto, {', '.join(HINTS)}, int8")
        if threads < 0 or streams < 0:
            raise ConfigError(f"engine.threads and engine.streams must be >= 0, got {threads} and {streams}")
        core = ov.Core()
        self.device = device = check_device(core, device)
        if cache:
            _use_cache(core, cache_dir)
        model = read(core, self.model_path, dynamic_axes or {})
        if precision == "int8" and not is_quantized(model):
            raise ConfigError(
                f"engine.precision: int8 needs a quantized model, and {self.model_path} has no quantized "
                "nodes (make one: framewire quantize --backend openvino)"
            )
        self._split = _fix_shapes(model, self.model_path, dynamic_axes or {}, input_shapes)
        settings = compile_settings(core, device, precision, threads, streams)
        try:
            compiled = core.compile_model(model, device, settings)
        except RuntimeError as exc:
            raise EngineError(
                f"model {self.model_path}: OpenVINO could not compile it for {device}: {reason(exc)}"
            ) from None
        self._compiled: ov.CompiledModel | None = compiled
        self.loaded_from_cache = bool(_property(compiled, props.loaded_from_cache, False))
        self.devices = tuple(_property(compiled, props.execution_devices, [device]))
        self.precision_run = _precision_run(compiled, model, device, precision)
        self._requests = [compiled.create_infer_request() for _ in range(_optimal_requests(compiled))]
        self.inputs = tuple(
            spec(port, self.model_path, batched=port.get_any_name() in self._split) for port in model.inputs
        )
        self.outputs = tuple(spec(port, self.model_path, batched=bool(self._split)) for port in model.outputs)
        self._output_names = [spec.name for spec in self.outputs]
        log.info(
            "model %s compiled by OpenVINO %s for %s (%s, %s)%s",
            self.model_path, ov.get_version().split("-")[0], "/".join(self.devices), self.precision_run,
            _describe_streams(compiled), " from the cache" if self.loaded_from_cache else "",
        )  # fmt: skip

    @property
    def provider(self) -> str:
        """What runs the model, e.g. `OpenVINO CPU bf16`: the device(s) and the precision they run."""
        return f"OpenVINO {'/'.join(self.devices)} {self.precision_run}"

    def infer(
        self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Run one batch; a batch of several frames runs as one request per frame, in parallel
        across the streams, and the outputs come back stacked in the frames' order."""
        if self._compiled is None:
            raise EngineError(f"model {self.model_path}: engine is closed")
        names = list(output_names) if output_names is not None else self._output_names
        arrays = {name: np.ascontiguousarray(value) for name, value in feeds.items()}
        count = _batch_of(arrays, self._split)
        try:
            if count <= 1:
                result = self._requests[0].infer(arrays)
                return {name: np.array(result[name]) for name in names}
            return self._infer_split(arrays, names, count)
        except (RuntimeError, KeyError, ValueError, TypeError) as exc:
            described = ", ".join(f"{name!r} {v.dtype} {tuple(v.shape)}" for name, v in arrays.items())
            raise EngineError(
                f"model {self.model_path}: inference failed for input {described}: {reason(exc)}"
            ) from None

    def _infer_split(
        self, arrays: dict[str, np.ndarray], names: list[str], count: int
    ) -> dict[str, np.ndarray]:
        assert self._compiled is not None
        while len(self._requests) < count:  # once per larger batch: a request holds its outputs
            self._requests.append(self._compiled.create_infer_request())
        requests = self._requests[:count]
        for index, request in enumerate(requests):
            one = {
                name: value[index : index + 1] if name in self._split else value
                for name, value in arrays.items()
            }
            request.start_async(one, share_inputs=True)
        parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
        for request in requests:
            request.wait()
            for name in names:
                parts[name].append(np.array(request.get_tensor(name).data))  # a copy: the request is reused
        return {name: np.concatenate(values, axis=0) for name, values in parts.items()}

    def close(self) -> None:
        """Release the compiled model and its requests; `infer` fails afterwards."""
        self._requests = []
        self._compiled = None


def _use_cache(core: ov.Core, cache_dir: str | None) -> None:
    """Compiled models go to (and come back from) `cache_dir`/openvino."""
    directory = Path(cache_dir or DEFAULT_CACHE_DIR).expanduser() / "openvino"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"engine.cache_dir: cannot create {str(directory)!r}: {exc.strerror}") from None
    core.set_property({props.cache_dir: str(directory)})


def check_device(core: ov.Core, device: str) -> str:
    """The device to compile for: `device`, or `AUTO:...` without the devices of its list that are
    not here (OpenVINO's AUTO fails on a plugin that does not load). A ConfigError naming
    `engine.device` where OpenVINO has no such device: the devices it does have, and why the one
    asked for is missing (its plugin's own reason: no OpenCL, no driver)."""
    family = device.split(":", 1)[0].split(".", 1)[0]
    if family not in DEVICES:
        raise ConfigError(
            f"engine.device: {device!r} is not one of {', '.join(DEVICES)} (or GPU.N, AUTO:...)"
        )
    if family == "AUTO":  # AUTO:GPU,CPU falls back along its list: one device of it is enough
        wanted = [d.strip() for d in device.split(":", 1)[1].split(",")] if ":" in device else []
        errors, usable = [], []
        for name in wanted:
            try:
                usable.append(check_device(core, name))
            except ConfigError as exc:
                errors.append(str(exc))
        if wanted and len(errors) == len(wanted):
            raise ConfigError(f"engine.device: {device!r}: none of its devices is here: " + "; ".join(
                e.removeprefix("engine.device: ") for e in errors
            ))  # fmt: skip
        for error in errors:
            log.info("%s (AUTO goes on without it)", error)
        return f"AUTO:{','.join(usable)}" if wanted else device
    available = core.available_devices
    if device in available or (device == family and any(d.split(".")[0] == family for d in available)):
        return device
    raise ConfigError(
        f"engine.device: {device!r} is not available here (OpenVINO {ov.get_version().split('-')[0]} "
        f"sees {', '.join(available) or 'no device'}): {missing(core, family)}"
    )


def missing(core: ov.Core, family: str) -> str:
    """Why OpenVINO has no `family` device: its plugin does not load (the GPU's without OpenCL, with
    the library it lacks), or it loads and finds none (no device, or its driver is missing)."""
    try:
        found = core.get_property(family, props.available_devices)
    except RuntimeError as exc:
        return reason(exc)
    return f"its plugin loads, but finds no {family}" + (
        f" ({', '.join(found)})" if found else " (device or driver missing)"
    )


def read(core: ov.Core, model_path: str, dynamic_axes: Mapping[str, tuple[int, ...]]) -> ov.Model:
    """The model of an ONNX file (its `dynamic_axes` made symbolic by the same rewrite ONNX Runtime
    gets) or of an IR pair (.xml beside its .bin; those axes made dynamic by a reshape)."""
    path = Path(model_path)
    if not path.is_file():
        raise ConfigError(f"model file {model_path!r} does not exist")
    if path.suffix == ".xml" and not path.with_suffix(".bin").is_file():
        raise ConfigError(
            f"model file {model_path!r}: its weights {path.with_suffix('.bin').name} are missing"
        )
    source: str | bytes = model_path
    if dynamic_axes and path.suffix != ".xml":
        source = load_model_bytes(model_path, dynamic_axes)
    try:
        model = core.read_model(source)
    except RuntimeError as exc:
        kind = "an OpenVINO IR" if path.suffix == ".xml" else "a valid ONNX model"
        raise ConfigError(f"model file {model_path!r} is not {kind}: {reason(exc)}") from None
    if path.suffix == ".xml" and dynamic_axes:
        shapes = {}
        for port in model.inputs:
            axes = dynamic_axes.get(port.get_any_name(), ())
            if axes:
                shape = port.get_partial_shape()
                shapes[port.get_any_name()] = ov.PartialShape(
                    [ov.Dimension() if i in axes else shape[i] for i in range(len(shape))]
                )
        model.reshape(shapes)
    return model


def is_quantized(model: ov.Model) -> bool:
    """Whether the model holds int8 nodes (quantize/dequantize pairs, NNCF's FakeQuantize)."""
    return any(op.get_type_name() in _QUANTIZED_OPS for op in model.get_ops())


def compile_settings(
    core: ov.Core, device: str, precision: str, threads: int, streams: int
) -> dict[str, Any]:
    """The compile properties of this process's model: threads, streams and precision where the
    device takes them (a GPU has no thread count; an unsupported property would fail the compile)."""
    wanted: dict[str, Any] = {}
    if threads:
        wanted[props.inference_num_threads] = threads
    wanted[props.num_streams] = streams if streams else props.streams.Num.AUTO
    if streams == 0:
        wanted[hints.performance_mode] = hints.PerformanceMode.THROUGHPUT
    if precision in HINTS:
        wanted[hints.inference_precision] = getattr(ov.Type, HINTS[precision])
    # OpenVINO pins its threads to cores: several infer processes would each pin to the same first
    # cores and share them. framewire spreads work by processes; the OS places them.
    wanted[hints.enable_cpu_pinning] = False
    try:
        supported = set(core.get_property(device.split(":")[0], props.supported_properties))
    except RuntimeError:
        return wanted
    dropped = [key for key in wanted if key not in supported]
    if dropped:
        log.debug("OpenVINO %s does not take %s: left to the device", device, ", ".join(dropped))
    return {key: value for key, value in wanted.items() if key in supported}


def _fix_shapes(
    model: ov.Model,
    model_path: str,
    dynamic_axes: Mapping[str, tuple[int, ...]],
    input_shapes: InputShapes | None,
) -> frozenset[str]:
    """Reshape the model to one frame: batch 1 on every input whose axis 0 was asked dynamic (the
    ones whose batches are split across requests, returned), and the sources' size on the other
    dynamic dims where every source gives the same one (else they stay dynamic)."""
    examples: Mapping[str, Sequence[tuple[int, ...]]] = {}
    # The sources' sizes cost an open of each one (a camera's connection): only where a dim is open.
    open_dims = any(
        port.get_partial_shape().rank.is_dynamic
        or any(d.is_dynamic for d in list(port.get_partial_shape())[1:])
        for port in model.inputs
    )
    if input_shapes is not None and open_dims:
        try:
            examples = input_shapes()
        except ConfigError as exc:  # a source that cannot be opened yet: shapes stay dynamic
            log.info("model %s: input sizes left dynamic (%s)", model_path, exc)
    split: set[str] = set()
    shapes: dict[str, ov.PartialShape] = {}
    for port in model.inputs:
        name = port.get_any_name()
        shape = port.get_partial_shape()
        if shape.rank.is_dynamic:
            continue
        dims = [shape[i] for i in range(len(shape))]
        batched = (
            0 in dynamic_axes.get(name, ())
            and len(dims) > 0
            and (dims[0].is_dynamic or dims[0].get_length() == 1)
        )
        if batched:
            split.add(name)
            dims[0] = ov.Dimension(1)
        known = {tuple(s) for s in examples.get(name, ())}
        if len(known) == 1:
            (example,) = known
            if len(example) == len(dims):
                dims = [
                    ov.Dimension(int(e)) if d.is_dynamic and (i > 0 or batched) else d
                    for i, (d, e) in enumerate(zip(dims, example))
                ]
        fixed = ov.PartialShape(dims)
        if fixed != shape:
            shapes[name] = fixed
    if shapes:
        try:
            model.reshape(shapes)
        except RuntimeError as exc:
            raise EngineError(
                f"model {model_path}: OpenVINO could not reshape it to one frame: {reason(exc)}"
            ) from None
    return frozenset(split)


def _batch_of(arrays: Mapping[str, np.ndarray], split: frozenset[str]) -> int:
    counts = {value.shape[0] for name, value in arrays.items() if name in split and value.ndim}
    if len(counts) > 1:
        raise EngineError(f"inputs {', '.join(sorted(split))} disagree on the batch: {sorted(counts)}")
    return counts.pop() if counts else 1


def _precision_run(compiled: ov.CompiledModel, model: ov.Model, device: str, precision: str) -> str:
    """What the device runs: its inference precision (int8 where the model is quantized: the rest
    of its nodes run at that precision), with one warning where it is not what was asked for."""
    value = _property(compiled, hints.inference_precision, None)
    ran = NAMES.get(str(value.get_type_name()) if isinstance(value, ov.Type) else "", "default")
    if precision in HINTS and ran not in (precision, "default"):  # AUTO does not say: no warning
        log.warning(
            "engine.precision %s: OpenVINO runs %s on %s instead (a CPU needs AMX or AVX-512 BF16 for bf16; "
            "f16 runs on GPUs, and on CPUs with AMX-FP16)",
            precision, ran, device,
        )  # fmt: skip
    return f"int8+{ran}" if is_quantized(model) else ran


def _optimal_requests(compiled: ov.CompiledModel) -> int:
    return max(1, int(_property(compiled, props.optimal_number_of_infer_requests, 1)))


def _describe_streams(compiled: ov.CompiledModel) -> str:
    streams = _property(compiled, props.num_streams, "?")
    threads = _property(compiled, props.inference_num_threads, None)
    return f"{streams} stream(s)" + (f", {threads} thread(s)" if threads is not None else "")


def _property(compiled: ov.CompiledModel, name: str, default: Any) -> Any:
    try:
        return compiled.get_property(name)
    except (RuntimeError, TypeError):  # a device without that property (NPU, AUTO)
        return default


def spec(port: Any, model_path: str, *, batched: bool) -> TensorSpec:
    try:
        dtype = np.dtype(port.get_element_type().to_dtype())
    except (RuntimeError, TypeError):
        raise EngineError(
            f"model {model_path}: tensor {port.get_any_name()!r} has unsupported type "
            f"{port.get_element_type()}"
        ) from None
    shape = port.get_partial_shape()
    if shape.rank.is_dynamic:
        raise EngineError(f"model {model_path}: tensor {port.get_any_name()!r} has no fixed rank")
    dims: list[Dim] = [
        None if d.is_dynamic else d.get_length() for d in (shape[i] for i in range(len(shape)))
    ]
    if batched and dims:
        dims[0] = None  # batches are split into frames: any batch
    return TensorSpec(port.get_any_name(), dtype, tuple(dims))


def reason(exc: BaseException) -> str:
    """OpenVINO's message without its `Exception from src/...` source lines: the first line that says why."""
    lines = [line.strip() for line in str(exc).splitlines()]
    useful = [
        line for line in lines if line and not line.startswith("Exception from ") and line != "Check failed."
    ]
    return useful[0] if useful else (lines[0] if lines and lines[0] else type(exc).__name__)
