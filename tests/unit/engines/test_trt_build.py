"""framewire.engines.trt_build: cache keys, optimisation profiles, calibration batching and the build itself,
against the fake tensorrt and cuda-python modules of `gpu_fakes`."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from framewire.engines import trt_build, trt_calibration
from framewire.engines.trt_build import (
    BuildRequest,
    ProfileShape,
    cache_key,
    ensure_engine,
    make_profile,
)
from framewire.engines.trt_calibration import BatchFeeder, make_calibrator
from framewire.pipeline.errors import ConfigError, EngineError
from framewire.pipeline.wire.tensors import TensorSpec
from tests.unit.engines.gpu_fakes import (
    Builder,
    BuilderFlag,
    FakeCudaRuntime,
    FakeTensorRT,
)

pytestmark = pytest.mark.timeout(60)

F32 = np.dtype(np.float32)
PROFILE = (ProfileShape("input", (1, 3, 288, 640), (4, 3, 288, 640), (8, 3, 288, 640)),)


# --- cache key ---------------------------------------------------------------------------------


def _key(**changes: object) -> str:
    parts: dict[str, object] = {
        "onnx_bytes": b"model",
        "trt_version": "10.3.0",
        "gpu_name": "NVIDIA H100",
        "precision": "fp16",
        "profile": PROFILE,
        "extra": None,
    }
    parts.update(changes)
    data = parts.pop("onnx_bytes")
    return cache_key(data, **parts)  # type: ignore[arg-type]


def test_cache_key_is_stable_and_changes_with_each_component() -> None:
    base = _key()
    assert base == _key() and len(base) == 64
    other_profile = (ProfileShape("input", (1, 3, 288, 640), (4, 3, 288, 640), (16, 3, 288, 640)),)
    other_dims = (ProfileShape("input", (1, 3, 480, 640), (4, 3, 480, 640), (8, 3, 480, 640)),)
    variants = {
        "onnx": _key(onnx_bytes=b"model2"),
        "tensorrt": _key(trt_version="10.4.0"),
        "gpu": _key(gpu_name="NVIDIA L4"),
        "precision": _key(precision="int8"),
        "max batch": _key(profile=other_profile),
        "input dims": _key(profile=other_dims),
        "calibration": _key(extra={"calibration": "clip.mp4:1000:256:8"}),
    }
    assert base not in variants.values()
    assert len(set(variants.values())) == len(variants)


def test_engine_and_cache_file_names(tmp_path: Path) -> None:
    key = _key()
    path = trt_build.engine_file(tmp_path, "models/face detection.onnx", "fp16", key)
    assert path == tmp_path / f"face_detection-fp16-{key[:20]}.engine"
    timing = trt_build.timing_cache_file(tmp_path, "10.3.0", "NVIDIA H100 80GB HBM3")
    assert timing.name == "timing-trt10.3.0-NVIDIA_H100_80GB_HBM3.cache"
    a = trt_calibration.calibration_cache_file(tmp_path, b"model", "clip.mp4:1:256:8")
    assert a != trt_calibration.calibration_cache_file(tmp_path, b"model", "other.mp4:1:256:8")
    assert trt_build.cache_dir(None) == Path("~/.cache/framewire/engines").expanduser()
    assert trt_build.cache_dir(str(tmp_path)) == tmp_path


# --- profile -----------------------------------------------------------------------------------


def test_profile_spans_the_batch_and_the_sources_sizes() -> None:
    spec = TensorSpec("input", F32, ("batch", 3, "input_2", "input_3"))
    examples = {"input": [(1, 3, 288, 640), (1, 3, 480, 640), (1, 3, 288, 640), (1, 3, 96, 128)]}
    (shape,) = make_profile([spec], min_batch=1, opt_batch=4, max_batch=8, examples=examples)
    assert shape == ProfileShape("input", (1, 3, 96, 128), (4, 3, 288, 640), (8, 3, 480, 640))


def test_profile_keeps_fixed_dims_and_a_fixed_batch() -> None:
    specs = [TensorSpec("x", F32, (1, 3, 8, 8)), TensorSpec("scale", F32, (None, 1))]
    shapes = make_profile(specs, min_batch=2, opt_batch=2, max_batch=4)
    assert shapes == (
        ProfileShape("x", (1, 3, 8, 8), (1, 3, 8, 8), (1, 3, 8, 8)),
        ProfileShape("scale", (2, 1), (2, 1), (4, 1)),
    )


def test_opt_size_is_the_most_common_then_the_largest() -> None:
    spec = TensorSpec("x", F32, (None, 3, None))
    examples = {"x": [(1, 3, 10), (1, 3, 20), (1, 3, 20), (1, 3, 30), (1, 3, 30)]}
    (shape,) = make_profile([spec], min_batch=1, opt_batch=1, max_batch=1, examples=examples)
    assert shape.opt == (1, 3, 30)


def test_profile_errors_name_the_input_and_the_batch_order() -> None:
    spec = TensorSpec("input", F32, (None, 3, "h", "w"))
    with pytest.raises(ConfigError, match=r"size of dim 2 of input 'input' \(shape \[None, 3, 'h', 'w'\]\)"):
        make_profile([spec], min_batch=1, opt_batch=1, max_batch=1, examples={})
    with pytest.raises(ConfigError, match=r"min_batch <= opt_batch <= max_batch \(got 4, 2, 8\)"):
        make_profile([spec], min_batch=4, opt_batch=2, max_batch=8)


def test_prepare_makes_the_batch_dynamic_for_a_profile_of_several_frames(conv_model: Path) -> None:
    _, profile = trt_build.prepare(BuildRequest(str(conv_model), min_batch=1, opt_batch=2, max_batch=4))
    assert profile == (ProfileShape("x", (1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8)),)
    single, profile1 = trt_build.prepare(BuildRequest(str(conv_model)))
    assert profile1 == (ProfileShape("x", (1, 3, 8, 8), (1, 3, 8, 8), (1, 3, 8, 8)),)
    assert single == conv_model.read_bytes()  # nothing to rewrite: the file as it is
    with pytest.raises(ConfigError, match="engine.precision: 'fp8'"):
        trt_build.prepare(BuildRequest(str(conv_model), precision="fp8"))


def test_prepare_takes_spatial_dims_from_the_examples(conv_model: Path) -> None:
    request = BuildRequest(
        str(conv_model), dynamic_axes={"x": (2, 3)}, examples={"x": [(1, 3, 16, 24), (1, 3, 8, 8)]}
    )
    _, profile = trt_build.prepare(request)
    assert profile == (ProfileShape("x", (1, 3, 8, 8), (1, 3, 16, 24), (1, 3, 16, 24)),)


# --- calibration batching ------------------------------------------------------------------------


def _frames(count: int, shape: tuple[int, ...] = (1, 3, 2, 2)) -> list[np.ndarray]:
    return [np.full(shape, i, np.float32) for i in range(count)]


def test_feeder_gives_exact_batches_and_drops_the_partial_one(caplog: pytest.LogCaptureFixture) -> None:
    feeder = BatchFeeder(_frames(10), batch_size=4, input_names=["x"])
    with caplog.at_level(logging.INFO, logger="framewire.engines.trt_calibration"):
        batches = [feeder.next_batch(), feeder.next_batch(), feeder.next_batch()]
    first, second, end = batches
    assert first is not None and second is not None and end is None
    assert first["x"].shape == (4, 3, 2, 2) and first["x"].flags.c_contiguous
    assert [int(v) for v in first["x"][:, 0, 0, 0]] == [0, 1, 2, 3]
    assert [int(v) for v in second["x"][:, 0, 0, 0]] == [4, 5, 6, 7]
    assert feeder.next_batch() is None  # and stays at the end
    assert (feeder.used, feeder.dropped) == (8, 2)
    assert "the last 2 frame(s) do not fill a batch of 4" in caplog.text


def test_feeder_rechunks_any_incoming_batch_size_and_honours_the_limit() -> None:
    chunks = [np.arange(n, dtype=np.float32).reshape(n, 1) + 10 * i for i, n in enumerate((3, 5, 1, 6))]
    feeder = BatchFeeder(chunks, batch_size=4, input_names=["x"], limit=12)
    got = []
    while (batch := feeder.next_batch()) is not None:
        got.append(batch["x"][:, 0].tolist())
    assert got == [[0, 1, 2, 10], [11, 12, 13, 14], [20, 30, 31, 32]]
    assert feeder.used == 12 and feeder.dropped == 0


def test_feeder_peek_does_not_consume_and_dicts_feed_several_inputs() -> None:
    items = [{"a": np.zeros((1, 2), np.float32) + i, "b": np.ones((1, 1), np.int32) * i} for i in range(4)]
    feeder = BatchFeeder(items, batch_size=2, input_names=["a", "b"])
    peeked = feeder.peek()
    assert peeked is not None and feeder.peek() is peeked
    first = feeder.next_batch()
    assert first is peeked
    second = feeder.next_batch()
    assert second is not None and second["b"][:, 0].tolist() == [2, 3]
    assert feeder.next_batch() is None


def test_feeder_errors() -> None:
    with pytest.raises(ConfigError, match="batch must be >= 1"):
        BatchFeeder([], batch_size=0, input_names=["x"])
    with pytest.raises(EngineError, match="lacks input"):
        BatchFeeder([{"a": np.zeros((1, 1))}], batch_size=1, input_names=["a", "b"]).next_batch()
    with pytest.raises(EngineError, match="must be dicts by name"):
        BatchFeeder([np.zeros((1, 1))], batch_size=1, input_names=["a", "b"]).next_batch()


def test_calibrator_hands_device_pointers_then_none_and_caches_its_table(
    fake_trt: FakeTensorRT, fake_cuda: FakeCudaRuntime, tmp_path: Path
) -> None:
    cache = tmp_path / "calibration.cache"
    feeder = BatchFeeder(_frames(5), batch_size=2, input_names=["x"])
    calibrator = make_calibrator(fake_trt, feeder, cache)
    assert isinstance(calibrator, fake_trt.IInt8EntropyCalibrator2)
    assert calibrator.get_batch_size() == 2
    assert calibrator.read_calibration_cache() is None
    pointers = calibrator.get_batch(["x"])
    assert pointers is not None and len(pointers) == 1
    on_device = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * 24).from_address(pointers[0]))
    assert on_device.reshape(2, 3, 2, 2)[:, 0, 0, 0].tolist() == [0, 1]
    assert calibrator.get_batch(["x"]) == pointers  # the same device buffer, refilled
    assert on_device.reshape(2, 3, 2, 2)[:, 0, 0, 0].tolist() == [2, 3]
    assert calibrator.get_batch(["x"]) is None  # frame 4 alone is no batch
    calibrator.write_calibration_cache(b"TRT-1003-EntropyCalibration2")
    assert cache.read_bytes() == b"TRT-1003-EntropyCalibration2"
    assert calibrator.read_calibration_cache() == b"TRT-1003-EntropyCalibration2"
    calibrator.close()
    assert fake_cuda.memory == {}


def test_calibrator_keeps_an_error_instead_of_raising_into_tensorrt(
    fake_trt: FakeTensorRT, tmp_path: Path
) -> None:
    def broken():  # type: ignore[no-untyped-def]
        yield np.zeros((1, 1), np.float32)
        raise OSError("video went away")

    calibrator = make_calibrator(fake_trt, BatchFeeder(broken(), 2, ["x"]), tmp_path / "c")
    assert calibrator.get_batch(["x"]) is None
    assert isinstance(calibrator.error, OSError)


# --- building ----------------------------------------------------------------------------------


def _request(model: Path, tmp_path: Path, **changes: object) -> BuildRequest:
    request = BuildRequest(
        str(model), cache_dir=str(tmp_path / "engines"), min_batch=1, opt_batch=2, max_batch=4
    )
    return dataclasses.replace(request, **changes)  # type: ignore[arg-type]


def _plan(path: Path) -> dict:
    return json.loads(path.read_bytes())


def test_builds_once_then_loads_from_the_cache(
    fake_trt: FakeTensorRT, conv_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    request = _request(conv_model, tmp_path)
    with caplog.at_level(logging.INFO, logger="framewire.engines.trt_build"):
        first = ensure_engine(request)
        second = ensure_engine(request)
    assert first == second and first.is_file() and Builder.builds == 1
    assert first.name.startswith("conv-fp32-") and first.parent == tmp_path / "engines"
    assert "from the cache" in caplog.text
    plan = _plan(first)
    assert plan["inputs"] == [
        {
            "name": "x",
            "dtype": 0,
            "shape": [-1, 3, 8, 8],
            "profile": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]],
        }
    ]
    assert plan["workspace"] == 2048 << 20 and plan["flags"] == []
    timing = list((tmp_path / "engines").glob("timing-trt10.16.1.11-NVIDIA_Fake_GPU.cache"))
    assert len(timing) == 1 and timing[0].read_bytes() == b"timing:NVIDIA Fake GPU:1"
    ensure_engine(request, force=True)
    assert Builder.builds == 2
    # The timing cache of the first build is fed to the second one.
    assert timing[0].read_bytes() == b"timing:NVIDIA Fake GPU:2"


def test_each_component_gives_its_own_engine_file(
    fake_trt: FakeTensorRT, fake_cuda: FakeCudaRuntime, conv_model: Path, tmp_path: Path
) -> None:
    base = ensure_engine(_request(conv_model, tmp_path))
    fp16 = ensure_engine(_request(conv_model, tmp_path, precision="fp16"))
    bigger = ensure_engine(_request(conv_model, tmp_path, max_batch=8))
    fake_trt.__version__ = "10.4.0"
    newer = ensure_engine(_request(conv_model, tmp_path))
    fake_cuda.gpus = ("NVIDIA L4",)
    other_gpu = ensure_engine(_request(conv_model, tmp_path))
    assert len({base, fp16, bigger, newer, other_gpu}) == 5 and Builder.builds == 5
    assert fp16.name.startswith("conv-fp16-")
    assert _plan(fp16)["flags"] == [int(BuilderFlag.FP16)]


def test_int8_calibrates_on_the_given_frames_and_reuses_the_table(
    fake_trt: FakeTensorRT, conv_model: Path, tmp_path: Path
) -> None:
    reads: list[int] = []

    def frames():  # type: ignore[no-untyped-def]
        reads.append(1)
        return (np.random.default_rng(i).random((1, 3, 8, 8), dtype=np.float32) for i in range(7))

    request = _request(
        conv_model,
        tmp_path,
        precision="int8",
        calibration=frames,
        calibration_id="clip.mp4:1000:7:3",
        calibration_batch=3,
    )
    plan = _plan(ensure_engine(request))
    assert plan["flags"] == sorted([int(BuilderFlag.FP16), int(BuilderFlag.INT8)])
    assert plan["calibration"] == {"batches": 2, "batch_size": 3}  # 7 frames: 2 batches, 1 dropped
    tables = list((tmp_path / "engines").glob("calibration-*.cache"))
    assert len(tables) == 1 and tables[0].read_bytes() == b"table:2x3"
    rebuilt = _plan(ensure_engine(request, force=True))
    assert rebuilt["calibration"] == {"from_cache": "table:2x3"}
    other = dataclasses.replace(request, calibration_id="other.mp4:5:7:3")
    assert ensure_engine(other) != ensure_engine(request)


def test_int8_without_calibration_frames_is_a_config_error(
    fake_trt: FakeTensorRT, conv_model: Path, tmp_path: Path
) -> None:
    with pytest.raises(
        ConfigError, match=r"^engine.calibration.video: precision int8 needs calibration frames"
    ):
        ensure_engine(_request(conv_model, tmp_path, precision="int8"))
    too_few = _request(
        conv_model,
        tmp_path,
        precision="int8",
        calibration=lambda: _frames(2, (1, 3, 8, 8)),
        calibration_batch=8,
    )
    with pytest.raises(ConfigError, match="fewer than 8 frames to calibrate with"):
        ensure_engine(too_few)


def test_calibration_profile_is_the_calibration_batch(
    fake_trt: FakeTensorRT, conv_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = []
    original = fake_trt.IBuilderConfig.set_calibration_profile

    def spy(self, profile):  # type: ignore[no-untyped-def]
        seen.append(profile.shapes)
        return original(self, profile)

    monkeypatch.setattr(fake_trt.IBuilderConfig, "set_calibration_profile", spy)
    request = _request(
        conv_model,
        tmp_path,
        precision="int8",
        calibration=lambda: _frames(4, (1, 3, 8, 8)),
        calibration_batch=2,
    )
    ensure_engine(request)
    assert seen == [{"x": ((2, 3, 8, 8), (2, 3, 8, 8), (2, 3, 8, 8))}]


def test_a_parse_failure_is_a_one_line_engine_error(fake_trt: FakeTensorRT, tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph([], "empty", [value], [value]))
    path = tmp_path / "empty.onnx"
    onnx.save(model, str(path))
    with pytest.raises(EngineError) as info:
        ensure_engine(_request(path, tmp_path, max_batch=1, opt_batch=1))
    assert str(info.value) == (
        f"model {path}: TensorRT cannot parse it: In node -1 (parseGraph): INVALID_GRAPH: "
        "Assertion failed: the graph has no nodes"
    )


def test_a_build_failure_is_a_one_line_engine_error(
    fake_trt: FakeTensorRT, conv_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(self, network, config):  # type: ignore[no-untyped-def]
        self.logger.log(fake_trt.ILogger.Severity.ERROR, "out of memory\ndetails")

    monkeypatch.setattr(fake_trt.Builder, "build_serialized_network", fails)
    with pytest.raises(EngineError) as info:
        ensure_engine(_request(conv_model, tmp_path))
    assert str(info.value) == f"model {conv_model}: TensorRT could not build an engine: out of memory"
    assert not list((tmp_path / "engines").glob("*.engine"))


def test_no_gpu_is_checked_before_anything_is_built(
    fake_trt: FakeTensorRT, fake_cuda: FakeCudaRuntime, conv_model: Path, tmp_path: Path
) -> None:
    fake_cuda.gpus = ()
    with pytest.raises(EngineError, match=r"^no CUDA driver / GPU found"):
        ensure_engine(_request(conv_model, tmp_path))
    assert Builder.builds == 0


def test_an_unwritable_cache_dir_names_the_key(
    fake_trt: FakeTensorRT, conv_model: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"^engine.cache_dir: cannot create"):
        ensure_engine(_request(conv_model, tmp_path, cache_dir=str(blocker / "engines")))


def test_build_engine_command_builds_the_configs_engine_once(
    fake_trt: FakeTensorRT, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from framewire.cli import main

    args = ["build-engine", "--set", f"engine.cache_dir={tmp_path}", "--precision", "fp16"]
    assert main(args) == 0
    (path,) = tmp_path.glob("face_detection_yunet_2023mar-fp16-*.engine")
    assert capsys.readouterr().out == f"GPU 0 (NVIDIA Fake GPU): {path}\n"
    plan = _plan(path)
    # YuNet's input made dynamic, sized by the default job's 176x144 clip (padded to 192x160).
    assert plan["inputs"][0]["profile"] == [[1, 3, 160, 192]] * 3
    assert main(args) == 0 and Builder.builds == 1
    assert main([*args, "--force"]) == 0 and Builder.builds == 2


# --- TensorRT 11, failures TensorRT reports, the timing cache, calibration shapes -----------------


def test_tensorrt_11_builds_fp16_from_a_converted_model_with_no_precision_flags(
    fake_trt11: FakeTensorRT, conv_model: Path, tmp_path: Path
) -> None:
    plan = _plan(ensure_engine(_request(conv_model, tmp_path, precision="fp16")))
    assert plan["flags"] == [] and plan["strongly_typed"] is True
    assert plan["model"] == "fp16"  # the precision is in the model TensorRT parsed
    fp32 = _plan(ensure_engine(_request(conv_model, tmp_path)))
    assert fp32["model"] == "fp32" and fp32["strongly_typed"] is True


def test_tensorrt_10_keeps_the_builder_flags(fake_trt: FakeTensorRT, conv_model: Path, tmp_path: Path) -> None:
    plan = _plan(ensure_engine(_request(conv_model, tmp_path, precision="fp16")))
    assert plan["flags"] == [int(BuilderFlag.FP16)] and plan["model"] == "fp32"
    assert plan["strongly_typed"] is False


def test_tensorrt_11_int8_quantises_on_the_cpu_once_and_builds_the_qdq_model(
    fake_trt11: FakeTensorRT, conv_model: Path, tmp_path: Path
) -> None:
    reads: list[int] = []

    def frames():  # type: ignore[no-untyped-def]
        reads.append(1)
        return (np.random.default_rng(i).random((1, 3, 8, 8), dtype=np.float32) for i in range(6))

    request = _request(
        conv_model, tmp_path, precision="int8", calibration=frames, calibration_id="clip.mp4:1:6:2"
    )
    plan = _plan(ensure_engine(request))
    assert plan["model"] == "qdq" and plan["flags"] == [] and plan["calibration"] == {}
    (qdq,) = (tmp_path / "engines").glob("calibration-*.onnx")
    from framewire.engines.quantize import quantization_info

    info = quantization_info(qdq)
    assert info is not None and info["format"] == "QDQ s8s8 symmetric (TensorRT)" and info["frames"] == 6
    ensure_engine(request, force=True)
    assert reads == [1]  # the Q/DQ model is reused, not made again


def test_tensorrt_11_int8_without_qdq_or_frames_says_what_to_do(
    fake_trt11: FakeTensorRT, conv_model: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        ensure_engine(_request(conv_model, tmp_path, precision="int8"))
    assert str(info.value) == (
        "engine.calibration.video: precision int8 with TensorRT 11 needs a model with Q/DQ nodes "
        "(quantize --recipe tensorrt) or calibration frames to make one (set engine.calibration.video)"
    )


def _quantised(conv_model: Path, tmp_path: Path, recipe: str) -> Path:
    from framewire.engines.quantize import QuantizeOptions, quantize_model

    out = tmp_path / f"conv-{recipe}.onnx"
    feeds = ({"x": np.random.default_rng(i).random((1, 3, 8, 8), dtype=np.float32)} for i in range(8))
    quantize_model(conv_model, out, feeds, options=QuantizeOptions(recipe=recipe, min_channels=0))
    return out


@pytest.mark.parametrize("version", ["10.16.1.11", "11.4.0.106"])
def test_a_tensorrt_qdq_model_builds_int8_without_calibration(
    fake_cuda: FakeCudaRuntime, monkeypatch: pytest.MonkeyPatch, conv_model: Path, tmp_path: Path, version: str
) -> None:
    from tests.unit.engines.gpu_fakes import install_trt

    install_trt(monkeypatch, version)
    model = _quantised(conv_model, tmp_path, "tensorrt")
    plan = _plan(ensure_engine(_request(model, tmp_path, precision="int8")))
    assert plan["model"] == "qdq" and plan["calibration"] == {}
    expected = [] if version.startswith("11") else sorted([int(BuilderFlag.FP16), int(BuilderFlag.INT8)])
    assert plan["flags"] == expected


def test_a_cpu_quantised_model_is_refused_by_name(fake_trt: FakeTensorRT, conv_model: Path, tmp_path: Path) -> None:
    model = _quantised(conv_model, tmp_path, "cpu")
    with pytest.raises(ConfigError, match=r"non-zero zero points .* make it with quantize --recipe tensorrt$"):
        ensure_engine(_request(model, tmp_path, precision="int8"))


def test_a_builder_tensorrt_cannot_create_is_one_engine_error(
    fake_trt: FakeTensorRT, fake_cuda: FakeCudaRuntime, conv_model: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from framewire.engines import cuda

    monkeypatch.setattr(cuda, "require_device", lambda device: "NVIDIA Fake GPU")
    monkeypatch.setattr(cuda, "set_device", lambda device: None)
    fake_cuda.no_driver = "return"  # CUDA cannot start: createInferBuilder returns NULL
    with pytest.raises(EngineError) as info:
        ensure_engine(_request(conv_model, tmp_path))
    assert str(info.value) == (
        "TensorRT cannot create a builder (CUDA driver or GPU unusable?): "
        "pybind11::init(): factory function returned nullptr"
    )


def test_a_timing_cache_from_another_gpu_is_replaced_and_the_engine_still_written(
    fake_trt: FakeTensorRT, conv_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "engines"
    directory.mkdir()
    timing = directory / "timing-trt10.16.1.11-NVIDIA_Fake_GPU.cache"
    timing.write_bytes(b"timing:NVIDIA A100:7")  # copied from another machine
    with caplog.at_level(logging.WARNING, logger="framewire.engines.trt_build"):
        path = ensure_engine(_request(conv_model, tmp_path))
    assert path.is_file()
    assert timing.read_bytes() == b"timing:NVIDIA Fake GPU:1"
    assert f"timing cache {timing} does not fit this GPU or TensorRT; starting a new one" in caplog.text
    ensure_engine(_request(conv_model, tmp_path))
    assert Builder.builds == 1  # written, so the next start loads it


def test_a_timing_cache_that_cannot_be_saved_does_not_lose_the_engine(
    fake_trt: FakeTensorRT, conv_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tests.unit.engines.gpu_fakes import ITimingCache

    def broken(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("serialization failed")

    monkeypatch.setattr(ITimingCache, "serialize", broken)
    with caplog.at_level(logging.WARNING, logger="framewire.engines.trt_build"):
        path = ensure_engine(_request(conv_model, tmp_path))
    assert path.is_file() and "not written: serialization failed" in caplog.text


def test_calibration_batches_fit_a_model_whose_batch_is_fixed(
    fake_trt: FakeTensorRT, conv_model: Path, tmp_path: Path
) -> None:
    # max_batch 1: the model keeps its fixed batch of 1, so calibration.batch 3 cannot apply.
    request = _request(
        conv_model,
        tmp_path,
        precision="int8",
        max_batch=1,
        opt_batch=1,
        calibration=lambda: _frames(7, (1, 3, 8, 8)),
        calibration_batch=3,
    )
    plan = _plan(ensure_engine(request))
    assert plan["calibration"] == {"batches": 7, "batch_size": 1}


def test_build_engine_fp16_on_tensorrt_11(
    fake_trt11: FakeTensorRT, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from framewire.cli import main

    assert main(["build-engine", "--set", f"engine.cache_dir={tmp_path}", "--precision", "fp16"]) == 0
    (path,) = tmp_path.glob("face_detection_yunet_2023mar-fp16-*.engine")
    plan = _plan(path)
    assert plan["model"] == "fp16" and plan["flags"] == []


def test_tensorrt_installed_without_its_libraries_is_not_called_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sys

    # What `import tensorrt` raises when tensorrt-cu12-bindings is there but libnvinfer is not.
    package = tmp_path / "tensorrt"
    package.mkdir()
    (package / "__init__.py").write_text(
        "raise ImportError('libnvonnxparser.so.10: cannot open shared object file: No such file or "
        "directory', name='tensorrt', path='tensorrt_bindings/tensorrt.so')\n"
    )
    monkeypatch.delitem(sys.modules, "tensorrt", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EngineError) as info:
        trt_build.import_tensorrt()
    assert str(info.value) == (
        "engine.backend: tensorrt: the tensorrt package cannot be loaded: libnvonnxparser.so.10: cannot "
        "open shared object file: No such file or directory"
    )
