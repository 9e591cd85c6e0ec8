"""The fake cuda-python runtime (tests/unit/engines/gpu_fakes.py) against the real
`cuda.bindings.runtime` of cuda-python 12.9 and 13: every function (with its parameter names), enum
member and constant the fake has exists with the same value; without a driver the real calls fail
the way the fake's do (`(cudaErrorInsufficientDriver, None)`); and framewire's gpu_status, run on
the real module, reports no GPU instead of raising."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from framewire.engines import cuda as fw_cuda
from tests.contract import versions
from tests.contract.install import ensure_package, probe
from tests.contract.surface import describe, fake_cuda_paths, mismatches
from tests.unit.engines.gpu_fakes import FakeCudaRuntime, install_cuda

pytestmark = pytest.mark.timeout(900)


@functools.lru_cache(maxsize=None)
def _real(major: int) -> dict[str, Any]:
    name, version = versions.cuda(major)
    target = ensure_package(f"{name}=={version}", deps=True)
    return probe("cuda", fake_cuda_paths(FakeCudaRuntime()), pythonpath=target)


@pytest.mark.parametrize("major", [12, 13])
def test_the_fake_cuda_runtime_matches_the_real_bindings(major: int) -> None:
    real = _real(major)
    assert real["version"] == versions.cuda(major)[1]
    fake = FakeCudaRuntime()
    facts = {path: describe(fake, path) for path in fake_cuda_paths(fake)}
    problems = mismatches(facts, real["facts"])
    assert problems == [], f"cuda-bindings {real['version']}: " + "; ".join(problems)


@pytest.mark.parametrize("major", [12, 13])
def test_without_a_driver_the_real_calls_fail_as_the_fake_does(major: int, monkeypatch: pytest.MonkeyPatch) -> None:
    conventions = _real(major)["conventions"]
    if conventions["has_driver"]:
        pytest.skip("this machine has a CUDA driver: the driver-less conventions cannot be seen here")
    fake = FakeCudaRuntime(no_driver="return")

    def shape(result: Any) -> list[Any]:
        items = result if isinstance(result, tuple) else (result,)
        return [items[0].name] + [None if v is None else type(v).__name__ for v in items[1:]]

    fake_calls = {
        "cudaGetDeviceCount": shape(fake.cudaGetDeviceCount()),
        "cudaGetDeviceProperties": shape(fake.cudaGetDeviceProperties(0)),
        "cudaSetDevice": shape(fake.cudaSetDevice(0)),
        "cudaMalloc": shape(fake.cudaMalloc(16)),
        "cudaMallocHost": shape(fake.cudaMallocHost(16)),
        "cudaStreamCreateWithFlags": shape(fake.cudaStreamCreateWithFlags(fake.cudaStreamNonBlocking)),
        "cudaMemGetInfo": shape(fake.cudaMemGetInfo()),
    }
    assert conventions["calls"] == fake_calls
    assert conventions["calls"]["cudaGetDeviceCount"] == ["cudaErrorInsufficientDriver", None]
    assert conventions["driver_version"] == ["cudaSuccess", 0] and fake.cudaDriverGetVersion() == (0, 0)
    assert conventions["error_name"] == ["cudaSuccess", "cudaErrorInsufficientDriver"]
    assert conventions["stream_handle_is_int"]
    # framewire's own code on the real module: no GPU, said in one line, nothing raised.
    reason = "no CUDA driver / GPU found (cudaGetDeviceCount: cudaErrorInsufficientDriver)"
    assert conventions["gpu_status"] == [0, reason]
    assert conventions["require_device"] == {"type": "EngineError", "message": reason}
    assert conventions["versions"] == {"driver": None, "runtime": conventions["runtime_version"]}
    install_cuda(monkeypatch, fake)
    assert fw_cuda.gpu_status() == (0, reason)
