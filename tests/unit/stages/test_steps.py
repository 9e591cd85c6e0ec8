"""Steps: audio features read around each frame, Silero VAD in order per source, the region followed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from framewire.pipeline.wire.audioring import AudioRing, AudioRingLayout
from framewire.config import EngineConfig, StepConfig
from framewire.pipeline.errors import ConfigError, FramewireError
from framewire.pipeline.frame import Frame, StageContext
from framewire.stages.steps import resolve_step
from framewire.stages.steps.region import Region
from framewire.stages.steps.vad import Vad, _Segments
from tests.support.audio import tone_bursts

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def ring() -> Iterator[AudioRing]:
    made = AudioRing.create(AudioRingLayout(f"framewire-test-steps-{uuid.uuid4().hex[:8]}", 16000, 16000 * 30))
    yield made
    made.close()


def step(kind: str, **params: object) -> object:
    return resolve_step(StepConfig.model_validate({"kind": kind, **params}), 0, EngineConfig(threads=1))


def frame_at(ring: AudioRing | None, time_s: float, seq: int = 0, source: str = "s") -> Frame:
    frame = Frame(source, seq, int(time_s * 1000), time_s, 176, 144)
    frame.pool_wire = {"name": "pool", **({"audio": ring.layout.to_wire()} if ring is not None else {})}
    return frame


def test_audio_features_are_the_window_around_the_frame(ring: AudioRing) -> None:
    ring.write(np.arange(16000 * 2, dtype=np.float32), 10.0)
    features = step("audio_features", window_ms=256, shape=[512, 1, 8])
    assert features.audio_span() == (0.128, 0.128) and features.tensor() == (1, 512, 1, 8)  # type: ignore[attr-defined]
    out = next(iter(features.process(frame_at(ring, 11.0))))  # type: ignore[attr-defined]
    tensor = out.tensors["audio_features"]
    assert tensor.shape == (1, 512, 1, 8) and tensor.reshape(-1)[0] == 16000 - 2048 and tensor.reshape(-1)[-1] == 16000 + 2047
    with pytest.raises(FramewireError, match="source s has no audio"):
        next(iter(features.process(frame_at(None, 11.0))))  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"steps.0.shape: \[7\] does not hold the 4096 values"):
        step("audio_features", window_ms=256, shape=[7]).check("steps.0")  # type: ignore[attr-defined]


def test_log_mel_features_through_an_encoder_model(ring: AudioRing, tmp_path: object) -> None:
    from pathlib import Path

    from bench.lipsync_models import MEL, audio_encoder

    path = Path(str(tmp_path)) / "encoder.onnx"
    path.write_bytes(audio_encoder())
    ring.write(tone_bursts(2.0, [(1.0, 2.0)]), 0.0)
    logmel = {k: v for k, v in MEL.items() if k != "win_length"}
    features = step("audio_features", window_ms=190, features="logmel", logmel=logmel, model=str(path))
    features.check("steps.0")  # type: ignore[attr-defined]
    assert features.tensor() == (1, 512, 1, 8)  # type: ignore[attr-defined]
    features.start(StageContext("audio", 0))  # type: ignore[attr-defined]
    energy = [float(np.mean(np.square(next(iter(features.process(frame_at(ring, t)))).tensors["audio_features"])))  # type: ignore[attr-defined]
              for t in (0.5, 1.5)]
    features.stop()  # type: ignore[attr-defined]
    assert energy[0] < 1e-6 and energy[1] == pytest.approx(0.125, rel=0.1)  # as the tone's own samples would give


def test_vad_segments_follow_get_speech_timestamps() -> None:
    """The streaming segmentation against the package's algorithm (silero_vad.utils_vad, its defaults),
    on random probabilities: the same speech, sample for sample, with padding."""
    reference = pytest.importorskip("silero_vad.utils_vad")
    rng = np.random.default_rng(3)
    for _ in range(20):
        probs = np.clip(np.repeat(rng.random(60), rng.integers(1, 12, 60)), 0, 1).tolist()
        ts = reference.get_speech_timestamps_from_probs(probs, sampling_rate=16000)
        segments = _Segments(0.5, 0.35, 4000, 1600)
        for i, p in enumerate(probs):
            segments.add(512 * i, p)
        ours = [segments.speech(s, 480) for s in range(0, 512 * len(probs) - 8000, 160)]
        theirs = [any(t["start"] <= s < t["end"] for t in ts) for s in range(0, 512 * len(probs) - 8000, 160)]
        assert ours == theirs


def test_vad_keeps_state_per_source_in_order(ring: AudioRing) -> None:
    ring.write(tone_bursts(6.0, []), 0.0)
    vad = step("vad")
    assert isinstance(vad, Vad) and Vad.declare(vad.params).ordered
    assert vad.audio_span()[1] == pytest.approx(0.452)
    vad.check("steps.0")
    vad.start(StageContext("vad", 0))
    for k in range(25):
        out = next(iter(vad.process(frame_at(ring, k * 0.04, k))))
        assert out.result == {"speaking": out.result["speaking"], "speech": False} and out.result["speaking"] < 0.2
    assert vad.sources["s"].next >= int((0.96 + 0.452) * 16000)  # run ahead by the lookahead
    list(vad.flush("s"))
    assert "s" not in vad.sources
    vad.stop()
    with pytest.raises(ConfigError, match="Silero VAD takes 16000 or 8000 Hz audio; the sources' audio.sample_rate is 44100"):
        resolve_step(StepConfig(kind="vad"), 0, EngineConfig(), 44100).check("steps.0")


def test_region_expands_squares_smooths_and_holds() -> None:
    region = step("region", expand=0.5, smoothing=0.5, hold_frames=1)
    assert isinstance(region, Region) and Region.declare(region.params).ordered
    face = {"box": [40.0, 40.0, 20.0, 40.0], "score": 0.9}
    first = region._follow("s", face, 200, 200)
    assert first is not None and first.tolist() == [10.0, 20.0, 90.0, 100.0]  # 40 -> 80 square around (50, 60)
    moved = region._follow("s", {"box": [60.0, 40.0, 20.0, 40.0], "score": 0.9}, 200, 200)
    assert moved is not None and moved.tolist() == [20.0, 20.0, 100.0, 100.0]  # half way to the new box
    assert region._follow("s", None, 200, 200) is not None  # held for one frame
    assert region._follow("s", None, 200, 200) is None
    fixed = step("region", source="fixed", box=[0.25, 0.5, 0.5, 0.25])
    frame = frame_at(None, 0.0)
    frame.inline = {"image": np.zeros((144, 176, 3), np.uint8)}
    out = next(iter(fixed.process(frame)))  # type: ignore[attr-defined]
    assert out.meta["region"] == [44, 72, 132, 108] and not Region.declare(fixed.params).ordered
    with pytest.raises(ConfigError, match=r"^steps.0.box: required with source fixed"):
        step("region", source="fixed")
