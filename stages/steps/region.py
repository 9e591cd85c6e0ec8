"""`region`: the box of each frame a generator crops and pastes back into.

From a face detector (YuNet, through the face_detection task's own pre- and post-processing): the
best face, grown by `expand` on every side, made square, and smoothed over time (an exponential
moving average of its corners) so that the pasted image does not jitter; when no face is found,
the last box is kept for `hold_frames` frames. Or a fixed region (fractions of the frame). The box
goes to the task in `meta["region"]` ([x0, y0, x1, y1] pixels) and to the results as `region`.
Smoothing keeps state per source, so a face region is an ordered step.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from framewire.engines.base import Engine
from framewire.engines.registry import OpenOptions, open_engine
from framewire.config import EngineConfig
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import Frame, StageContext
from framewire.pipeline.stagespec import Facts
from framewire.stages import detections
from framewire.stages.steps.base import Step, StepParams, model_file
from framewire.stages.tasks.face_detection import FaceDetection, FaceDetectionParams


class RegionParams(StepParams):
    """Keys of a `region` step."""

    source: Literal["face", "fixed"] = Field("face", description="face: from a face detector; fixed: `box`.")
    model: str = Field(
        "assets/models/yunet/face_detection_yunet_2023mar.onnx", description="source face: the YuNet model."
    )
    score_threshold: float = Field(0.6, ge=0, le=1, description="source face: the lowest face score taken.")
    box: tuple[float, float, float, float] | None = Field(
        None, description="source fixed: [x, y, w, h] as fractions of the frame's width and height."
    )
    expand: float = Field(0.25, ge=0, le=2, description="Grow the face box by this fraction of its size on every side.")
    square: bool = Field(True, description="Make the box square (its longer side), centred on the face.")
    smoothing: float = Field(
        0.6, ge=0, lt=1, description="Weight of the previous box in each new one (0: none; higher: steadier, slower)."
    )
    hold_frames: int = Field(25, ge=0, description="Frames the last box is kept when no face is found.")

    @model_validator(mode="after")
    def _fixed_has_a_box(self) -> RegionParams:
        if self.source == "fixed":
            if self.box is None:
                raise ValueError("box: required with source fixed ([x, y, w, h] as fractions of the frame)")
            x, y, w, h = self.box
            if not (0 <= x < 1 and 0 <= y < 1 and 0 < w <= 1 - x + 1e-9 and 0 < h <= 1 - y + 1e-9):
                raise ValueError("box: [x, y, w, h] must lie inside the frame, as fractions from 0 to 1")
        return self


@dataclass
class _Track:
    box: np.ndarray | None = None
    """The smoothed box, [x0, y0, x1, y1] as floats."""
    missed: int = 0


class Region(Step):
    """The region per frame: `meta["region"]` and `result["region"]`."""

    kind: ClassVar[str] = "region"
    Params = RegionParams
    params: RegionParams

    @classmethod
    def declare(cls, params: StepParams) -> Facts:
        """Ordered when a face region is smoothed or held: that memory is per source."""
        p = params if isinstance(params, RegionParams) else RegionParams.model_validate(params.model_dump())
        return Facts(ordered=p.source == "face" and (p.smoothing > 0 or p.hold_frames > 0))

    def __init__(self, params: StepParams, name: str, engine: EngineConfig, rate: int) -> None:
        super().__init__(params, name, engine, rate)
        p = self.params
        self.detector = FaceDetection(FaceDetectionParams.model_validate({"score_threshold": p.score_threshold})) if p.source == "face" else None
        self.engine: Engine | None = None
        self.tracks: dict[str, _Track] = {}
        self._input: np.ndarray | None = None

    def check(self, where: str) -> None:
        if self.detector is None:
            return
        from framewire.engines.onnx_model import describe

        try:
            inputs, outputs = describe(model_file(self.params.model), self.detector.dynamic_axes())
            self.detector.check_model(inputs, outputs)
        except ConfigError as exc:
            raise ConfigError(f"{where}.model: {exc}") from None

    def start(self, ctx: StageContext) -> None:
        if self.detector is not None:
            self.engine = open_engine(self.engine_config, model_file(self.params.model), self.detector.dynamic_axes(), OpenOptions())

    def process(self, frame: Frame) -> Iterable[Frame]:
        image = frame.region("image")
        height, width = image.shape[:2]
        detected: dict[str, Any] | None = None
        box: np.ndarray | None
        if self.detector is None:
            assert self.params.box is not None
            x, y, w, h = self.params.box
            box = np.array([x * width, y * height, (x + w) * width, (y + h) * height])
        else:
            detected = self._detect(image)
            box = self._follow(frame.source_id, detected, width, height)
        if box is None:
            box = np.array([0.0, 0.0, width, height])  # nothing to follow: the whole frame
        x0, y0, x1, y1 = _clip(box, width, height)
        frame.meta["region"] = [x0, y0, x1, y1]
        result = dict(frame.result or {})
        result["region"] = {"box": [x0, y0, x1 - x0, y1 - y0], "detected": detected is not None}
        frame.result = result
        yield frame

    def _detect(self, image: np.ndarray) -> dict[str, Any] | None:
        assert self.detector is not None and self.engine is not None
        height, width = image.shape[:2]
        spec = self.detector.input_spec(width, height)
        shape = tuple(int(d) for d in spec.shape)  # type: ignore[arg-type]
        if self._input is None or self._input.shape != shape:
            self._input = np.zeros(shape, np.float32)
        meta = self.detector.preprocess(image, self._input)
        outputs = self.engine.infer({self.detector.input_name: self._input}, self.detector.output_names)
        faces = detections.of(self.detector.postprocess(outputs, meta, width, height).data)
        return max(faces, key=lambda f: float(f["score"]), default=None)

    def _follow(self, source_id: str, face: dict[str, Any] | None, width: int, height: int) -> np.ndarray | None:
        """The face's box grown and squared, averaged with the previous one; held when it is lost."""
        track = self.tracks.setdefault(source_id, _Track())
        if face is None:
            track.missed += 1
            if track.missed > self.params.hold_frames:
                track.box = None
            return track.box
        x, y, w, h = (float(v) for v in face["box"])
        cx, cy = x + w / 2, y + h / 2
        if self.params.square:
            w = h = max(w, h)
        w, h = w * (1 + 2 * self.params.expand), h * (1 + 2 * self.params.expand)
        new = np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
        a = self.params.smoothing
        track.box = new if track.box is None else a * track.box + (1 - a) * new
        track.missed = 0
        return track.box

    def flush(self, source_id: str) -> Iterable[Frame]:
        self.tracks.pop(source_id, None)
        return ()

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def _clip(box: np.ndarray, width: int, height: int) -> tuple[int, int, int, int]:
    """The box in whole pixels inside the frame, at least 2x2."""
    x0 = int(np.clip(np.floor(box[0]), 0, width - 2))
    y0 = int(np.clip(np.floor(box[1]), 0, height - 2))
    x1 = int(np.clip(np.ceil(box[2]), x0 + 2, width))
    y1 = int(np.clip(np.ceil(box[3]), y0 + 2, height))
    return x0, y0, x1, y1
