"""`triton-repo`: the config.pbtxt it writes parses as Triton's own ModelConfig (tritonclient's protobuf
classes) and declares what the model file beside it takes and gives; bad input is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from onnx import helper
from tritonclient.grpc import model_config_pb2 as mc

from framewire import cli

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs"
YUNET = "face_detection_yunet_2023mar"
OCR = ("ch_PP-OCRv4_det_infer", "ch_PP-OCRv4_rec_infer", "ch_ppocr_mobile_v2.0_cls_infer")


def make_repo(repo: Path, *args: str, config: str = "default.yaml") -> int:
    return cli.main(["triton-repo", "-c", str(CONFIGS / config), "-o", str(repo), *args])


def read_config(folder: Path) -> mc.ModelConfig:
    return text_format.Parse((folder / "config.pbtxt").read_text(), mc.ModelConfig())


def declared(model: onnx.ModelProto, batched: bool) -> dict[str, list[tuple[str, str, list[int]]]]:
    """What config.pbtxt should say of the model's tensors, read with onnx itself."""
    weights = {init.name for init in model.graph.initializer}

    def tensor(value: onnx.ValueInfoProto) -> tuple[str, str, list[int]]:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in value.type.tensor_type.shape.dim]
        return value.name, "TYPE_" + {"float32": "FP32", "uint8": "UINT8"}[dtype.name], dims[1:] if batched else dims

    return {
        "input": [tensor(v) for v in model.graph.input if v.name not in weights],
        "output": [tensor(v) for v in model.graph.output],
    }


def assert_matches_model(config: mc.ModelConfig, folder: Path, version: int = 1) -> onnx.ModelProto:
    model = onnx.load(str(folder / str(version) / "model.onnx"))
    expected = declared(model, batched=config.max_batch_size > 0)
    for field in ("input", "output"):
        got = [(t.name, mc.DataType.Name(t.data_type), list(t.dims)) for t in getattr(config, field)]
        assert got == expected[field], field
    return model


def test_default_job_gives_a_cpu_repository_whose_model_batches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "models"
    assert make_repo(repo) == 0
    assert f"{repo / YUNET}: model" in capsys.readouterr().out
    folder = repo / YUNET
    config = read_config(folder)
    assert (config.name, config.platform, config.max_batch_size) == (YUNET, "onnxruntime_onnx", 8)
    assert config.dynamic_batching.max_queue_delay_microseconds == 2000  # engine.max_delay_ms: 2.0
    assert list(config.dynamic_batching.preferred_batch_size) == []  # engine.max_batch is 1
    [group] = config.instance_group
    assert (group.kind, group.count, list(group.gpus)) == (mc.ModelInstanceGroup.KIND_CPU, 2, [])
    assert config.parameters["intra_op_thread_count"].string_value == "1"
    model = assert_matches_model(config, folder)
    assert [t.name for t in config.input] == ["input"] and list(config.input[0].dims) == [3, -1, -1]
    # The batch is real: two frames in one call give what each gives alone (and any frame size runs).
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    frames = np.random.default_rng(0).uniform(0, 255, (2, 3, 96, 128)).astype(np.float32)
    together = session.run(None, {"input": frames})
    alone = [session.run(None, {"input": frames[i : i + 1]}) for i in range(2)]
    for i, output in enumerate(together):
        np.testing.assert_allclose(output, np.concatenate([alone[0][i], alone[1][i]]), rtol=1e-4, atol=1e-4)


