"""framewire.engines.quantize and the `quantize` command: calibration feeds, and a small real quantisation of YuNet."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from framewire import cli
from framewire.app.engine_inputs import task_feeds, task_inputs
from framewire.engines.onnxruntime import OnnxRuntimeEngine
from framewire.engines.quantize import (
    FeedReader,
    QuantizeOptions,
    float_convs,
    prepare_float_model,
    quantization_info,
    quantize_model,
    video_frames,
)
from framewire.pipeline.errors import ConfigError, EngineError
from framewire.stages.tasks import resolve_task
from tests.support.clips import make_clip

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
YUNET = ROOT / "assets/models/yunet/face_detection_yunet_2023mar.onnx"
CARPHONE = ROOT / "assets/videos/carphone_pristine.mp4"


@pytest.fixture(scope="module")
def face_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 frames of 160x128 with a real face."""
    folder = tmp_path_factory.mktemp("quantize")
    return make_clip(folder / "face.mp4", width=160, height=128, frames=12, from_clip=CARPHONE)


@pytest.fixture(scope="module")
def task():  # type: ignore[no-untyped-def]
    return resolve_task("face_detection", {"score_threshold": 0.7})


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory: pytest.TempPathFactory, face_clip: Path, task) -> Path:  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("int8") / "yunet-int8.onnx"
    report = quantize_model(
        YUNET, out, task_feeds(task, video_frames(str(face_clip), 3)), dynamic_axes=task.dynamic_axes()
    )
    assert report.frames == 3
    return out


def test_feed_reader_hands_out_each_feed_then_none() -> None:
    feeds = [{"x": np.full((1, 2), i, dtype=np.float32)} for i in range(3)]
    reader = FeedReader(iter(feeds))
    got = [reader.get_next() for _ in range(4)]
    assert [g["x"][0, 0] for g in got[:3]] == [0, 1, 2]
    assert got[3] is None
    assert reader.count == 3


def test_feed_reader_stops_at_its_limit() -> None:
    reader = FeedReader(({"x": np.zeros(1)} for _ in range(10)), limit=2)
    assert reader.get_next() is not None and reader.get_next() is not None
    assert reader.get_next() is None
    assert reader.count == 2


def test_task_feeds_are_the_tasks_own_preprocessing(task, face_clip: Path) -> None:  # type: ignore[no-untyped-def]
    images = list(video_frames(str(face_clip), 2))
    feeds = list(task_feeds(task, images))
    assert len(feeds) == 2
    for image, feed in zip(images, feeds, strict=True):
        assert list(feed) == ["input"]
        spec = task.input_spec(image.shape[1], image.shape[0])
        expected = np.zeros(spec.shape, dtype=np.float32)
        task.preprocess(image, expected)
        assert feed["input"].shape == spec.shape == (1, 3, 128, 160)
        np.testing.assert_array_equal(feed["input"], expected)


def test_video_frames_spreads_over_the_clip(face_clip: Path) -> None:
    frames = list(video_frames(str(face_clip), 4))
    assert len(frames) == 4
    assert frames[0].shape == (128, 160, 3)
    assert not np.array_equal(frames[0], frames[1])  # every 3rd frame, not the first one four times
    assert len(list(video_frames(str(face_clip), 100))) == 12


def test_prepared_model_has_opset_13_and_dynamic_size() -> None:
    model = prepare_float_model(YUNET, {"input": (2, 3)})
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 13
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_value == 1 and dims[2].dim_param and dims[3].dim_param
    assert all(node.name for node in model.graph.node)


def test_float_convs_keep_few_channel_and_region_starting_depthwise_convs_in_fp32() -> None:
    model = prepare_float_model(YUNET)
    names = float_convs(model, 32)
    assert "Conv_0" in names  # 3 input channels
    assert "Conv_10" in names  # depthwise, 32 channels, its input comes from fp32 Conv_9
    assert "Conv_12" not in names and "Conv_13" not in names  # 1x1 and depthwise inside the int8 region
    assert "Conv_54" not in names and "Conv_55" in names  # head: 64 -> 1 int8, then 1 channel fp32
    assert float_convs(model, 0) == []


