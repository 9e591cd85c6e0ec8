"""framewire.engines.registry: `backend: auto` on every combination of TensorRT, GPU and ONNX Runtime build,
infer workers per device, and the fail-fast checks."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from framewire.engines import registry
from framewire.engines.registry import (
    Choice,
    Machine,
    OpenOptions,
    choose_backend,
    detect_machine,
    device_of,
    infer_workers,
    open_engine,
    preflight,
)
from framewire.config import Backend, EngineConfig
from framewire.pipeline.errors import EngineError
from tests.unit.engines.gpu_fakes import (
    FakeCudaRuntime,
    FakeTensorRT,
    hide_module,
    install_cuda,
)

pytestmark = pytest.mark.timeout(60)

CPU_BUILD = frozenset({"CPUExecutionProvider"})
GPU_BUILD = frozenset({"TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"})
NO_DRIVER = "no CUDA driver / GPU found (libcuda.so.1 cannot be loaded)"


@pytest.mark.parametrize(
    ("machine", "backend", "providers", "gpu", "reason"),
    [
        (
            Machine("10.3.0", 2, "", GPU_BUILD),
            Backend.TENSORRT,
            (),
            True,
            "TensorRT 10.3.0 and 2 GPU(s) found",
        ),
        (
            Machine("10.3.0", 1, "", CPU_BUILD),
            Backend.TENSORRT,
            (),
            True,
            "TensorRT 10.3.0 and 1 GPU(s) found",
        ),
        (
            Machine(None, 1, "", GPU_BUILD),
            Backend.ONNXRUNTIME,
            ("cuda", "cpu"),
            True,
            "ONNX Runtime with CUDA on 1 GPU(s); no usable tensorrt package",
        ),
        (
            Machine(None, 1, "", CPU_BUILD),
            Backend.ONNXRUNTIME,
            ("cpu",),
            False,
            "ONNX Runtime on the CPU: 1 GPU(s) found, but this onnxruntime build has no CUDA provider and "
            "no tensorrt package imports (install the gpu extra of your CUDA: docs/gpu.md)",
        ),
        (
            Machine("10.3.0", 0, NO_DRIVER, GPU_BUILD),
            Backend.ONNXRUNTIME,
            ("cpu",),
            False,
            f"ONNX Runtime on the CPU: {NO_DRIVER}",
        ),
        (
            Machine(None, 0, NO_DRIVER, CPU_BUILD),
            Backend.ONNXRUNTIME,
            ("cpu",),
            False,
            f"ONNX Runtime on the CPU: {NO_DRIVER}",
        ),
    ],
    ids=["trt+gpu", "trt+gpu+cpu-ort", "ort-cuda+gpu", "gpu-but-cpu-ort", "trt-no-gpu", "nothing"],
)
def test_auto_picks_the_best_backend_and_logs_it_in_one_line(
    machine: Machine,
    backend: Backend,
    providers: tuple[str, ...],
    gpu: bool,
    reason: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "_logged", set())
    with caplog.at_level(logging.INFO, logger="framewire.engines.registry"):
        choice = choose_backend(EngineConfig(backend=Backend.AUTO, providers=("cpu",)), machine)
        assert choose_backend(EngineConfig(), machine) == choice
    assert choice == Choice(backend, providers, gpu, reason)
    assert [r.getMessage() for r in caplog.records] == [f"engine.backend auto: {backend.value} ({reason})"]


def test_an_explicit_backend_is_kept() -> None:
    machine = Machine(None, 0, NO_DRIVER, CPU_BUILD)
    assert choose_backend(EngineConfig(backend=Backend.TENSORRT), machine).backend is Backend.TENSORRT
    onnx = choose_backend(EngineConfig(backend=Backend.ONNXRUNTIME, providers=("cuda", "cpu")), machine)
    assert (onnx.backend, onnx.providers, onnx.gpu) == (Backend.ONNXRUNTIME, ("cuda", "cpu"), False)
    with_gpu = Machine(None, 1, "", GPU_BUILD)
    assert choose_backend(EngineConfig(backend=Backend.ONNXRUNTIME, providers=("cuda", "cpu")), with_gpu).gpu
    assert not choose_backend(EngineConfig(backend=Backend.ONNXRUNTIME, providers=("cpu",)), with_gpu).gpu


def test_infer_workers_are_devices_times_processes_on_gpus_only() -> None:
    config = EngineConfig(backend=Backend.AUTO, devices=(0, 2, 3), processes_per_device=2)
    assert infer_workers(config, Machine("10.3.0", 4, "", GPU_BUILD)) == 6
    assert infer_workers(config, Machine(None, 0, NO_DRIVER, CPU_BUILD)) == 2
    assert [device_of(config, worker) for worker in range(6)] == [0, 0, 2, 2, 3, 3]
    assert device_of(EngineConfig(), 5) == 0


def test_detect_machine_survives_cuda_python_raising_without_a_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_cuda(monkeypatch, FakeCudaRuntime(no_driver="raise"))
    hide_module(monkeypatch, "tensorrt")
    detect_machine.cache_clear()
    try:
        machine = detect_machine()
    finally:
        detect_machine.cache_clear()
    assert (machine.tensorrt, machine.gpus) == (None, 0)
    assert machine.no_gpu == "no CUDA driver / GPU found (Failed to dlopen libcuda.so.1)"
    assert "CPUExecutionProvider" in machine.ort_providers


def test_detect_machine_finds_tensorrt_and_the_gpu(fake_trt: FakeTensorRT) -> None:
    machine = detect_machine()
    assert (machine.tensorrt, machine.gpus, machine.no_gpu) == ("10.16.1.11", 1, "")
    assert choose_backend(EngineConfig()).backend is Backend.TENSORRT


def test_auto_opens_a_tensorrt_engine_with_fakes(
    fake_trt: FakeTensorRT, conv_model: Path, tmp_path: Path
) -> None:
    config = EngineConfig(cache_dir=str(tmp_path), max_batch=2)
    engine = open_engine(config, str(conv_model), {"x": (0,)}, OpenOptions(device=0))
    assert engine.backend == "tensorrt"
    x = np.ones((2, 3, 8, 8), np.float32)
    np.testing.assert_array_equal(engine.infer({"x": x}, ["y"])["y"], 3 * x)
    assert not engine._stream.spins  # type: ignore[attr-defined]  # the worker sleeps while the GPU works
    engine.close()
    spinning = open_engine(config.model_copy(update={"spin_wait": True}), str(conv_model), {"x": (0,)})
    assert spinning._stream.spins  # type: ignore[attr-defined]
    spinning.close()


def test_a_gpu_worker_sleeps_in_every_wait_unless_it_spins(
    fake_trt: FakeTensorRT, fake_cuda: FakeCudaRuntime, conv_model: Path, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The GPU's scheduling flag, so ONNX Runtime's and TensorRT's own waits sleep too."""
    config = EngineConfig(cache_dir=str(tmp_path), max_batch=2)
    open_engine(config, str(conv_model), {"x": (0,)}, OpenOptions(device=0)).close()
    assert fake_cuda.device_flags == {0: fake_cuda.cudaDeviceScheduleBlockingSync}
    fake_cuda.device_flags.clear()
    open_engine(config.model_copy(update={"spin_wait": True}), str(conv_model), {"x": (0,)}).close()
    assert fake_cuda.device_flags == {}
    fake_cuda.fail["cudaSetDeviceFlags"] = fake_cuda.cudaError_t.cudaErrorSetOnActiveProcess
    with caplog.at_level(logging.WARNING, logger="framewire.engines.registry"):
        open_engine(config, str(conv_model), {"x": (0,)}).close()  # refused: one line, the job goes on
    assert [r.getMessage() for r in caplog.records if r.name == "framewire.engines.registry"] == [
        "GPU 0: waits for the GPU spin a core (CUDA cudaSetDeviceFlags failed: cudaErrorSetOnActiveProcess)"
    ]


