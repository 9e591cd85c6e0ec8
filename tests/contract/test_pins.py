"""pyproject's GPU extras and the versions the contract tests check stay in step: every TensorRT and
cuda-python the extras allow is a version checked here, and each extra's ONNX Runtime is built for
the CUDA of its set (onnxruntime-gpu 1.26 is the last for CUDA 12; 1.27 to 1.31 are CUDA 13, and
every one of them links TensorRT 10 in its TensorRT provider)."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.contract import versions

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)


def _extra(name: str) -> dict[str, Requirement]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {Requirement(r).name: Requirement(r) for r in data["project"]["optional-dependencies"][name]}


@pytest.mark.parametrize(
    ("extra", "tensorrt", "trt_major", "cuda_major", "ort_in", "ort_out"),
    [
        ("gpu", "tensorrt-cu12", 10, 12, "1.26.0", "1.27.0"),
        ("gpu-cu13", "tensorrt-cu13", 10, 13, "1.31.1", "1.26.0"),
        ("gpu-trt11", "tensorrt-cu13", 11, 13, "1.31.1", "1.26.0"),
    ],
)
def test_each_gpu_extra_is_one_checked_set(
    extra: str, tensorrt: str, trt_major: int, cuda_major: int, ort_in: str, ort_out: str
) -> None:
    requirements = _extra(extra)
    assert set(requirements) == {"onnxruntime-gpu", "cuda-python", tensorrt}
    assert requirements[tensorrt].specifier.contains(versions.TENSORRT[trt_major][1])
    assert not requirements[tensorrt].specifier.contains(f"{trt_major + 1}.0.0")
    # cuda-python X.Y.Z installs cuda-bindings X.Y.Z: the version the contract checks.
    assert requirements["cuda-python"].specifier.contains(versions.CUDA[cuda_major][1])
    ort = requirements["onnxruntime-gpu"]
    assert ort.specifier.contains(ort_in) and not ort.specifier.contains(ort_out)
    assert ort.extras == {"cuda", "cudnn"}


def test_the_gpu_extras_and_cpu_exclude_each_other_for_uv() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (group,) = data["tool"]["uv"]["conflicts"]
    assert {item["extra"] for item in group} == {"cpu", "gpu", "gpu-cu13", "gpu-trt11"}
