"""OnnxRuntimeEngine's GPU paths without a GPU: provider options, silent-fallback detection and IO
binding against a fake session that mirrors `onnxruntime.InferenceSession`; the optimised-model cache
on the real CPU provider."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from framewire.engines import onnxruntime as ort_engine
from framewire.engines.onnxruntime import OnnxRuntimeEngine, provider_in_use, provider_options
from framewire.pipeline.errors import ConfigError, EngineError

pytestmark = pytest.mark.timeout(60)

CPU, CUDA, TRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"


class _Arg:
    def __init__(self, name: str, shape: list[Any]) -> None:
        self.name, self.type, self.shape = name, "tensor(float)", shape


class FakeBinding:
    """`onnxruntime.IOBinding`: records what is bound; outputs y = 2x (and the input's sum)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.inputs: dict[str, np.ndarray] = {}
        self.outputs: list[str] = []

    def bind_cpu_input(self, name: str, arr_on_cpu: np.ndarray) -> None:
        self.calls.append(("bind_cpu_input", name, arr_on_cpu.shape))
        self.inputs[name] = arr_on_cpu

    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Any = None,
        buffer_ptr: Any = None,
    ) -> None:
        self.calls.append(("bind_output", name, device_type, device_id))
        self.outputs.append(name)

    def clear_binding_inputs(self) -> None:
        self.inputs = {}

    def clear_binding_outputs(self) -> None:
        self.outputs = []

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        self.calls.append(("copy_outputs_to_cpu",))
        x = self.inputs["x"]
        return [2 * x if name == "y" else np.array([x.sum()], np.float32) for name in self.outputs]


class FakeSession:
    """`onnxruntime.InferenceSession` that "falls back" to `runs_on` whatever was asked."""

    runs_on: list[str] = [CPU]
    created: list[dict[str, Any]] = []

    def __init__(self, model: Any, sess_options: Any = None, providers: Any = None) -> None:
        type(self).created.append({"model": model, "providers": providers})
        self.binding = FakeBinding()
        self.ran_with_binding = 0

    def get_providers(self) -> list[str]:
        return list(self.runs_on)

    def get_inputs(self) -> list[_Arg]:
        return [_Arg("x", ["N", 3, 8, 8])]

    def get_outputs(self) -> list[_Arg]:
        return [_Arg("y", ["N", 3, 8, 8]), _Arg("s", [1])]

    def io_binding(self) -> FakeBinding:
        return self.binding

    def run_with_iobinding(self, iobinding: FakeBinding, run_options: Any = None) -> None:
        self.ran_with_binding += 1

    def run(self, output_names: list[str], input_feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        x = input_feed["x"]
        return [2 * x if name == "y" else np.array([x.sum()], np.float32) for name in output_names]


@pytest.fixture
def gpu_build(monkeypatch: pytest.MonkeyPatch) -> type[FakeSession]:
    """ONNX Runtime as onnxruntime-gpu reports itself, with sessions faked."""
    monkeypatch.setattr(ort, "get_available_providers", lambda: [TRT, CUDA, CPU])
    monkeypatch.setattr(ort, "InferenceSession", FakeSession)
    monkeypatch.setattr(FakeSession, "created", [])
    monkeypatch.setattr(FakeSession, "runs_on", [CPU])
    return FakeSession


def test_provider_options_for_each_precision(tmp_path: Path) -> None:
    assert provider_options(CUDA, device_id=3, precision="fp16", cache_dir=tmp_path) == {
        "device_id": 3,
        "cudnn_conv_algo_search": "EXHAUSTIVE",
    }
    assert provider_options(CPU, device_id=0, precision="fp32", cache_dir=tmp_path) == {}
    root = str(tmp_path / "ort-tensorrt")
    base = {
        "device_id": 1,
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": str(tmp_path / "ort-tensorrt" / "abc"),
        "trt_timing_cache_enable": True,
        "trt_timing_cache_path": root,
    }
    for precision, fp16, int8 in (("fp32", False, False), ("fp16", True, False), ("int8", True, True)):
        options = provider_options(TRT, device_id=1, precision=precision, cache_dir=tmp_path, model_key="abc")
        assert options == {**base, "trt_fp16_enable": fp16, "trt_int8_enable": int8}
    with pytest.raises(ConfigError, match="engine.precision"):
        provider_options(TRT, device_id=0, precision="bf16", cache_dir=tmp_path)


def test_cuda_options_for_several_processes_on_one_gpu(tmp_path: Path) -> None:
    options = provider_options(
        CUDA, device_id=0, precision="fp32", cache_dir=tmp_path, gpu_mem_limit=3 << 30,
        cudnn_conv_algo_search="heuristic",
    )
    assert options == {
        "device_id": 0,
        "cudnn_conv_algo_search": "HEURISTIC",
        "gpu_mem_limit": 3 << 30,
        "arena_extend_strategy": "kSameAsRequested",
    }
    with pytest.raises(ConfigError, match="cudnn_conv_algo_search"):
        provider_options(CUDA, device_id=0, precision="fp32", cache_dir=tmp_path, cudnn_conv_algo_search="fast")


def test_tensorrt_provider_profile_shapes(tmp_path: Path) -> None:
    from framewire.engines.trt_build import ProfileShape

    profile = (
        ProfileShape("input", (1, 3, 160, 192), (4, 3, 288, 640), (8, 3, 288, 640)),
        ProfileShape("scale", (1, 1), (4, 1), (8, 1)),
    )
    options = provider_options(TRT, device_id=0, precision="fp16", cache_dir=tmp_path, profile=profile)
    assert options["trt_profile_min_shapes"] == "input:1x3x160x192,scale:1x1"
    assert options["trt_profile_opt_shapes"] == "input:4x3x288x640,scale:4x1"
    assert options["trt_profile_max_shapes"] == "input:8x3x288x640,scale:8x1"


def test_tensorrt_engines_are_cached_per_model_weights_not_per_topology(
    gpu_build: type[FakeSession], conv_model: Path, tmp_path: Path
) -> None:
    import onnx
    from onnx import numpy_helper

    retrained = tmp_path / "retrained.onnx"
    model = onnx.load(str(conv_model))
    weights = numpy_helper.to_array(model.graph.initializer[0]) + 1
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weights, model.graph.initializer[0].name))
    onnx.save(model, str(retrained))
    gpu_build.runs_on = [TRT, CUDA, CPU]
    paths = []
    for path, precision in ((conv_model, "fp16"), (retrained, "fp16"), (conv_model, "fp16"), (conv_model, "fp32")):
        OnnxRuntimeEngine(str(path), providers=("tensorrt", "cuda", "cpu"), precision=precision, cache_dir=str(tmp_path))
        paths.append(gpu_build.created[-1]["providers"][0][1]["trt_engine_cache_path"])
    # Same topology, other weights: another folder; the same model again: the same folder.
    assert paths[0] != paths[1] and paths[0] == paths[2] and paths[0] != paths[3]
    timing = {created["providers"][0][1]["trt_timing_cache_path"] for created in gpu_build.created}
    assert timing == {str(tmp_path / "ort-tensorrt")}