def test_auto_opens_onnxruntime_on_the_cpu_here(monkeypatch: pytest.MonkeyPatch, conv_model: Path) -> None:
    hide_module(monkeypatch, "tensorrt")
    install_cuda(monkeypatch, FakeCudaRuntime(gpus=()))
    detect_machine.cache_clear()
    try:
        engine = open_engine(EngineConfig(providers=("tensorrt", "cuda", "cpu")), str(conv_model))
    finally:
        detect_machine.cache_clear()
    assert (engine.backend, engine.provider) == ("onnxruntime", "CPUExecutionProvider")
    engine.close()


def test_preflight_fails_fast_for_tensorrt_without_a_gpu(
    fake_trt: FakeTensorRT, fake_cuda: FakeCudaRuntime
) -> None:
    assert preflight(EngineConfig(backend=Backend.TENSORRT)).backend is Backend.TENSORRT
    with pytest.raises(EngineError, match=r"^engine.devices: GPU 1 not found"):
        preflight(EngineConfig(backend=Backend.TENSORRT, devices=(0, 1)))
    fake_cuda.gpus = ()
    with pytest.raises(EngineError, match=r"^no CUDA driver / GPU found"):
        preflight(EngineConfig(backend=Backend.TENSORRT))


def test_engine_config_gpu_keys_are_validated() -> None:
    from framewire.config import load_config
    from framewire.pipeline.errors import ConfigError

    default = Path(__file__).resolve().parents[3] / "configs/default.yaml"
    config = load_config(default, ["engine.backend=tensorrt", "engine.precision=fp16", "engine.max_batch=8"])
    engine = config.engine
    assert (engine.backend, engine.precision, engine.devices, engine.min_batch, engine.opt_batch) == (
        Backend.TENSORRT,
        "fp16",
        (0,),
        1,
        None,
    )
    assert (engine.cache_dir, engine.cuda_graph, engine.calibration.frames) == (None, False, 256)
    bad = {
        "engine.devices=[0, 0]": "engine.devices: must be distinct GPU ids >= 0",
        "engine.devices=[]": "engine.devices",
        "engine.min_batch=4": "engine: batch profile must satisfy min_batch <= opt_batch <= max_batch",
        "engine.precision=fp8": "engine.precision",
        "engine.calibration.frames=0": "engine.calibration.frames",
        "engine.backend=tensorflow": "engine.backend",
    }
    for override, message in bad.items():
        with pytest.raises(ConfigError, match=message):
            load_config(default, [override])


