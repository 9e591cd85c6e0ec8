"""What a TensorRT build reads from the task: input shapes per source and calibration batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from framewire.app.engine_inputs import calibration_batches, source_input_shapes
from framewire.app.compose.model import engine_options
from framewire.config import SourceConfig, load_config
from framewire.stages.tasks import resolve_task

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
CARPHONE = str(ROOT / "assets/videos/carphone_pristine.mp4")  # 176x144, 120 frames


def test_input_shapes_follow_each_source_through_the_task() -> None:
    task = resolve_task("face_detection", {})
    sources = [SourceConfig(id="a", uri=CARPHONE), SourceConfig(id="b", uri=CARPHONE)]
    # input_size auto: 176x144 padded to multiples of 32.
    assert source_input_shapes(task, sources) == {"input": [(1, 3, 160, 192), (1, 3, 160, 192)]}


def test_calibration_batches_are_preprocessed_frames() -> None:
    task = resolve_task("face_detection", {})
    batches = list(calibration_batches(task, CARPHONE, 5))
    assert len(batches) == 5
    assert all(b.shape == (1, 3, 160, 192) and b.dtype == np.float32 for b in batches)
    expected = np.empty((1, 3, 160, 192), np.float32)
    from framewire.media.video_reader import VideoReader

    with VideoReader("x", CARPHONE) as reader:
        task.preprocess(next(iter(reader.frames())).image, expected)
    np.testing.assert_array_equal(batches[0], expected)


def test_engine_options_bind_workers_to_devices_and_read_nothing_yet() -> None:
    config = load_config(
        ROOT / "configs/default.yaml",
        [
            "engine.devices=[1, 3]",
            "engine.processes_per_device=2",
            f"engine.calibration.video={CARPHONE}",
            "sources.0.uri=missing.mp4",  # not opened until a TensorRT build asks
        ],
    )
    task = resolve_task(config.model.task, config.model.params)
    devices = [engine_options(config, task, index).device for index in range(4)]
    assert devices == [1, 1, 3, 3]
    options = engine_options(config, task, 0)
    assert options.calibration is not None and options.input_shapes is not None
    assert engine_options(load_config(ROOT / "configs/default.yaml"), task).calibration is None