def test_registry_passes_the_profile_and_the_memory_limit(
    gpu_build: type[FakeSession], conv_model: Path, tmp_path: Path, fake_cuda: Any
) -> None:
    from framewire.engines.registry import OpenOptions, open_engine
    from framewire.config import EngineConfig

    config = EngineConfig(
        backend="onnxruntime",
        providers=("tensorrt", "cuda", "cpu"),
        processes_per_device=4,
        max_batch=4,
        cache_dir=str(tmp_path),
    )
    gpu_build.runs_on = [TRT, CUDA, CPU]
    options = OpenOptions(device=0, input_shapes=lambda: {"x": [(1, 3, 8, 8)]})
    open_engine(config, str(conv_model), {"x": (0,)}, options)
    trt_options, cuda_options = (p[1] for p in gpu_build.created[-1]["providers"][:2])
    assert trt_options["trt_profile_max_shapes"] == "x:4x3x8x8"
    assert cuda_options["cudnn_conv_algo_search"] == "HEURISTIC"
    assert cuda_options["gpu_mem_limit"] == int((16 << 30) * 0.9) // 4  # the fake GPU has 16 GiB
    alone = config.model_copy(update={"processes_per_device": 1, "gpu_mem_limit_mb": None})
    open_engine(alone, str(conv_model), {"x": (0,)}, options)
    cuda_alone = gpu_build.created[-1]["providers"][1][1]
    assert cuda_alone == {"device_id": 0, "cudnn_conv_algo_search": "EXHAUSTIVE"}


def test_providers_go_to_the_session_in_config_order_with_options(
    gpu_build: type[FakeSession], conv_model: Path, tmp_path: Path
) -> None:
    gpu_build.runs_on = [TRT, CUDA, CPU]
    engine = OnnxRuntimeEngine(
        str(conv_model),
        providers=("tensorrt", "cuda", "cpu"),
        device_id=2,
        precision="fp16",
        cache_dir=str(tmp_path),
    )
    (created,) = gpu_build.created
    names = [p[0] if isinstance(p, tuple) else p for p in created["providers"]]
    assert names == [TRT, CUDA, CPU]
    assert created["providers"][0][1]["trt_fp16_enable"] is True
    assert created["providers"][1] == (CUDA, {"device_id": 2, "cudnn_conv_algo_search": "EXHAUSTIVE"})
    assert engine.provider == TRT
    assert (tmp_path).is_dir()