def test_cascade_writes_every_model_with_its_crops_as_batch(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    assert make_repo(repo, "--secondary-name", "angle=orientation", "--queue-delay-us", "500", config="ocr.yaml") == 0
    assert sorted(p.name for p in repo.iterdir()) == sorted([OCR[0], OCR[1], "orientation"])
    batches = {}
    for name in (OCR[0], OCR[1], "orientation"):
        config = read_config(repo / name)
        assert config.name == name and config.dynamic_batching.max_queue_delay_microseconds == 500
        assert_matches_model(config, repo / name)
        batches[name] = config.max_batch_size
    assert batches == {OCR[0]: 8, OCR[1]: 32, "orientation": 32}  # crops: max_objects 32 (max_batch 0)


def test_gpu_engine_settings_become_gpu_instances_and_tensorrt(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    sets = ["engine.providers=[tensorrt,cuda]", "engine.devices=[0,2]", "engine.precision=fp16", "engine.max_batch=4",
            "engine.processes_per_device=3"]  # fmt: skip
    args = [a for s in sets for a in ("--set", s)]
    assert make_repo(repo, *args, "--name", "faces", "--max-batch", "16", "--version", "3") == 0
    config = read_config(repo / "faces")
    assert config.max_batch_size == 16 and list(config.dynamic_batching.preferred_batch_size) == [4]
    [group] = config.instance_group
    assert (group.kind, group.count, list(group.gpus)) == (mc.ModelInstanceGroup.KIND_GPU, 3, [0, 2])
    [accelerator] = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt" and accelerator.parameters["precision_mode"] == "FP16"
    assert "intra_op_thread_count" not in config.parameters
    assert_matches_model(config, repo / "faces", version=3)


def test_tensorrt_platform_copies_the_plan(tmp_path: Path) -> None:
    plan = tmp_path / "yunet.plan"
    plan.write_bytes(b"serialized engine bytes")  # the command copies it; only TensorRT reads it
    repo = tmp_path / "models"
    assert make_repo(repo, "--platform", "tensorrt", "--plan", str(plan)) == 0
    config = read_config(repo / YUNET)
    assert config.platform == "tensorrt_plan" and config.max_batch_size == 8
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert (repo / YUNET / "1" / "model.plan").read_bytes() == plan.read_bytes()
    assert [t.name for t in config.output][:2] == ["cls_8", "cls_16"]


def test_fixed_batch_model_gets_no_batching(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    assert make_repo(repo, config="ssd.yaml") == 0
    [folder] = list(repo.iterdir())
    config = read_config(folder)
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert list(config.input[0].dims) == [1, 300, 300, 3]  # the full shape, batch of 1 included
    assert_matches_model(config, folder)


def test_link_keeps_a_model_framewire_serves_unchanged(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    assert make_repo(repo, "--link", config="ocr.yaml") == 0
    linked = repo / OCR[0] / "1" / "model.onnx"
    assert linked.is_symlink() and linked.resolve() == (ROOT / "assets/models/ppocr" / f"{OCR[0]}.onnx").resolve()
    assert not (repo / OCR[1] / "1" / "model.onnx").is_symlink()  # rewritten (batch axis): a copy


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--name", "a b"], "'a b' is not a usable Triton model name"),
        (["--platform", "tensorrt"], "--platform tensorrt needs the TensorRT engine"),
        (["--plan", "missing.plan", "--platform", "tensorrt"], "--plan: file not found: missing.plan"),
        (["--preferred-batch", "9"], "--preferred-batch [9]: each must be between 1 and max_batch_size 8"),
        (["--secondary-name", "text=x"], "the config has no secondary model 'text'"),
        (["--instances", "cpu", "--platform", "tensorrt"], "runs on GPUs only"),
        (["--set", "model.path=nope.onnx"], "model.path: model file not found: nope.onnx"),
        (["--set", "engine.providers=[tensorrt]", "--set", "engine.precision=int8"], "engine.precision: int8"),
        (["--max-batch", "2", "--set", "engine.max_batch=4"], "model: --max-batch 2 is below the batch framewire sends (4"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    repo = tmp_path / "models"
    assert make_repo(repo, "--instances", "gpu", *args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not repo.exists()  # nothing written


def test_secondary_crops_must_fit_the_max_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert make_repo(tmp_path / "models", "--max-batch", "16", config="ocr.yaml") == 2
    assert "secondary.0: --max-batch 16 is below the batch framewire sends (32" in capsys.readouterr().err
    assert make_repo(tmp_path / "models", "--max-batch", "16", "--set", "secondary.0.max_batch=16",
                     "--set", "secondary.1.max_objects=8", config="ocr.yaml") == 0  # fmt: skip
    assert read_config(tmp_path / "models" / OCR[1]).max_batch_size == 16


def test_an_existing_version_is_kept_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "models"
    assert make_repo(repo) == 0
    model = repo / YUNET / "1" / "model.onnx"
    before = model.stat().st_mtime_ns
    assert make_repo(repo) == 2
    assert "exists (--force overwrites it" in capsys.readouterr().err
    assert model.stat().st_mtime_ns == before
    assert make_repo(repo, "--version", "2") == 0 and (repo / YUNET / "2" / "model.onnx").is_file()
    assert make_repo(repo, "--force") == 0


def test_openvino_backend_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Triton's OpenVINO backend: `backend: "openvino"` on the same ONNX file, engine: as its parameters;
    the model it reads batches, as OpenVINO itself runs it."""
    repo = tmp_path / "models"
    sets = ["engine.backend=openvino", "engine.streams=2", "engine.threads=4", "engine.precision=bf16"]
    assert make_repo(repo, *(a for s in sets for a in ("--set", s))) == 0  # the platform follows the backend
    assert "as openvino" in capsys.readouterr().out
    config = read_config(repo / YUNET)
    assert (config.backend, config.platform, config.default_model_filename) == ("openvino", "", "model.onnx")
    params = {key: value.string_value for key, value in config.parameters.items()}
    assert params == {"NUM_STREAMS": "2", "PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_NUM_THREADS": "4",
                      "HINT_BF16": "YES"}  # fmt: skip
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert_matches_model(config, repo / YUNET)
    ov = pytest.importorskip("openvino")
    compiled = ov.Core().compile_model(str(repo / YUNET / "1" / "model.onnx"), "CPU")
    frames = np.random.default_rng(1).uniform(0, 255, (2, 3, 96, 128)).astype(np.float32)
    assert compiled(frames)[0].shape[0] == 2
    latency = tmp_path / "latency"
    assert make_repo(latency, "--platform", "openvino") == 0
    params = {key: value.string_value for key, value in read_config(latency / YUNET).parameters.items()}
    assert params == {"NUM_STREAMS": "1", "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": "1"}
