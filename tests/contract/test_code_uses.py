"""What the engines read from `tensorrt` and cuda-python is all in the fakes, so the contract tests
(which check the fakes against the real modules) cover the code itself. Pure Python: no install."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.contract.surface import code_paths, fake_cuda_paths, fake_tensorrt_paths
from tests.unit.engines.gpu_fakes import FakeCudaRuntime, FakeTensorRT, cudaError_t

pytestmark = pytest.mark.timeout(60)


def test_every_tensorrt_name_the_engines_use_is_in_a_fake() -> None:
    used = code_paths()["tensorrt"]
    known = set(fake_tensorrt_paths(FakeTensorRT("10.16.1.11"))) | set(fake_tensorrt_paths(FakeTensorRT("11.4.0.106")))
    known.add("__version__")
    assert {"Builder", "Runtime", "BuilderFlag.FP16", "NetworkDefinitionCreationFlag.STRONGLY_TYPED"} <= used
    assert sorted(used - known) == []


def test_every_cuda_name_the_engines_use_is_in_the_fake() -> None:
    found = code_paths()
    fake = set(fake_cuda_paths(FakeCudaRuntime()))
    errors = set(cudaError_t.__members__)
    assert {"cudaMalloc", "cudaHostRegister", "cudaMemcpyKind.cudaMemcpyHostToDevice"} <= found["cuda"] | found["cuda_names"]
    assert sorted(found["cuda"] - fake) == []
    assert sorted(found["cuda_names"] - fake - errors) == []


def test_the_scan_sees_a_new_use(tmp_path: Path) -> None:
    source = tmp_path / "new.py"
    source.write_text("def f(trt, rt):\n    trt.BuilderFlag.SPARSE_WEIGHTS\n    call('cudaMemset', 0)\n")
    found = code_paths([source])
    assert found["tensorrt"] == {"BuilderFlag.SPARSE_WEIGHTS"} and found["cuda_names"] == {"cudaMemset"}
    ast.parse(source.read_text())
