"""`audio_features`: the audio around each frame as a tensor for a model, named after the step.

For frame time t the window is `[t + offset, t + offset + window)` (centred on t by default), read
from the source's audio ring. It becomes raw PCM, a log-mel spectrogram, or either one fed through
an audio encoder model (`model:`), the way a lip-sync generator wants its `[512, 1, 8]`-style
features; `shape` reshapes the result. The tensor travels with the frame (batch of one) to the
task, whose `fill: audio` inputs take it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from framewire.engines.base import Engine
from framewire.engines.registry import OpenOptions, open_engine
from framewire.media.audio import LogMel, MelSettings
from framewire.config import EngineConfig
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import Frame, StageContext
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages.steps.base import AudioStep, StepParams, model_file

log = logging.getLogger(__name__)


class LogMelParams(StepParams):
    """A log-mel spectrogram of the window (`features: logmel`)."""

    n_fft: int = Field(512, ge=16, le=16384, description="FFT size in samples.")
    win_length: int | None = Field(None, ge=16, description="Window length in samples; default n_fft.")
    hop_length: int = Field(160, ge=1, description="Samples between two spectrogram frames.")
    n_mels: int = Field(80, ge=1, le=512, description="Mel bands.")
    fmin: float = Field(0.0, ge=0, description="Lowest frequency of the mel filters (Hz).")
    fmax: float | None = Field(None, gt=0, description="Highest frequency (Hz); default half the sample rate.")
    preemphasis: float = Field(0.0, ge=0, lt=1, description="x[n] - p * x[n-1] before the FFT (0: none).")
    scale: Literal["ln", "log10", "db"] = Field("ln", description="Natural log, log10, or decibels.")
    power: Literal[1, 2] = Field(2, description="2: power spectrum; 1: magnitude.")
    center: bool = Field(True, description="Pad the window by n_fft / 2 on each side (as librosa and torchaudio).")


class AudioFeaturesParams(StepParams):
    """Keys of an `audio_features` step."""

    window_ms: float = Field(200.0, gt=0, le=10000, description="Length of the window around each frame.")
    offset_ms: float | None = Field(
        None, ge=-10000, le=10000, description="Where the window starts relative to the frame's time; default -window_ms / 2 (centred)."
    )
    features: Literal["pcm", "logmel"] = Field("pcm", description="pcm: the samples; logmel: a log-mel spectrogram [n_mels, frames].")
    logmel: LogMelParams = Field(default_factory=lambda: LogMelParams.model_validate({}), description="features: logmel: its parameters.")
    model: str | None = Field(None, description="An audio encoder ONNX model the features go through (its first input).")
    model_output: str | None = Field(None, description="The encoder's output to keep; default its first.")
    shape: tuple[int, ...] | None = Field(None, min_length=1, description="Reshape the result to this (without the batch axis).")

    @model_validator(mode="after")
    def _positive_shape(self) -> AudioFeaturesParams:
        if self.shape is not None and any(d <= 0 for d in self.shape):
            raise ValueError("shape: every dimension must be positive")
        return self


class AudioFeatures(AudioStep):
    """Audio features per frame: a tensor `[1, ...]` named after the step."""

    kind: ClassVar[str] = "audio_features"
    Params = AudioFeaturesParams
    params: AudioFeaturesParams

    def __init__(self, params: StepParams, name: str, engine: EngineConfig, rate: int) -> None:
        super().__init__(params, name, engine, rate)
        p = self.params
        self.samples = max(1, round(p.window_ms / 1000.0 * rate))
        self.offset_s = (p.offset_ms if p.offset_ms is not None else -p.window_ms / 2) / 1000.0
        m = p.logmel
        self.mel = LogMel(MelSettings(
            rate=rate, n_fft=m.n_fft, win_length=m.win_length or m.n_fft, hop_length=m.hop_length,
            n_mels=m.n_mels, fmin=m.fmin, fmax=m.fmax, preemphasis=m.preemphasis, scale=m.scale,
            power=float(m.power), center=m.center,
        )) if p.features == "logmel" else None
        self.encoder: Engine | None = None
        self._encoder_input: TensorSpec | None = None

    def audio_span(self) -> tuple[float, float]:
        return max(0.0, -self.offset_s), max(0.0, self.offset_s + self.samples / self.rate)

    def features_shape(self) -> tuple[int, ...]:
        """The features before the encoder (no batch axis)."""
        if self.mel is None:
            return (self.samples,)
        return (self.params.logmel.n_mels, self.mel.frames_for(self.samples))

    def tensor(self) -> tuple[int, ...]:
        shape = self.features_shape()
        if self.params.model:
            from framewire.engines.onnx_model import describe

            inputs, outputs = describe(model_file(self.params.model))
            shape = tuple(d if isinstance(d, int) else -1 for d in self._output_spec(outputs).shape)[1:]
        if self.params.shape is not None:
            shape = self.params.shape
        return (1, *shape)

    def check(self, where: str) -> None:
        if self.params.model:
            from framewire.engines.onnx_model import describe

            try:
                inputs, outputs = describe(model_file(self.params.model))
            except ConfigError as exc:
                raise ConfigError(f"{where}.model: {exc}") from None
            self._encoder_spec(inputs, where)
            self._output_spec(outputs, where)
        if self.params.shape is not None:
            size = int(np.prod(self._raw_tensor()))
            if size > 0 and size != int(np.prod(self.params.shape)):
                raise ConfigError(
                    f"{where}.shape: {list(self.params.shape)} does not hold the {size} values of the "
                    f"features {list(self._raw_tensor())}"
                )

    def _raw_tensor(self) -> tuple[int, ...]:
        if not self.params.model:
            return self.features_shape()
        from framewire.engines.onnx_model import describe

        _, outputs = describe(model_file(self.params.model))
        return tuple(d if isinstance(d, int) else -1 for d in self._output_spec(outputs).shape)[1:]

    def _encoder_spec(self, inputs: Iterable[TensorSpec], where: str = "steps") -> TensorSpec:
        spec = next(iter(inputs), None)
        if spec is None:
            raise ConfigError(f"{where}.model: the audio encoder has no input")
        fixed = [d for d in spec.shape[1:] if isinstance(d, int)]
        if len(fixed) == len(spec.shape) - 1 and int(np.prod(fixed)) != int(np.prod(self.features_shape())):
            raise ConfigError(
                f"{where}.model: the encoder's input {spec.name!r} is {list(spec.shape)}, the features are "
                f"{list(self.features_shape())} (window_ms, features, logmel set their shape)"
            )
        return spec

    def _output_spec(self, outputs: Iterable[TensorSpec], where: str = "steps") -> TensorSpec:
        outs = {o.name: o for o in outputs}
        name = self.params.model_output or next(iter(outs), None)
        if name is None or name not in outs:
            raise ConfigError(f"{where}.model_output: the encoder has no output {name!r} (outputs: {', '.join(outs)})")
        return outs[name]

    def start(self, ctx: StageContext) -> None:
        if self.params.model:
            self.encoder = open_engine(self.engine_config, model_file(self.params.model), {}, OpenOptions())
            self._encoder_input = self._encoder_spec(self.encoder.inputs)

    def process(self, frame: Frame) -> Iterable[Frame]:
        samples = self.window(frame, self.offset_s, self.samples)
        features = samples if self.mel is None else self.mel(samples)
        if self.encoder is not None and self._encoder_input is not None:
            spec = self._encoder_input
            shape = [1, *(d if isinstance(d, int) else -1 for d in spec.shape[1:])]
            fed = features.reshape(shape if -1 not in shape[1:] else (1, *features.shape))
            out = self.encoder.infer({spec.name: fed.astype(np.float32, copy=False)}, [self._output_spec(self.encoder.outputs).name])
            features = next(iter(out.values()))[0]
        if self.params.shape is not None:
            features = features.reshape(self.params.shape)
        frame.tensors[self.name] = np.ascontiguousarray(features, dtype=np.float32)[None]
        yield frame

    def stop(self) -> None:
        super().stop()
        if self.encoder is not None:
            self.encoder.close()
            self.encoder = None
