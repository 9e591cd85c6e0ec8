"""The doctor's logic against the GPU fakes (every check ok, each way one fails), and as a user runs it
on this machine (no GPU: one line per check, exit 1, no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from framewire.engines import doctor
from framewire.engines import onnxruntime as ort_engine
from framewire.engines.doctor import FAILED, OK, SKIPPED, run_checks
from tests.unit.engines.gpu_fakes import FakeCudaRuntime, FakeTensorRT, hide_module, install_cuda

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
CUDA, TRT, CPU = "CUDAExecutionProvider", "TensorrtExecutionProvider", "CPUExecutionProvider"


def _statuses(report: doctor.Report) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.detail) for c in report.checks}


@pytest.fixture(autouse=True)
def no_kernel_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The fakes' machine has no /proc/driver/nvidia, also on a host that has one."""
    monkeypatch.setattr(doctor, "KERNEL_MODULE_VERSION", tmp_path / "no-such-file")


@pytest.mark.parametrize(
    ("line", "module"),
    [
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
            "NVIDIA UNIX x86_64 Kernel Module 550.54.15",
        ),
        (  # the first line on the H200 host this was checked on (driver 580, the open module)
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  ",
            "NVIDIA UNIX Open Kernel Module for x86_64 580.159.04",
        ),
        ("something else  entirely", "something else entirely"),
    ],
    ids=["proprietary", "open", "unknown"],
)
def test_the_kernel_modules_name_and_version(line: str, module: str, tmp_path: Path) -> None:
    path = tmp_path / "version"
    path.write_text(line + "\nGCC version:  gcc version 12.2.0\n")
    assert doctor._kernel_module(path) == module
    assert doctor._kernel_module(tmp_path / "missing") == ""