def test_silent_fallback_is_one_warning_and_the_provider_in_use_is_reported(
    gpu_build: type[FakeSession], conv_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gpu_build.runs_on = [CPU]  # CUDA libraries missing: ORT dropped both GPU providers
    with caplog.at_level(logging.WARNING, logger="framewire.engines.onnxruntime"):
        engine = OnnxRuntimeEngine(
            str(conv_model), providers=("tensorrt", "cuda", "cpu"), cache_dir=str(tmp_path)
        )
    assert engine.provider == CPU
    expected = (
        f"model {conv_model}: asked for {TRT}, but ONNX Runtime runs it on {CPU} ({TRT}, {CUDA} could not "
        "be started: GPU libraries or GPU missing? --debug shows ONNX Runtime's messages)"
    )
    assert [r.getMessage() for r in caplog.records] == [expected]
    out = engine.infer({"x": np.ones((1, 3, 8, 8), np.float32)}, ["y"])
    np.testing.assert_array_equal(out["y"], 2 * np.ones((1, 3, 8, 8)))
    assert engine._session.ran_with_binding == 0  # type: ignore[union-attr] - no IO binding on the CPU


def test_falling_back_to_a_cpu_that_was_not_asked_for_is_an_error(
    gpu_build: type[FakeSession], conv_model: Path, tmp_path: Path
) -> None:
    gpu_build.runs_on = [CPU]
    with pytest.raises(EngineError) as info:
        OnnxRuntimeEngine(str(conv_model), providers=("cuda",), cache_dir=str(tmp_path))
    assert str(info.value) == (
        f"model {conv_model}: ONNX Runtime could not start {CUDA} (GPU libraries or GPU missing?) and would "
        f"run on {CPU}, which engine.providers does not list"
    )


def test_provider_in_use_cases() -> None:
    assert provider_in_use("m", [CUDA, CPU], [CUDA, CPU]) == CUDA
    assert provider_in_use("m", [TRT, CUDA, CPU], [CUDA, CPU]) == CUDA
    assert provider_in_use("m", [CPU], []) == CPU


def test_io_binding_on_cuda(gpu_build: type[FakeSession], conv_model: Path, tmp_path: Path) -> None:
    gpu_build.runs_on = [CUDA, CPU]
    engine = OnnxRuntimeEngine(
        str(conv_model), providers=("cuda", "cpu"), device_id=1, cache_dir=str(tmp_path)
    )
    session: FakeSession = engine._session  # type: ignore[assignment]
    x = np.arange(2 * 3 * 8 * 8, dtype=np.float32).reshape(2, 3, 8, 8)
    for _ in range(2):
        out = engine.infer({"x": x})
    assert list(out) == ["y", "s"]
    np.testing.assert_array_equal(out["y"], 2 * x)
    assert session.ran_with_binding == 2
    assert session.binding.calls[:4] == [
        ("bind_cpu_input", "x", (2, 3, 8, 8)),
        ("bind_output", "y", "cuda", 1),
        ("bind_output", "s", "cuda", 1),
        ("copy_outputs_to_cpu",),
    ]
    assert engine.infer({"x": x}, ["s"])["s"].shape == (1,)
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.infer({"x": x})


def test_the_optimised_model_is_cached_and_loaded_next_time(
    conv_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    first = OnnxRuntimeEngine(
        str(conv_model), optimized_cache=True, cache_dir=str(cache), graph_optimization="extended"
    )
    saved = list(cache.glob("ort-*.onnx"))
    assert len(saved) == 1 and not list(cache.glob(".*.tmp"))
    with caplog.at_level(logging.INFO, logger="framewire.engines.onnxruntime"):
        second = OnnxRuntimeEngine(
            str(conv_model), optimized_cache=True, cache_dir=str(cache), graph_optimization="extended"
        )
    assert f"optimised model from the cache: {saved[0]}" in caplog.text
    x = np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)
    np.testing.assert_allclose(first.infer({"x": x})["y"], second.infer({"x": x})["y"], rtol=1e-6)
    OnnxRuntimeEngine(str(conv_model), optimized_cache=True, cache_dir=str(cache), graph_optimization="basic")
    assert len(list(cache.glob("ort-*.onnx"))) == 2  # another level, another key


def test_the_logger_severity_is_restored(
    gpu_build: type[FakeSession], conv_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    levels: list[int] = []
    monkeypatch.setattr(ort_engine.ort, "set_default_logger_severity", levels.append)
    gpu_build.runs_on = [CUDA, CPU]
    OnnxRuntimeEngine(str(conv_model), providers=("cuda", "cpu"), cache_dir=str(tmp_path))
    assert levels == [4, 2]  # ORT's red lines hidden while the session starts, then back to default


def test_io_binding_with_the_real_api_on_the_cpu(conv_model: Path, conv_weights: np.ndarray) -> None:
    # The same calls as on CUDA (bind_cpu_input, bind_output, run_with_iobinding, copy_outputs_to_cpu),
    # with outputs on the CPU: checks them against the installed ONNX Runtime.
    engine = OnnxRuntimeEngine(str(conv_model), io_binding=True, dynamic_axes={"x": (2, 3)})
    plain = OnnxRuntimeEngine(str(conv_model), dynamic_axes={"x": (2, 3)})
    for size in (8, 16, 8):
        x = np.random.default_rng(size).random((1, 3, size, size), dtype=np.float32)
        bound = engine.infer({"x": x})
        expected = plain.infer({"x": x})
        assert list(bound) == ["y", "z"]
        np.testing.assert_allclose(
            bound["y"], np.einsum("oc,nchw->nohw", conv_weights[:, :, 0, 0], x), rtol=1e-5
        )
        np.testing.assert_array_equal(bound["z"], expected["z"])
    assert list(engine.infer({"x": x}, ["z"])) == ["z"]
