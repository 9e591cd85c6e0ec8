"""The fake tensorrt modules (tests/unit/engines/gpu_fakes.py) against the real TensorRT 10 and 11
bindings: every name, enum value, parameter list and property the fakes have - which is everything
the engines use, see test_code_uses.py - exists in the real module with the same meaning; the
constructors fail the same way without CUDA; and framewire's own logger, calibrator and error
wrapping work on the real classes. The real module imports over stub TensorRT libraries (install.py).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.contract import versions
from tests.contract.install import ensure_package, probe, stub_libraries
from tests.contract.surface import describe, fake_tensorrt_paths, mismatches
from tests.unit.engines.gpu_fakes import NULL_FACTORY, FakeCudaRuntime, FakeTensorRT

pytestmark = pytest.mark.timeout(900)

FAKE_VERSIONS = {10: "10.16.1.11", 11: "11.4.0.106"}


def _fake(major: int) -> FakeTensorRT:
    return FakeTensorRT(FAKE_VERSIONS[major])


@functools.lru_cache(maxsize=None)
def _real(major: int, paths: tuple[str, ...]) -> dict[str, Any]:
    name, version = versions.tensorrt(major)
    target = ensure_package(f"{name}=={version}", deps=False)
    libraries = stub_libraries(int(version.split(".")[0]))
    return probe("tensorrt", list(paths), pythonpath=target, libraries=libraries)


def _paths(major: int) -> tuple[str, ...]:
    return tuple(fake_tensorrt_paths(_fake(major)))


@pytest.mark.parametrize("major", [10, 11])
def test_the_fake_tensorrt_matches_the_real_bindings(major: int) -> None:
    fake = _fake(major)
    paths = _paths(major)
    real = _real(major, paths)
    assert real["version"] == versions.tensorrt(major)[1]
    fake_facts = {path: describe(fake, path) for path in paths}
    problems = mismatches(fake_facts, real["facts"])
    assert problems == [], f"TensorRT {real['version']}: " + "; ".join(problems)


@pytest.mark.parametrize("major", [10, 11])
def test_without_cuda_the_constructors_fail_as_the_fakes_do(major: int, monkeypatch: pytest.MonkeyPatch) -> None:
    conventions = _real(major, _paths(major))["conventions"]
    null = {"type": "TypeError", "message": NULL_FACTORY}
    assert conventions["runtime_without_cuda"] == null
    assert conventions["builder_without_cuda"] == null
    # framewire's wrapping, on the real class: one EngineError.
    assert conventions["construct_builder"] == {
        "type": "EngineError",
        "message": f"TensorRT cannot create a builder (CUDA driver or GPU unusable?): {NULL_FACTORY}",
    }
    fake = _fake(major)
    monkeypatch.setattr(FakeTensorRT, "cuda", FakeCudaRuntime(gpus=()))
    for factory in (fake.Runtime, fake.Builder):
        with pytest.raises(TypeError) as info:
            factory(fake.Logger())
        assert str(info.value) == NULL_FACTORY


@pytest.mark.parametrize("major", [10, 11])
def test_framewire_logger_and_types_work_on_the_real_classes(major: int) -> None:
    conventions = _real(major, _paths(major))["conventions"]
    assert conventions["logger_is_an_ilogger"] and conventions["one_logger"]
    assert conventions["import_tensorrt"]
    assert conventions["nptype_float"] == "float32"
    assert conventions["nptype_bf16"]["type"] == "TypeError"  # what _describe catches
    fake = _fake(major)
    with pytest.raises(TypeError):
        fake.nptype(fake.DataType.BF16)


def test_tensorrt_10_takes_framewires_calibrator_and_11_has_none() -> None:
    ten = _real(10, _paths(10))["conventions"]
    assert ten["calibrator"] == {"is_calibrator": True, "batch_size": 1}
    eleven = _real(11, _paths(11))["conventions"]
    assert "calibrator" not in eleven
    assert not hasattr(_fake(11), "IInt8EntropyCalibrator2")


def test_the_contract_fails_when_the_code_needs_what_a_version_lacks() -> None:
    """What a TensorRT 10 fake (and so the TensorRT 10 code path) relies on, checked against the
    real TensorRT 11: the check must name what 11 removed, or it could never catch anything."""
    paths = _paths(10)
    real11 = _real(11, paths)
    fake10 = _fake(10)
    problems = mismatches({path: describe(fake10, path) for path in paths}, real11["facts"])
    for expected in (
        "BuilderFlag.FP16: missing",
        "BuilderFlag.INT8: missing",
        "IInt8EntropyCalibrator2: missing",
        "IBuilderConfig.set_calibration_profile: missing",
        "IBuilderConfig.int8_calibrator: missing",
        "NetworkDefinitionCreationFlag.EXPLICIT_BATCH: missing",
        "NetworkDefinitionCreationFlag.STRONGLY_TYPED: value 0, the fake says 1",
    ):
        assert expected in problems