@pytest.fixture
def gpu_providers(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An onnxruntime-gpu build whose providers start (`runs_on[short]` says which provider a session
    asked for `short` really runs on); the computation itself is ONNX Runtime's CPU."""
    runs_on = {"cuda": CUDA, "tensorrt": TRT}
    real = ort_engine.OnnxRuntimeEngine

    class GpuEngine(real):  # type: ignore[misc, valid-type]
        def __init__(self, model_path: str, **kwargs: Any) -> None:
            providers = kwargs.pop("providers", ("cpu",))
            kwargs.pop("device_id", None)
            super().__init__(model_path, providers=("cpu",), **kwargs)
            if providers[0] != "cpu":
                self._provider = runs_on[providers[0]]

    monkeypatch.setattr(ort, "get_available_providers", lambda: [TRT, CUDA, CPU])
    monkeypatch.setattr(ort_engine, "OnnxRuntimeEngine", GpuEngine)
    monkeypatch.setattr(doctor, "provider_library_error", lambda short: "")
    return runs_on


@pytest.mark.parametrize("fixture", ["fake_trt", "fake_trt11"])
def test_everything_passes_on_a_working_gpu(
    fixture: str, request: pytest.FixtureRequest, gpu_providers: dict[str, str]
) -> None:
    trt: FakeTensorRT = request.getfixturevalue(fixture)
    report = run_checks(0)
    statuses = _statuses(report)
    assert {name: status for name, (status, _) in statuses.items()} == {
        "driver": OK,
        "cuda-python": OK,
        "gpus": OK,
        "tensorrt": OK,
        "onnxruntime": OK,
        "onnxruntime cuda": OK,
        "onnxruntime tensorrt": OK,
        "tensorrt fp32 engine": OK,
        "tensorrt fp16 engine": OK,
    }
    assert not report.failed
    assert report.facts["gpus"] == "0: NVIDIA Fake GPU, 16 GiB"
    assert report.facts["driver"] == "NVIDIA driver, CUDA 12.4"
    assert report.facts["tensorrt"].startswith(trt.__version__)
    assert report.facts["providers that start"] == "cuda, tensorrt, cpu"
    assert statuses["tensorrt fp16 engine"][1] == "built, ran on GPU 0, matches ONNX Runtime on the CPU (within 0.01)"


def test_no_driver_fails_the_gpu_checks_in_one_line_each(monkeypatch: pytest.MonkeyPatch) -> None:
    install_cuda(monkeypatch, FakeCudaRuntime(no_driver="return"))
    hide_module(monkeypatch, "tensorrt")
    statuses = _statuses(run_checks(0))
    assert statuses["driver"] == (FAILED, "no NVIDIA driver (libcuda.so.1 cannot be loaded or reports no CUDA)")
    assert statuses["gpus"] == (FAILED, "no CUDA driver / GPU found (cudaGetDeviceCount: cudaErrorInsufficientDriver)")
    assert statuses["tensorrt"] == (
        FAILED,
        "the tensorrt package is not installed (install the gpu extra: make EXTRAS=gpu)",
    )
    assert statuses["tensorrt fp32 engine"] == (SKIPPED, "needs gpus and tensorrt (see above)")
    assert all("\n" not in detail for _, detail in statuses.values())


def test_a_driver_older_than_the_cuda_runtime_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    install_cuda(monkeypatch, FakeCudaRuntime(driver_version=12040, runtime_version=13000))
    status, detail = _statuses(run_checks(0))["cuda-python"]
    assert status == FAILED and detail.startswith(
        "CUDA runtime 13.0 needs a driver for CUDA 13.x; this driver supports 12.4"
    )


def test_a_provider_that_falls_back_or_cannot_load_says_why(
    fake_trt: FakeTensorRT, gpu_providers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu_providers["cuda"] = CPU  # ORT started the session on the CPU instead
    monkeypatch.setattr(
        doctor, "provider_library_error", lambda short: "libnvinfer.so.10: cannot open shared object file" if short == "tensorrt" else ""
    )
    report = run_checks(0)
    statuses = _statuses(report)
    assert statuses["onnxruntime cuda"] == (FAILED, f"ONNX Runtime could not start it and runs on {CPU}")
    assert statuses["onnxruntime tensorrt"] == (
        FAILED,
        "its library does not load: libnvinfer.so.10: cannot open shared object file",
    )
    assert report.facts["providers that start"] == "cpu" and report.failed


def test_an_engine_that_computes_wrong_fails(fake_trt: FakeTensorRT, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.engines import gpu_fakes

    original = gpu_fakes.IExecutionContext.execute_async_v3

    def off_by_a_little(self, stream_handle):  # type: ignore[no-untyped-def]
        ok = original(self, stream_handle)
        work = gpu_fakes.FakeTensorRT.cuda.streams[int(stream_handle)]  # type: ignore[union-attr]
        run = work[-1]

        def wrong() -> None:
            run()
            y = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * 1).from_address(self.addresses["y"]))
            y[0] += 1.0

        work[-1] = wrong
        return ok

    monkeypatch.setattr(gpu_fakes.IExecutionContext, "execute_async_v3", off_by_a_little)
    status, detail = _statuses(run_checks(0))["tensorrt fp32 engine"]
    assert status == FAILED and detail.startswith(
        "built and ran, but differs from ONNX Runtime on the CPU: output y: max relative error"
    )


def test_the_command_with_fakes_prints_one_line_per_check(
    fake_trt: FakeTensorRT, gpu_providers: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from framewire.cli import main

    code = main(["doctor", "--set", "engine.backend=onnxruntime", "--seconds", "0.2"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = [line for line in out.splitlines() if line.split(" ", 1)[0] in (OK, FAILED, SKIPPED)]
    assert len(lines) == 10 and all(line.startswith("ok ") for line in lines)
    assert "model benchmark" in lines[-1] and "on onnxruntime (CPUExecutionProvider)" in lines[-1]
    assert out.rstrip().endswith("every check passed")


def test_a_bad_config_is_a_failed_line_not_a_crash(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from framewire.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nsources: []\nbogus: 1\n")
    assert main(["doctor", "-c", str(bad), "--seconds", "0.1"]) == 1
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "model benchmark" in line]
    assert line.startswith("failed") and "config:" in line


def test_on_this_machine_it_reports_no_gpu_cleanly() -> None:
    from framewire.engines import cuda

    if cuda.device_count() > 0:
        pytest.skip("this machine has a GPU")
    result = subprocess.run(
        [sys.executable, str(ROOT / "run_pipeline.py"), "doctor", "--seconds", "0.2"],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.split(" ", 1)[0] in (OK, FAILED, SKIPPED)]
    names = [line.split()[1] for line in lines]
    assert names[:3] == ["driver", "cuda-python", "gpus"] and lines[0].startswith("failed")
    assert lines[-1].startswith("ok ") and "model benchmark" in lines[-1]  # the CPU still runs the model


def test_the_cpu_and_openvino_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """doctor's facts: the CPU's AMX/VNNI flags and what they mean, OpenVINO and each of its devices
    (or why a plugin has none), from the real openvino wheel; without it, how to get it."""
    from framewire.engines import cpu_features, openvino_support

    ov = pytest.importorskip("openvino")
    facts = openvino_support.doctor_facts()
    flags = cpu_features.cpu_flags()
    if cpu_features.gains_from_openvino(flags):
        assert "OpenVINO gains (" in facts["cpu"]
    else:
        assert facts["cpu"].endswith("no AMX or VNNI: OpenVINO would be no faster than ONNX Runtime fp32")
    assert facts["openvino"] == ov.get_version().split("-")[0]
    assert facts["openvino CPU"] and not facts["openvino CPU"].startswith("none")
    for family in ("GPU", "NPU"):
        if not any(d.startswith(family) for d in ov.Core().available_devices):
            assert facts[f"openvino {family}"].startswith("none: ")
    assert all("\n" not in value for value in facts.values())
    hide_module(monkeypatch, "openvino")
    assert openvino_support.doctor_facts()["openvino"].startswith("the openvino package is not installed")


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    from framewire.engines import cpu_features

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni amx_bf16 amx_int8\n\n")
    flags = cpu_features.cpu_flags(str(cpuinfo))
    assert cpu_features.known(flags) == ["amx_bf16", "amx_int8", "avx512_vnni", "avx512f", "avx2"]
    assert cpu_features.gains_from_openvino(flags) == "amx_bf16, amx_int8, avx512_vnni"
    assert cpu_features.default_precision(flags) == "bf16"
    assert cpu_features.cpu_flags(str(tmp_path / "missing")) == frozenset()
    assert cpu_features.default_precision(frozenset({"avx2"})) == "fp32"
