"""The Triton backend's parts that need no server (tests/e2e/test_triton.py runs a real one): model
names, what counts as an outage, the config, leftover regions, and the CUDA shared-memory path held
to the signatures of tritonclient's module (no GPU here: that path has never run)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from pydantic import ValidationError
from tritonclient.utils import InferenceServerException

from framewire.config import EngineConfig
from framewire.config.engine import Backend, TritonConfig
from framewire.engines import triton_shm
from framewire.engines.registry import choose_backend, infer_workers
from framewire.engines.triton import is_outage, model_name

pytestmark = pytest.mark.timeout(30)


def test_model_names_default_to_the_file_name() -> None:
    settings = TritonConfig(model="yunet", secondary={"plates": "lpr"})
    assert model_name(settings, "a/face.onnx") == "yunet"
    assert model_name(TritonConfig(), "a/face.onnx") == "face"
    assert model_name(settings, "b/ocr.onnx", "plates") == "lpr"
    assert model_name(settings, "b/colour.onnx", "colour") == "colour"


def test_outages_are_told_from_refusals() -> None:
    def error(message: str, status: str) -> InferenceServerException:
        return InferenceServerException(message, status=status)

    assert is_outage(error("failed to connect to all addresses", "StatusCode.UNAVAILABLE"))
    assert is_outage(error("Deadline Exceeded", "StatusCode.DEADLINE_EXCEEDED"))
    assert is_outage(error("Request for unknown model: 'm' is not found", "StatusCode.NOT_FOUND"))
    assert not is_outage(error("This protocol is restricted, expecting header 'x'", "StatusCode.UNAVAILABLE"))
    assert not is_outage(error("unexpected shape for input 'input'", "StatusCode.INVALID_ARGUMENT"))


def test_config() -> None:
    engine = EngineConfig.model_validate({"backend": "triton", "processes_per_device": 3,
                                          "triton": {"url": "triton:8001", "shared_memory": "system"}})  # fmt: skip
    assert engine.backend is Backend.TRITON and engine.triton.url == "triton:8001"
    assert choose_backend(engine).backend is Backend.TRITON and infer_workers(engine) == 3  # clients, no GPU here
    for url in ("grpc://triton:8001", "triton", "triton:port"):
        with pytest.raises(ValidationError, match="host:port without a scheme"):
            TritonConfig(url=url)
    with pytest.raises(ValidationError):
        TritonConfig(shared_memory="gpu")  # type: ignore[arg-type]


def test_regions_of_dead_workers_are_swept(tmp_path: Path) -> None:
    dead = 2**22 + 12345  # above pid_max's default: no such process
    for name in (f"fw-triton-{dead}-0", f"fw-triton-{os.getpid()}-0", "framewire-1-x", f"fw-triton-{dead}-1"):
        (tmp_path / name).write_bytes(b"x")
    assert sorted(triton_shm.sweep_regions(str(tmp_path))) == [f"fw-triton-{dead}-0", f"fw-triton-{dead}-1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["framewire-1-x", f"fw-triton-{os.getpid()}-0"]


def _module_functions(module: str) -> dict[str, inspect.Signature]:
    """The public functions of a module's source, with their signatures, read without importing it
    (tritonclient's CUDA module needs cuda-python at import)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            params = [inspect.Parameter(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in node.args.args]
            defaults = node.args.defaults
            for i, default in enumerate(defaults):
                index = len(params) - len(defaults) + i
                params[index] = params[index].replace(default=ast.literal_eval(default))
            out[node.name] = inspect.Signature(params)
    return out


class _Signed:
    """Records calls, each checked against a real signature (the call must bind to it)."""

    def __init__(self, signatures: dict[str, inspect.Signature], answers: dict[str, Any]) -> None:
        self.signatures, self.answers, self.calls = signatures, answers, []

    def __getattr__(self, name: str) -> Any:
        signature = self.signatures[name]

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            self.calls.append((name, dict(bound.arguments)))
            return self.answers.get(name)

        return call


def test_cuda_shared_memory_calls_fit_tritonclients_module() -> None:
    module = _module_functions("tritonclient.utils.cuda_shared_memory")
    handle, contents = object(), np.arange(6, dtype=np.float32).reshape(2, 3)
    cudashm = _Signed(module, {"create_shared_memory_region": handle, "get_raw_handle": b"aGFuZGxl",
                               "get_contents_as_numpy": contents})  # fmt: skip
    client_methods = {
        name: inspect.signature(getattr(grpcclient.InferenceServerClient, name)).replace(
            parameters=list(inspect.signature(getattr(grpcclient.InferenceServerClient, name)).parameters.values())[1:]
        )
        for name in ("register_cuda_shared_memory", "unregister_cuda_shared_memory")
    }
    client = _Signed(client_methods, {})
    memory = triton_shm.CudaMemory(cudashm, device=1)  # type: ignore[arg-type]
    regions = triton_shm.Regions(memory, "host-1-m-0")
    name, size = regions.put(client, {"h": "v"}, "input", np.ones((2, 3), np.float32))
    assert size == 24
    memory.read(handle, np.dtype(np.float32), [2, 3])
    regions.close(type("S", (), {"client": client, "headers": {"h": "v"}})())
    assert [c[0] for c in cudashm.calls] == [
        "create_shared_memory_region", "get_raw_handle", "set_shared_memory_region", "get_contents_as_numpy",
        "destroy_shared_memory_region",
    ]
    create = cudashm.calls[0][1]
    assert create == {"triton_shm_name": name, "byte_size": 4096, "device_id": 1}
    assert [c[0] for c in client.calls] == [
        "unregister_cuda_shared_memory", "register_cuda_shared_memory", "unregister_cuda_shared_memory",
    ]
    register = client.calls[1][1]
    assert register["name"] == name and register["raw_handle"] == b"aGFuZGxl" and register["device_id"] == 1
    assert register["byte_size"] == 4096 and register["headers"] == {"h": "v"}


def test_system_shared_memory_round_trip_through_tritonclients_module() -> None:
    from tritonclient.utils import shared_memory

    memory = triton_shm.SystemMemory(shared_memory)
    handle = memory.create("fw-test", 4096)
    try:
        assert Path(triton_shm.SHM_DIR, handle._shm_key.lstrip("/")).exists()
        value = np.arange(12, dtype=np.float32).reshape(3, 4)
        memory.write(handle, value)
        read = memory.read(handle, np.dtype(np.float32), [3, 4])
        memory.write(handle, np.zeros_like(value))  # the region is reused: what was read is a copy
        np.testing.assert_array_equal(read, value)
    finally:
        memory.destroy(handle)
    assert not Path(triton_shm.SHM_DIR, handle._shm_key.lstrip("/")).exists()
