"""`vad`: voice activity with Silero VAD, per source, in order: `speaking` and `speech` per frame.

Silero VAD reads 32 ms windows (512 samples at 16 kHz, 256 at 8 kHz) with 64 (32) samples of context
from the window before and a recurrent state, both carried from one window to the next; so a source's
frames must reach one worker in order (`ordered`), which keeps that source's state, and a source that
ends drops it (`flush`). Windows run from the start of the source's audio, the way the `silero-vad`
package runs them over a whole file, up to the time the frame being answered needs.

The speech flag follows the package's `get_speech_timestamps` (its default thresholds, padding and
minimum durations), decided on the fly: a frame at t is answered once the audio up to t + lookahead
has been run, and with lookahead_ms >= min_speech_ms + min_silence_ms + pad_ms (the default), that is
what the package decides for t over the whole file. A smaller lookahead answers sooner and may differ.
`speaking` is the highest probability of the windows that overlap the frame.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from pydantic import Field, model_validator

from framewire.engines.base import Engine
from framewire.engines.registry import OpenOptions, open_engine
from framewire.pipeline.wire.audioring import AudioRing
from framewire.config import Backend, EngineConfig
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import Frame, StageContext
from framewire.pipeline.stagespec import Facts
from framewire.stages.steps.base import AudioStep, StepParams, model_file

log = logging.getLogger(__name__)

RATES = {16000: (512, 64), 8000: (256, 32)}
"""Sample rate -> (window, context) in samples, as Silero VAD takes them."""
FRAME_S = 0.04
"""The span of a frame the score covers when the stream's rate is unknown (25 fps)."""


class VadParams(StepParams):
    """Keys of a `vad` step (defaults: the silero-vad package's `get_speech_timestamps`)."""

    model: str = Field("assets/models/silero_vad/silero_vad.onnx", description="The Silero VAD ONNX model.")
    threshold: float = Field(0.5, gt=0, lt=1, description="A window is speech from this probability on.")
    neg_threshold: float | None = Field(None, gt=0, lt=1, description="Speech ends below this; default threshold - 0.15.")
    min_speech_ms: float = Field(250, ge=0, le=10000, description="Speech shorter than this is dropped.")
    min_silence_ms: float = Field(100, ge=0, le=10000, description="Silence shorter than this does not end speech.")
    pad_ms: float = Field(30, ge=0, le=1000, description="Speech is padded by this on each side.")
    lookahead_ms: float | None = Field(
        None, ge=0, le=10000, description="Audio after a frame run before it is answered; default min_speech_ms + min_silence_ms + pad_ms + 32."
    )

    @model_validator(mode="after")
    def _thresholds(self) -> VadParams:
        if self.neg_threshold is not None and self.neg_threshold > self.threshold:
            raise ValueError("neg_threshold must not be above threshold")
        return self

    @property
    def lookahead_s(self) -> float:
        ms = self.lookahead_ms if self.lookahead_ms is not None else self.min_speech_ms + self.min_silence_ms + self.pad_ms + 32
        return ms / 1000.0


@dataclass
class _Segments:
    """get_speech_timestamps' segmentation, window by window (without its max_speech cut)."""

    threshold: float
    negative: float
    min_speech: int
    min_silence: int
    done: list[tuple[int, int]] = field(default_factory=list)
    start: int | None = None
    temp_end: int = 0

    def add(self, at: int, prob: float) -> None:
        """The probability of the window that starts at sample `at`."""
        if prob >= self.threshold and self.temp_end:
            self.temp_end = 0
        if prob >= self.threshold and self.start is None:
            self.start = at
            return
        if prob < self.negative and self.start is not None:
            if not self.temp_end:
                self.temp_end = at
            if at - self.temp_end < self.min_silence:
                return
            if self.temp_end - self.start > self.min_speech:
                self.done.append((self.start, self.temp_end))
            self.start, self.temp_end = None, 0

    def speech(self, sample: int, pad: int) -> bool:
        """Whether `sample` lies in speech (segments padded by `pad` on both sides)."""
        if self.start is not None and sample >= self.start - pad:
            return True
        for start, end in reversed(self.done):  # newest first: a frame asks about recent samples
            if end + pad <= sample:
                return False
            if start - pad <= sample:
                return True
        return False


@dataclass
class _SourceState:
    """One source's Silero state, context, position and segmentation."""

    state: np.ndarray
    context: np.ndarray
    segments: _Segments
    next: int = 0
    """The ring sample the next window starts at."""
    probs: list[tuple[int, float]] = field(default_factory=list)
    """(window start, probability) of the recent windows, for the frames' scores."""