def test_quantised_model_loads_and_runs_at_another_size(int8_model: Path, task, face_clip: Path) -> None:  # type: ignore[no-untyped-def]
    model = onnx.load(str(int8_model))
    ops = {node.op_type for node in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    info = quantization_info(int8_model)
    assert info is not None and info["frames"] == 3 and info["per_channel"] is True
    engine = OnnxRuntimeEngine(str(int8_model), threads=1, dynamic_axes=task.dynamic_axes())
    task.check_model(engine.inputs, engine.outputs)
    reference = OnnxRuntimeEngine(str(YUNET), threads=1, dynamic_axes=task.dynamic_axes())
    image = next(video_frames(str(face_clip), 1))
    small = image[:96, :128].copy()  # another size than calibrated on
    for frame in (image, small):
        feed = next(task_feeds(task, [frame]))
        got = engine.infer(feed, task.output_names)
        want = reference.infer(feed, task.output_names)
        assert got["cls_8"].shape == want["cls_8"].shape
        assert np.abs(got["cls_8"] - want["cls_8"]).max() < 0.2  # INT8: close, not equal


def test_quantised_model_takes_a_batch_too(int8_model: Path) -> None:
    engine = OnnxRuntimeEngine(str(int8_model), threads=1, dynamic_axes={"input": (0, 2, 3)})
    x = np.random.default_rng(3).random((2, 3, 64, 64), dtype=np.float32) * 255
    batched = engine.infer({"input": x})
    for i in range(2):
        single = engine.infer({"input": x[i : i + 1]})
        for name, value in single.items():
            np.testing.assert_allclose(batched[name][i : i + 1], value, rtol=1e-5, atol=1e-5)


def test_unknown_excluded_node_is_a_config_error(tmp_path: Path, task) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="no node"):
        quantize_model(YUNET, tmp_path / "x.onnx", [], options=QuantizeOptions(exclude=("Conv_999",)))


def test_no_calibration_frames_is_an_engine_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="no calibration frames"):
        quantize_model(YUNET, tmp_path / "x.onnx", [], dynamic_axes={"input": (2, 3)})


def test_quantize_command_writes_a_model_usable_as_model_path(
    tmp_path: Path, face_clip: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli-int8.onnx"
    code = cli.main(
        ["quantize", "--video", str(face_clip), "--frames", "2", "--output", str(out), "--no-per-channel"]
    )
    assert code == 0
    assert "calibrated on 2 frame(s)" in capsys.readouterr().err
    assert quantization_info(out)["per_channel"] is False  # type: ignore[index]
    assert cli.main(["validate", "--set", f"model.path={out}"]) == 0


def test_auto_fp32_keeps_the_fewest_sensitive_layers_that_pass_the_check(
    tmp_path: Path, face_clip: Path, task, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    """A strict tolerance (IoU 0.97, every face) that the all-int8 model misses on this clip: the
    written model keeps some layers fp32, says which in its metadata, and passes the check when
    measured again here, with the task's own results."""
    from framewire.app.accuracy import Tolerance, task_summary, verdict
    from framewire.engines.mixed_precision import quantised_layers

    out = tmp_path / "auto.onnx"
    argv = ["quantize", "--recipe", "tensorrt", "--video", str(face_clip), "--frames", "6", "--output", str(out)]
    strict = ["--iou", "0.97", "--min-agreement", "1.0", "--sensitivity-frames", "2"]
    assert cli.main([*argv, "--auto-fp32", *strict]) == 0
    err = capsys.readouterr().err
    info = quantization_info(out)["auto_fp32"]  # type: ignore[index]
    assert info["int8_only"]["agreement"] < 1.0 and info["result"]["agreement"] == 1.0
    kept = info["kept"]
    assert 0 < len(kept) < info["layers"] == 53
    assert f"{len(kept)} of 53 weighted layers kept in fp32" in err
    model = onnx.load(str(out))
    assert not set(kept) & set(quantised_layers(model))
    assert len(quantised_layers(model)) == 53 - len(kept)

    images = list(video_frames(str(face_clip), 6))
    fp32 = OnnxRuntimeEngine(str(YUNET), dynamic_axes=task.dynamic_axes())
    mixed = OnnxRuntimeEngine(str(out), dynamic_axes=task.dynamic_axes())

    def results(engine: OnnxRuntimeEngine) -> list:  # type: ignore[type-arg]
        found = []
        for image in images:
            feed, meta = task_inputs(task, image)
            found.append(task.postprocess(engine.infer(feed, task.output_names), meta, image.shape[1], image.shape[0]))
        return found

    summary = task_summary(results(fp32), results(mixed), 0.97)
    assert summary["faces"]["reference_faces"] == 6
    assert verdict(summary, Tolerance(0.97, 1.0, 0.02)) == (True, [])


def test_auto_fp32_refuses_the_fp16_recipe(tmp_path: Path, face_clip: Path) -> None:
    code = cli.main(
        ["quantize", "--recipe", "fp16", "--auto-fp32", "--video", str(face_clip), "-o", str(tmp_path / "x.onnx")]
    )
    assert code == 2


def test_auto_fp32_that_fails_leaves_no_model(
    tmp_path: Path, face_clip: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from framewire.app import mixed_precision

    def fails(*args: object, **kwargs: object) -> None:
        raise EngineError("auto fp32: even with all 46 weighted layers in fp32 the model fails the check")

    monkeypatch.setattr(mixed_precision, "choose_float_layers", fails)
    out = tmp_path / "auto.onnx"
    argv = ["quantize", "--video", str(face_clip), "--frames", "2", "--auto-fp32", "--output", str(out)]
    assert cli.main(argv) == 1
    assert "even with all 46 weighted layers" in capsys.readouterr().err
    assert not out.exists()
