"""Audio decoding, resampling to mono, log-mel features, and the output track from a ring."""

from __future__ import annotations

import uuid
from pathlib import Path

import av
import numpy as np
import pytest

from framewire.media.audio import AudioDecoder, LogMel, MelSettings, RingTrack, ToMono, has_audio_track, mel_filters
from framewire.pipeline.wire.audioring import AudioRing, AudioRingLayout
from framewire.pipeline.errors import SourceError
from tests.support import clips
from tests.support.audio import tone_bursts, write_audio

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("suffix", "rate", "channels"), [(".wav", 16000, 1), (".wav", 44100, 2), (".m4a", 48000, 2), (".flac", 22050, 1)])
def test_any_file_comes_out_mono_at_the_rate_asked_with_its_bursts_in_place(
    tmp_path: Path, suffix: str, rate: int, channels: int
) -> None:
    bursts = [(0.5, 0.8), (1.5, 1.6)]
    path = write_audio(tmp_path / f"a{suffix}", tone_bursts(2.0, bursts, rate=rate), rate=rate, channels=channels)
    decoder = AudioDecoder("s", str(path), 16000)
    info = decoder.open()
    assert (info.sample_rate, info.channels) == (rate, channels)
    chunks = list(decoder.chunks())
    decoder.close()
    start = chunks[0].time_s
    samples = np.concatenate([c.samples for c in chunks])
    loud = np.abs(samples) > 0.1
    onsets = np.nonzero(loud[1:] & ~loud[:-1])[0] / 16000 + start
    # Resampling moves an onset by a sample or two; 3 ms is well inside a 40 ms video frame.
    assert onsets[0] == pytest.approx(0.5, abs=0.003) and any(abs(o - 1.5) < 0.003 for o in onsets)
    assert samples.size / 16000 == pytest.approx(2.0, abs=0.06)
    assert 0.45 < float(np.abs(samples).max()) < 0.55  # a downmix of equal channels keeps the level


def test_a_missing_file_or_track_is_one_line_naming_the_source(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"^source s: audio.uri: audio file not found: .*nope.wav$"):
        AudioDecoder("s", str(tmp_path / "nope.wav"), 16000).open()
    silent = clips.make_clip(tmp_path / "silent.mp4", frames=5)
    with pytest.raises(SourceError, match=r"^source s: audio.uri: no audio track in .*silent.mp4$"):
        AudioDecoder("s", str(silent), 16000).open()
    assert not has_audio_track(str(silent))
    assert has_audio_track(str(clips.make_clip(tmp_path / "loud.mp4", frames=5, audio=True)))
    (tmp_path / "junk.wav").write_bytes(b"not audio at all")
    with pytest.raises(ValueError):
        has_audio_track(str(tmp_path / "junk.wav"))


def test_pcm_chunks_keep_their_timestamps_across_a_gap() -> None:
    mono = ToMono(16000)
    times = []
    for at in (10.0, 10.064, 11.0):
        times += [round(c.time_s, 3) for c in mono.push_pcm(np.zeros((3072, 2), np.int16), 48000, at)]
    assert times[0] == 10.0 and any(abs(t - 10.999) <= 0.002 for t in times)


def test_log_mel_of_a_tone_peaks_at_its_band() -> None:
    settings = MelSettings(rate=16000, n_fft=800, win_length=800, hop_length=200, n_mels=80, fmin=55, fmax=7600)
    mel = LogMel(settings)
    t = np.arange(3200) / 16000
    spectrum = mel((0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32))
    assert spectrum.shape == (80, mel.frames_for(3200)) == (80, 17)
    centres = 700 * (10 ** (np.linspace(2595 * np.log10(1 + 55 / 700), 2595 * np.log10(1 + 7600 / 700), 82)[1:-1] / 2595) - 1)
    peak = int(np.argmax(spectrum[:, 8]))
    assert abs(centres[peak] - 1000) < 60
    silence = mel(np.zeros(3200, np.float32))
    assert np.allclose(silence, np.log(1e-10))


def test_mel_filters_are_slaney_normalised() -> None:
    filters = mel_filters(16000, 2048, 40, 0, 8000)
    area = filters.sum(axis=1) * (16000 / 2048)
    assert np.allclose(area[5:], 1.0, rtol=0.05)
    assert (filters >= 0).all() and filters.shape == (40, 1025)


def test_a_ring_track_muxes_what_the_ring_holds_at_its_time(tmp_path: Path) -> None:
    ring = AudioRing.create(AudioRingLayout(f"framewire-test-track-{uuid.uuid4().hex[:8]}", 16000, 16000 * 5))
    try:
        ring.write(tone_bursts(2.0, [(0.5, 1.0)]), 100.0)  # a producer's clock: 100 s
        out = tmp_path / "t.mp4"
        with av.open(str(out), "w") as container:
            track = RingTrack(ring, container, frame_duration_s=0.04, start_s=100.2)
            for k in range(30):
                track.copy_until(100.2 + k * 0.04)
            track.finish()
        with av.open(str(out)) as container:
            stream = container.streams.audio[0]
            frames = list(container.decode(stream))
        samples = np.concatenate([f.to_ndarray().reshape(-1) for f in frames])
        start = float(frames[0].pts * frames[0].time_base)
        loud = np.nonzero(np.abs(samples) > 0.1)[0]
        # The AAC encoder's priming samples (1024) come first, before 100.2 s; the burst stays at 100.5 s.
        assert start == pytest.approx(100.2 - 1024 / 16000, abs=0.001)
        assert start + loud[0] / 16000 == pytest.approx(100.5, abs=0.002)
        assert (samples.size - 1024) / 16000 == pytest.approx(1.2, abs=0.07)  # up to the end of the last frame
    finally:
        ring.close()