@pytest.mark.parametrize(
    ("machine", "level"),
    [
        (Machine("10.16.1.11", 0, NO_DRIVER, GPU_BUILD), logging.WARNING),  # the gpu extra, no GPU
        (Machine(None, 0, NO_DRIVER, GPU_BUILD), logging.WARNING),  # onnxruntime-gpu alone
        (Machine(None, 0, NO_DRIVER, CPU_BUILD), logging.INFO),  # the cpu extra: nothing unexpected
        (Machine(None, 1, "", CPU_BUILD), logging.WARNING),  # a GPU, but only the cpu extra
        (Machine("10.16.1.11", 1, "", GPU_BUILD), logging.INFO),
    ],
    ids=["gpu-extra-no-gpu", "ort-gpu-no-gpu", "cpu-extra", "gpu-but-cpu-extra", "gpu"],
)
def test_a_gpu_install_without_a_usable_gpu_says_so_once_as_a_warning(
    machine: Machine, level: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "_logged", set())
    with caplog.at_level(logging.DEBUG, logger="framewire.engines.registry"):
        choose_backend(EngineConfig(), machine)
        choose_backend(EngineConfig(), machine)
    assert [r.levelno for r in caplog.records] == [level]
    monkeypatch.setattr(registry, "_logged", set())
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="framewire.engines.registry"):
        choose_backend(EngineConfig(), machine, quiet=True)  # an infer worker
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


AMX = frozenset({"avx2", "avx512f", "avx512_vnni", "amx_bf16", "amx_int8"})
AVX2 = frozenset({"avx", "avx2"})


