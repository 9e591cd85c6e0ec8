"""OpenVINO without a model: whether it is installed, which devices it sees and what they can do
(`doctor`, `validate`), and the one-line checks a job makes before any worker starts. Importable
where openvino is not installed: it is imported only when asked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from framewire.pipeline.errors import EngineError
from framewire.pipeline.wire.tensors import TensorSpec

if TYPE_CHECKING:
    from framewire.config import EngineConfig

INSTALL_HINT = "pip install 'framewire[openvino]'"

PROBED = ("CPU", "GPU", "NPU")
"""The plugins `doctor` asks about, found or not (a GPU or NPU plugin says why it has no device)."""


def import_openvino() -> ModuleType:
    """The openvino module, or a one-line EngineError saying how to get it."""
    try:
        import openvino
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "openvino":
            raise EngineError(
                f"engine.backend: openvino: the openvino package is not installed ({INSTALL_HINT})"
            ) from None
        raise EngineError(f"engine.backend: openvino: the openvino package cannot be loaded: {exc}") from None
    return openvino


def preflight(config: EngineConfig) -> None:
    """Before any worker: openvino imports and `engine.device` is there (one line naming it if not)."""
    ov = import_openvino()
    from framewire.engines.openvino import check_device

    check_device(ov.Core(), config.device)


@dataclass(frozen=True)
class Device:
    """One device as OpenVINO sees it, or a plugin that found none (`error`)."""

    name: str
    full_name: str = ""
    capabilities: tuple[str, ...] = ()
    error: str = ""


def devices() -> tuple[str, list[Device]]:
    """OpenVINO's version and every device it sees, then the probed plugins without one, each with
    its own reason (the GPU plugin without OpenCL, the NPU plugin without its driver)."""
    ov = import_openvino()
    import openvino.properties as props

    from framewire.engines.openvino import missing, reason

    core = ov.Core()
    found: list[Device] = []
    available = list(core.available_devices)
    for name in available:
        try:
            full = str(core.get_property(name, props.device.full_name))
            caps = tuple(str(c) for c in core.get_property(name, props.device.capabilities))
        except RuntimeError as exc:
            found.append(Device(name, error=reason(exc)))
            continue
        found.append(Device(name, full, caps))
    for family in PROBED:
        if any(name.split(".")[0] == family for name in available):
            continue
        found.append(Device(family, error=missing(core, family)))
    return ov.get_version().split("-")[0], found


def doctor_facts() -> dict[str, str]:
    """`doctor`'s lines on the CPU and OpenVINO: the CPU's bf16/int8 instruction sets and what they
    mean for `backend: auto`, OpenVINO's version and each device it sees or why it has none."""
    from framewire.engines.cpu_features import cpu_flags, default_precision, gains_from_openvino, known

    flags = cpu_flags()
    gains = gains_from_openvino(flags)
    verdict = (
        f"OpenVINO gains ({gains}); its CPU default precision: {default_precision(flags)}"
        if gains
        else "no AMX or VNNI: OpenVINO would be no faster than ONNX Runtime fp32"
    )
    facts = {"cpu": f"{', '.join(known(flags)) or 'no flags read'}: {verdict}"}
    try:
        version, found = devices()
    except EngineError as exc:
        facts["openvino"] = str(exc).removeprefix("engine.backend: openvino: ")
        return facts
    facts["openvino"] = version
    for device in found:
        what = f"{device.full_name} ({' '.join(device.capabilities)})" if not device.error else device.error
        facts[f"openvino {device.name}"] = what if not device.error else f"none: {what}"
    return facts


def describe_ir(path: str | Path, dynamic_axes: Mapping[str, tuple[int, ...]] | None = None) -> tuple[
    tuple[TensorSpec, ...], tuple[TensorSpec, ...]
]:  # fmt: skip
    """Inputs and outputs of an OpenVINO IR (`model.xml` beside its `.bin`), with `dynamic_axes`
    made dynamic: what `validate` and the tasks read of an ONNX file, for `model.path: x.xml` (the
    int8 model `quantize --backend openvino` writes)."""
    from framewire.engines.openvino import read, spec

    ov = import_openvino()
    model = read(ov.Core(), str(path), dynamic_axes or {})
    inputs = tuple(spec(port, str(path), batched=False) for port in model.inputs)
    return inputs, tuple(spec(port, str(path), batched=False) for port in model.outputs)
