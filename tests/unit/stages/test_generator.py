"""The generator task: named inputs filled from config, checked against the model; paste-back."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from bench.lipsync_models import generator
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import Frame
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages.paste import Paste, PasteParams
from framewire.stages.tasks import resolve_task
from framewire.stages.tasks.base import Result
from framewire.stages.tasks.generator import Generator

pytestmark = pytest.mark.timeout(60)

INPUTS = (
    TensorSpec("image", np.dtype(np.float32), ("N", 6, 320, 320)),
    TensorSpec("audio", np.dtype(np.float32), ("N", 512, 1, 8)),
)
OUTPUTS = (TensorSpec("output", np.dtype(np.float32), ("N", 3, 320, 320)),)
LIPSYNC = {"inputs": {"image": {"fill": ["masked_crop", "reference"]}, "audio": {"fill": "audio", "step": "audio"}}}


def task(params: dict[str, object] = LIPSYNC) -> Generator:
    made = resolve_task("generator", params)
    assert isinstance(made, Generator)
    return made


def frame_with(image: np.ndarray, region: list[int], audio: np.ndarray) -> Frame:
    frame = Frame("s", 0, 0, 0.0, image.shape[1], image.shape[0])
    frame.inline = {"image": image, "input": np.zeros((1, 6, 320, 320), np.float32)}
    frame.meta = {"region": region}
    frame.tensors = {"audio": audio}
    return frame


def test_every_input_must_be_filled_and_every_fill_must_be_an_input() -> None:
    task().check_model(INPUTS, OUTPUTS)
    with pytest.raises(ConfigError, match=r"^model.inputs: the model input 'audio' \['N', 512, 1, 8\] is not mapped"):
        task({"inputs": {"image": {"fill": ["masked_crop", "reference"]}}}).check_model(INPUTS, OUTPUTS)
    with pytest.raises(ConfigError, match=r"^model.inputs.extra: the model has no input 'extra'"):
        task({"inputs": {**LIPSYNC["inputs"], "extra": {"fill": "constant"}}}).check_model(INPUTS, OUTPUTS)  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=r"^model.inputs.image: the model input is \['N', 6, 320, 320\], the fill \['crop'\]"):
        task({"inputs": {"image": {"fill": "crop"}, "audio": {"fill": "audio"}}}).check_model(INPUTS, OUTPUTS)
    with pytest.raises(ConfigError, match="model.inputs.image.fill"):
        task({"inputs": {"image": {"fill": ["crop", "audio"]}}})
    with pytest.raises(ConfigError, match="step .audio. gives \\[1, 3200\\] \\(3200 values\\)"):
        checked = task()
        checked.check_model(INPUTS, OUTPUTS)
        checked.check_audio("audio", (1, 3200), "audio")
    checked.check_audio("audio", (1, 512, 1, 8), "audio")


def test_the_crop_fills_the_pool_input_and_the_audio_goes_inline() -> None:
    gen = task()
    gen.check_model(INPUTS, OUTPUTS)
    image = np.zeros((144, 176, 3), np.uint8)
    image[20:100, 40:120] = (10, 20, 200)  # BGR: red dominates
    frame = frame_with(image, [40, 20, 120, 100], np.full((1, 4096), 0.5, np.float32))
    meta = gen.preprocess_frame(frame, frame.region("input"))
    planes = frame.region("input")[0]
    assert meta == {"region": [40, 20, 120, 100]}
    # RGB order, 0-1: the reference (channels 3-5) is the whole crop, the masked one loses its lower half.
    assert planes[3].mean() == pytest.approx(200 / 255, abs=1e-3) and planes[5].mean() == pytest.approx(10 / 255, abs=1e-3)
    assert planes[0, :160].mean() == pytest.approx(200 / 255, abs=1e-3) and not planes[0:3, 160:].any()
    feeds = gen.feeds(frame)
    assert set(feeds) == {"image", "audio"} and feeds["audio"].shape == (1, 512, 1, 8)


def test_the_test_generator_brightens_by_the_audio_energy_and_comes_back_as_bgr() -> None:
    gen = task()
    gen.check_model(INPUTS, OUTPUTS)
    session = ort.InferenceSession(generator(layers=0), providers=["CPUExecutionProvider"])
    image = np.full((144, 176, 3), 100, np.uint8)
    results = []
    for level in (0.0, np.sqrt(0.125)):
        frame = frame_with(image, [40, 20, 120, 100], np.full((1, 4096), level, np.float32))
        meta = gen.preprocess_frame(frame, frame.region("input"))
        out = session.run(None, gen.feeds(frame))[0]
        results.append(gen.postprocess({"output": out}, meta, 176, 144))
    quiet, loud = (r.arrays["generated"] for r in results)
    assert quiet.shape == (320, 320, 3) and quiet.dtype == np.uint8
    assert abs(int(np.median(quiet)) - 100) <= 1 and abs(int(np.median(loud)) - (100 + 64)) <= 1
    assert results[0].data == {"generated": {"box": [40, 20, 80, 80]}}


def test_paste_blends_through_a_feathered_mask() -> None:
    paste = Paste(PasteParams.model_validate({"mask": "ellipse", "feather": 0.2}))
    weights = paste.mask(100, 80)
    assert weights.shape == (80, 100) and weights[40, 50] == 1.0 and weights[0, 0] == 0.0
    assert 0 < weights[40, 3] < 1  # the edge fades over feather x 80 = 16 px
    rect = Paste(PasteParams.model_validate({"mask": "rect", "feather": 0.0})).mask(10, 10)
    assert rect.min() == 1.0
    lower = Paste(PasteParams.model_validate({"mask": "lower", "feather": 0.0, "lower_from": 0.5})).mask(10, 10)
    assert not lower[:5].any() and lower[5:].all()
    frame = np.zeros((60, 60, 3), np.uint8)
    generated = np.full((32, 32, 3), 200, np.uint8)
    paste.apply(frame, Result({"generated": {"box": [10, 10, 40, 40]}}, {"generated": generated}))
    assert frame[30, 30].tolist() == [200, 200, 200] and frame[5, 5].tolist() == [0, 0, 0]
    assert 0 < frame[30, 12, 0] < 200  # feathered near the edge
    with pytest.raises(ConfigError, match="needs a generated image"):
        paste.apply(frame, Result({}))