def test_auto_picks_openvino_on_a_cpu_with_amx_or_vnni(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "_logged", set())
    with caplog.at_level(logging.INFO, logger="framewire.engines.registry"):
        choice = choose_backend(EngineConfig(), Machine(None, 0, NO_DRIVER, CPU_BUILD, "2026.4.1", AMX))
    reason = f"OpenVINO 2026.4.1 on the CPU (amx_bf16, amx_int8, avx512_vnni); {NO_DRIVER}"
    assert choice == Choice(Backend.OPENVINO, (), False, reason)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, f"engine.backend auto: openvino ({reason})")
    ]
    vnni_only = Machine(None, 0, NO_DRIVER, CPU_BUILD, "2026.4.1", frozenset({"avx_vnni"}))
    assert choose_backend(EngineConfig(), vnni_only).backend is Backend.OPENVINO
    # A GPU still comes first.
    with_gpu = Machine("10.3.0", 1, "", GPU_BUILD, "2026.4.1", AMX)
    assert choose_backend(EngineConfig(), with_gpu).backend is Backend.TENSORRT


def test_auto_without_amx_or_vnni_takes_onnxruntime_and_says_why_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "_logged", set())
    machine = Machine(None, 0, NO_DRIVER, CPU_BUILD, "2026.4.1", AVX2)
    with caplog.at_level(logging.INFO, logger="framewire.engines.registry"):
        choice = choose_backend(EngineConfig(), machine)
        choose_backend(EngineConfig(), machine)
    assert (choice.backend, choice.providers) == (Backend.ONNXRUNTIME, ("cpu",))
    # openvino comes with the cpu extra, so most CPUs without AMX or VNNI have it: an info line, not a
    # warning on every run (an explicit bf16 there is the warning: test_openvino_engine).
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.INFO,
            "engine.backend auto: onnxruntime (ONNX Runtime on the CPU: openvino 2026.4.1 is installed, but "
            f"this CPU has neither AMX nor VNNI, so it would be no faster; {NO_DRIVER})",
        )
    ]
    # Without openvino: the same info line, without the reason.
    monkeypatch.setattr(registry, "_logged", set())
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="framewire.engines.registry"):
        choose_backend(EngineConfig(), Machine(None, 0, NO_DRIVER, CPU_BUILD, None, AMX))
    assert [r.levelno for r in caplog.records] == [logging.INFO]


def test_openvino_runs_processes_per_device_on_the_cpu_and_opens_through_the_registry(
    conv_model: Path, tmp_path: Path
) -> None:
    pytest.importorskip("openvino")
    config = EngineConfig(
        backend=Backend.OPENVINO, processes_per_device=3, devices=(0, 1), cache_dir=str(tmp_path)
    )
    assert choose_backend(config) == Choice(Backend.OPENVINO, (), False, "engine.backend is openvino")
    assert infer_workers(config) == 3
    assert preflight(config).backend is Backend.OPENVINO
    engine = open_engine(config, str(conv_model), {"x": (0,)})
    assert engine.backend == "openvino" and engine.inputs[0].shape == (None, 3, 8, 8)
    assert engine.infer({"x": np.ones((2, 3, 8, 8), np.float32)})["y"].shape == (2, 2, 8, 8)


def test_openvino_preflight_names_engine_device(tmp_path: Path) -> None:
    ov = pytest.importorskip("openvino")
    from framewire.pipeline.errors import ConfigError

    if "NPU" in ov.Core().available_devices:
        pytest.skip("this machine has an NPU")
    with pytest.raises(ConfigError, match=r"^engine.device: 'NPU' is not available here"):
        preflight(EngineConfig(backend=Backend.OPENVINO, device="NPU"))


def test_openvino_preflight_without_the_package_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    hide_module(monkeypatch, "openvino")
    missing = r"^engine.backend: openvino: the openvino package is not installed \(pip install"
    with pytest.raises(EngineError, match=missing):
        preflight(EngineConfig(backend=Backend.OPENVINO))