class Vad(AudioStep):
    """Silero VAD per source; `speaking` (0-1) and `speech` (bool) in every frame's results."""

    kind: ClassVar[str] = "vad"
    Params = VadParams
    params: VadParams
    facts = Facts(ordered=True)  # Silero's state and context, per source

    def __init__(self, params: StepParams, name: str, engine: EngineConfig, rate: int) -> None:
        super().__init__(params, name, engine, rate)
        self.window_size, self.context_size = RATES.get(rate, (512, 64))
        self.session: Engine | None = None
        self.sources: dict[str, _SourceState] = {}

    def audio_span(self) -> tuple[float, float]:
        return 0.0, FRAME_S + self.params.lookahead_s

    def check(self, where: str) -> None:
        if self.rate not in RATES:
            raise ConfigError(
                f"{where}: Silero VAD takes 16000 or 8000 Hz audio; the sources' audio.sample_rate is {self.rate}"
            )
        from framewire.engines.onnx_model import describe

        try:
            inputs, _ = describe(model_file(self.params.model))
        except ConfigError as exc:
            raise ConfigError(f"{where}.model: {exc}") from None
        names = {t.name for t in inputs}
        if not {"input", "state", "sr"} <= names:
            raise ConfigError(f"{where}.model: {model_file(self.params.model)} is not a Silero VAD model (inputs: {', '.join(sorted(names))})")

    def start(self, ctx: StageContext) -> None:
        # A 32 ms window takes about 0.1 ms: one thread on the CPU, whatever runs the main model.
        config = EngineConfig(backend=Backend.ONNXRUNTIME, providers=("cpu",), threads=1)
        self.session = open_engine(config, model_file(self.params.model), {}, OpenOptions())

    def process(self, frame: Frame) -> Iterable[Frame]:
        ring = self.ring(frame)
        source = self.sources.get(frame.source_id)
        if source is None:
            source = self.sources[frame.source_id] = self._fresh()
        start = ring.index_of(frame.time_s)
        if source.next < ring.head - ring.capacity:  # the ring no longer has it (a restart): start near the frame
            source.next = max(0, start - start % self.window_size - 16 * self.window_size)
        self._run_until(source, ring, ring.index_of(frame.time_s + self.params.lookahead_s + FRAME_S))
        end = ring.index_of(frame.time_s + FRAME_S)
        overlapping = [p for at, p in source.probs if at < end and at + self.window_size > start]
        speaking = max(overlapping, default=0.0)
        pad = round(self.params.pad_ms / 1000.0 * self.rate)
        result = dict(frame.result or {})
        result["speaking"] = round(float(speaking), 4)
        result["speech"] = source.segments.speech(start, pad)
        frame.result = result
        yield frame

    def _fresh(self) -> _SourceState:
        p = self.params
        negative = p.neg_threshold if p.neg_threshold is not None else max(p.threshold - 0.15, 0.01)
        segments = _Segments(
            p.threshold, negative, round(p.min_speech_ms / 1000 * self.rate), round(p.min_silence_ms / 1000 * self.rate)
        )
        return _SourceState(np.zeros((2, 1, 128), np.float32), np.zeros((1, self.context_size), np.float32), segments)

    def _run_until(self, source: _SourceState, ring: AudioRing, stop: int) -> None:
        """Run every window of the source's audio that starts before `stop`, in order."""
        assert self.session is not None
        sr = np.array(self.rate, dtype=np.int64)
        while source.next < stop:
            window = ring.read(source.next, self.window_size)
            if window.pending:
                break  # not there yet (a live source's late audio): the next frame goes on from here
            x = np.concatenate([source.context, window.samples[None]], axis=1)
            out = self.session.infer({"input": x, "state": source.state, "sr": sr}, ["output", "stateN"])
            source.state = out["stateN"]
            source.context = x[:, -self.context_size :]
            prob = float(out["output"].reshape(-1)[0])
            source.segments.add(source.next, prob)
            source.probs.append((source.next, prob))
            source.next += self.window_size
        del source.probs[: max(0, len(source.probs) - 64)]

    def flush(self, source_id: str) -> Iterable[Frame]:
        self.sources.pop(source_id, None)
        return ()

    def stop(self) -> None:
        super().stop()
        if self.session is not None:
            self.session.close()
            self.session = None
