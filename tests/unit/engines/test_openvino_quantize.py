"""`quantize --backend openvino`: NNCF's int8 on real frames, written as an OpenVINO IR that the
OpenVINO engine runs at int8 and that framewire reads like an ONNX file (validate, the tasks)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

pytest.importorskip("nncf")

from framewire import cli  # noqa: E402
from framewire.engines.model_file import describe  # noqa: E402
from framewire.engines.openvino import OpenVinoEngine  # noqa: E402
from framewire.engines.openvino_quantize import quantize_for_openvino  # noqa: E402
from framewire.pipeline.errors import ConfigError, EngineError  # noqa: E402

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]
YUNET = ROOT / "assets/models/yunet/face_detection_yunet_2023mar.onnx"


def test_the_command_writes_an_ir_the_engine_runs_at_int8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "yunet-int8.xml"
    code = cli.main(
        ["quantize", "-c", str(ROOT / "configs/default.yaml"), "--backend", "openvino", "--frames", "8",
         "--video", str(ROOT / "assets/videos/carphone_pristine.mp4"), "-o", str(output)]
    )  # fmt: skip
    assert code == 0
    err = capsys.readouterr().err
    assert f"{output}: INT8 (OpenVINO IR by NNCF, preset performance)" in err
    assert "calibrated on 8 frame(s)" in err
    assert output.with_suffix(".bin").is_file()
    inputs, outputs = describe(output, {"input": (2, 3)})  # as validate and the tasks read it
    assert inputs[0].name == "input" and inputs[0].shape == (1, 3, None, None)
    assert [o.name for o in outputs][:2] == ["cls_8", "cls_16"]
    engine = OpenVinoEngine(str(output), precision="int8", dynamic_axes={"input": (2, 3)}, cache=False)
    assert engine.precision_run.startswith("int8+")
    x = np.random.default_rng(0).uniform(0, 255, (1, 3, 160, 192)).astype(np.float32)
    got = engine.infer({"input": x})
    from framewire.engines.onnx_model import load_model_bytes

    dynamic = load_model_bytes(YUNET, {"input": (2, 3)})
    session = ort.InferenceSession(dynamic, providers=["CPUExecutionProvider"])
    reference = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"input": x})))
    assert got["cls_8"].shape == reference["cls_8"].shape
    assert float(np.abs(got["cls_8"] - reference["cls_8"]).max()) < 0.1  # int8, close to fp32


def test_it_refuses_an_onnx_name_and_no_frames(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--backend openvino writes an OpenVINO IR: name it FILE.xml"):
        quantize_for_openvino(YUNET, tmp_path / "x.onnx", [])
    with pytest.raises(EngineError, match="no calibration frames reached the model"):
        quantize_for_openvino(YUNET, tmp_path / "x.xml", [], dynamic_axes={"input": (2, 3)})
