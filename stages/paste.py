"""Composites for generated regions and voice activity: `paste` and `speaking`.

`paste` puts a generator's image back into its frame: resized to the region it was cropped from and
blended in through a feathered mask (a rectangle, an ellipse, or the lower part of the region),
whose edge fades over `feather` of the region's size, so no seam shows. `speaking` marks the faces
(or the region) of frames in which the `vad` step heard speech.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import cv2
import numpy as np
from pydantic import Field

from framewire.pipeline.errors import ConfigError
from framewire.stages import detections
from framewire.stages.composite import BGR, Composite, CompositeParams
from framewire.stages.tasks.base import Result


class PasteParams(CompositeParams):
    """Keys of a `paste` composite."""

    kind: Literal["paste"] = Field("paste", description="Paste the generated image back into its region.")
    mask: Literal["rect", "ellipse", "lower"] = Field(
        "ellipse", description="The blended area: the whole region, the ellipse inside it, or its lower part."
    )
    lower_from: float = Field(0.5, ge=0, lt=1, description="mask lower: the part from this fraction of the height down.")
    feather: float = Field(
        0.1, ge=0, le=0.5, description="The mask's edge fades from 1 to 0 over this fraction of the region's smaller side."
    )


class Paste(Composite):
    """Blend `Result.arrays["generated"]` into the box `Result.data["generated"]["box"]`."""

    kind: ClassVar[str] = "paste"
    Params: ClassVar[type[CompositeParams]] = PasteParams
    params: PasteParams

    def __init__(self, params: CompositeParams) -> None:
        super().__init__(params)
        self._masks: dict[tuple[int, int], np.ndarray] = {}

    def apply(self, frame: np.ndarray, result: Result) -> None:
        generated = result.arrays.get("generated")
        if generated is None:
            raise ConfigError("composite 'paste' needs a generated image (Result.arrays['generated']); use it with task generator")
        x, y, w, h = (int(v) for v in result.data["generated"]["box"])
        height, width = frame.shape[:2]
        x0, y0, x1, y1 = max(0, x), max(0, y), min(width, x + w), min(height, y + h)
        if x1 - x0 < 2 or y1 - y0 < 2:
            return
        image = cv2.resize(generated, (w, h), interpolation=cv2.INTER_LINEAR)[y0 - y : y1 - y, x0 - x : x1 - x]
        weights = self.mask(w, h)[y0 - y : y1 - y, x0 - x : x1 - x]
        region = frame[y0:y1, x0:x1]
        np.copyto(region, cv2.blendLinear(image, region, weights, np.float32(1.0) - weights))

    def mask(self, width: int, height: int) -> np.ndarray:
        """Per-pixel weights of the generated image, 1 inside, fading to 0 at the mask's edge."""
        found = self._masks.get((width, height))
        if found is not None:
            return found
        inside = np.zeros((height + 2, width + 2), np.uint8)  # a border of 0: the region's edge is outside
        if self.params.mask == "ellipse":
            cv2.ellipse(inside, ((width / 2 + 0.5, height / 2 + 0.5), (float(width), float(height)), 0.0), 1, -1)
        elif self.params.mask == "lower":
            inside[1 + int(round(self.params.lower_from * height)) : height + 1, 1 : width + 1] = 1
        else:
            inside[1 : height + 1, 1 : width + 1] = 1
        distance = cv2.distanceTransform(inside, cv2.DIST_L2, 5)[1:-1, 1:-1]
        ramp = self.params.feather * min(width, height)
        weights = np.clip(distance / ramp, 0.0, 1.0) if ramp > 0 else (distance > 0).astype(np.float32)
        found = np.ascontiguousarray(weights, dtype=np.float32)
        if len(self._masks) > 64:
            self._masks.clear()
        self._masks[(width, height)] = found
        return found


class SpeakingParams(CompositeParams):
    """Keys of a `speaking` composite."""

    kind: Literal["speaking"] = Field("speaking", description="Mark the faces while someone speaks (needs a vad step).")
    color: BGR = Field((0, 0, 255), description="Colour as [b, g, r], 0-255.")
    thickness: int = Field(3, ge=1, le=64, description="Line thickness in pixels.")
    label: bool = Field(True, description="Write the speaking score above each box.")


class Speaking(Composite):
    """Outline each face (or the region) of a frame whose `speech` result is true."""

    kind: ClassVar[str] = "speaking"
    Params: ClassVar[type[CompositeParams]] = SpeakingParams
    params: SpeakingParams

    def apply(self, frame: np.ndarray, result: Result) -> None:
        if "speech" not in result.data:
            raise ConfigError("composite 'speaking' needs a vad step (results without 'speech')")
        if not result.data["speech"]:
            return
        boxes = [found["box"] for found in detections.of(result.data) if found.get("label") == "face"]
        if not boxes and "region" in result.data:
            boxes = [result.data["region"]["box"]]
        color = tuple(int(c) for c in self.params.color)
        for box in boxes:
            x, y, w, h = (round(float(v)) for v in box)
            cv2.rectangle(frame, (x, y), (x + w, y + h), color, self.params.thickness, cv2.LINE_AA)
            if self.params.label:
                origin = (x, max(y - 2 * self.params.thickness, 12))
                cv2.putText(frame, f"speaking {result.data.get('speaking', 0):.2f}", origin, cv2.FONT_HERSHEY_SIMPLEX, 0.5, color, 1)
