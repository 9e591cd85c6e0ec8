"""Composites: draw a task's Result onto its frame, in place.

A composite reads and writes only the BGR uint8 frame it is given (no frame history), so it can run on
any worker in any order. Detection composites act on the detections of any task (stages.detections:
faces, objects, text boxes), optionally only those of some classes, and ignore results without any;
matte composites need `Result.arrays["alpha"]` and fail loudly without it.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, FilePath, ValidationError

from framewire.media import yuv
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import IMAGE, SHOWS, Frame, Stage
from framewire.pipeline.stagespec import Facts
from framewire.registry import COMPOSITES
from framewire.stages import detections
from framewire.stages.tasks import validation_error
from framewire.stages.tasks.base import Result

log = logging.getLogger(__name__)

OUTPUT = "output"
"""The slot region the composite stage draws on: a copy of the image (framewire.app.compose's slot layout)."""

Channel = Annotated[int, Field(ge=0, le=255)]
BGR = tuple[Channel, Channel, Channel]

# Gaussian kernels wider than this are applied on a downscaled copy: same look, bounded cost.
_MAX_DIRECT_KERNEL = 31


class CompositeParams(BaseModel):
    """Base of a composite's parameters (one entry of `composite:` in the config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Composite(ABC):
    """Draws one kind of result onto a frame."""

    kind: ClassVar[str]
    Params: ClassVar[type[CompositeParams]] = CompositeParams
    takes_yuv: ClassVar[bool] = False
    """It can draw on an I420 frame too (framewire.media.yuv): a job whose composites all can keeps
    its frames as YUV when its outputs allow it (framewire.app.compose.frames.yuv_frames)."""

    def __init__(self, params: CompositeParams) -> None:
        self.params = params

    @abstractmethod
    def apply(self, frame: np.ndarray, result: Result) -> None:
        """Draw `result` onto `frame` (BGR uint8 HxWx3, or I420 where `takes_yuv`) in place."""

    def draws(self, result: Result) -> bool:
        """Whether `apply` may change a frame with this `result`. When no composite of a frame may,
        the composite stage leaves the frame as decoded and does not copy it to draw on. True unless
        a composite knows better (the detection composites: a detection they act on)."""
        return True


# --- detections -----------------------------------------------------------------------------------


class DetectionParams(CompositeParams):
    """Parameters shared by composites that act on detections."""

    classes: tuple[str | int, ...] | None = Field(
        None, description="Only detections of these labels (or class ids); default: every detection."
    )

    def wants(self, detection: Mapping[str, Any]) -> bool:
        """Whether this composite acts on `detection` (its label or class id is in `classes`)."""
        if self.classes is None:
            return True
        return detection.get("label") in self.classes or detection.get("class_id") in self.classes


class FaceRegionParams(DetectionParams):
    """Parameters shared by composites that alter each detection's box (faces, plates, people)."""

    expand: float = Field(
        0.15, ge=0.0, le=2.0, description="Grow each box by this fraction of its size on every side."
    )


class BlurParams(FaceRegionParams):
    """Keys of a `blur` composite."""

    kind: Literal["blur"] = Field("blur", description="Gaussian blur of each detection.")
    strength: float = Field(
        0.5,
        gt=0.0,
        le=2.0,
        description="Gaussian kernel size as a fraction of the (expanded) box size; made odd.",
    )


class PixelateParams(FaceRegionParams):
    """Keys of a `pixelate` composite."""

    kind: Literal["pixelate"] = Field("pixelate", description="Pixelate each detection.")
    blocks: int = Field(8, ge=1, le=256, description="Blocks along each side of a box.")


class BoxesParams(DetectionParams):
    """Keys of a `boxes` composite."""

    kind: Literal["boxes"] = Field("boxes", description="Outline each detection.")
    color: BGR = Field((0, 255, 0), description="Line colour as [b, g, r], 0-255.")
    class_colors: bool = Field(False, description="A fixed colour per class id instead of color.")
    colors: dict[str, BGR] = Field(
        default_factory=dict, description="Colours of some labels, as {label: [b, g, r]}; win over the rest."
    )
    thickness: int = Field(2, ge=1, le=64, description="Line thickness in pixels.")
    landmarks: bool = Field(True, description="Also draw landmarks (faces) and text quads.")
    score: bool = Field(True, description="Also write the score above the box.")
    label: bool = Field(True, description="Also write the label.")
    track_id: bool = Field(True, description="Also write the track id (#7) when tracking is on.")
    attributes: bool = Field(True, description="Also write what secondary models found (a text, a class).")


class DetectionComposite(Composite):
    """A composite that acts on detections (`DetectionParams`): it draws on a frame only where a
    detection is one it acts on."""

    params: DetectionParams

    def draws(self, result: Result) -> bool:
        return any(self.params.wants(found) for found in detections.of(result.data))


class Blur(DetectionComposite):
    """Blur each face box (expanded by `expand`) with a kernel proportional to its size."""

    kind: ClassVar[str] = "blur"
    Params: ClassVar[type[CompositeParams]] = BlurParams
    params: BlurParams

    takes_yuv: ClassVar[bool] = True

    def apply(self, frame: np.ndarray, result: Result) -> None:
        for x0, y0, x1, y1 in _regions(frame, result, self.params):
            kx = self.params.strength * (x1 - x0)
            ky = self.params.strength * (y1 - y0)
            for region, scale in _boxes(frame, x0, y0, x1, y1):
                region[...] = _gaussian(region, _odd(kx * scale), _odd(ky * scale))


class Pixelate(DetectionComposite):
    """Replace each face box (expanded by `expand`) with `blocks` x `blocks` flat blocks."""

    kind: ClassVar[str] = "pixelate"
    Params: ClassVar[type[CompositeParams]] = PixelateParams
    params: PixelateParams

    takes_yuv: ClassVar[bool] = True

    def apply(self, frame: np.ndarray, result: Result) -> None:
        for x0, y0, x1, y1 in _regions(frame, result, self.params):
            for region, _ in _boxes(frame, x0, y0, x1, y1):
                height, width = region.shape[:2]
                blocks_x, blocks_y = min(self.params.blocks, width), min(self.params.blocks, height)
                small = cv2.resize(region, (blocks_x, blocks_y), interpolation=cv2.INTER_AREA)
                region[...] = cv2.resize(small, (width, height), interpolation=cv2.INTER_NEAREST)


class Boxes(DetectionComposite):
    """Outline each detection, with its caption (label, track id, score, attributes) if asked."""

    kind: ClassVar[str] = "boxes"
    Params: ClassVar[type[CompositeParams]] = BoxesParams
    params: BoxesParams

    def apply(self, frame: np.ndarray, result: Result) -> None:
        thickness = self.params.thickness
        for found in detections.of(result.data):
            if not self.params.wants(found):
                continue
            color = self._color(found)
            x, y, w, h = (round(float(v)) for v in found["box"])
            cv2.rectangle(frame, (x, y), (x + w, y + h), color, thickness, cv2.LINE_AA)
            if self.params.landmarks:
                for px, py in found.get("landmarks", ()):
                    center = (round(float(px)), round(float(py)))
                    cv2.circle(frame, center, thickness + 1, color, -1, cv2.LINE_AA)
                if "quad" in found:
                    quad = np.round(np.asarray(found["quad"], dtype=np.float64)).astype(np.int32)
                    cv2.polylines(frame, [quad.reshape(-1, 1, 2)], True, color, 1, cv2.LINE_AA)
            caption = self._caption(found)
            if caption:
                origin = (x, max(y - 2 * thickness, 12))
                cv2.putText(frame, caption, origin, cv2.FONT_HERSHEY_SIMPLEX, 0.5, color, 1, cv2.LINE_AA)

    def _color(self, found: Mapping[str, Any]) -> tuple[int, int, int]:
        chosen = self.params.colors.get(str(found.get("label")))
        if chosen is None and self.params.class_colors:
            return _class_color(int(found.get("class_id", 0)))
        b, g, r = chosen if chosen is not None else self.params.color
        return (int(b), int(g), int(r))

    def _caption(self, found: Mapping[str, Any]) -> str:
        """`label #track score attribute...`, each part if asked and present (ASCII: Hershey fonts)."""
        p = self.params
        parts: list[str] = []
        if p.label and found.get("label") is not None:
            parts.append(str(found["label"]))
        if p.track_id and "track_id" in found:
            parts.append(f"#{found['track_id']}")
        if p.score and "score" in found:
            parts.append(f"{float(found['score']):.2f}")
        if p.attributes:
            for value in (found.get("attributes") or {}).values():
                text = value.get("text", value.get("label")) if isinstance(value, dict) else None
                if text:
                    parts.append(str(text))
        return " ".join(parts)


# --- mattes ---------------------------------------------------------------------------------------


class BackgroundReplaceParams(CompositeParams):
    """Keys of a `background_replace` composite."""

    kind: Literal["background_replace"] = Field(
        "background_replace", description="Replace the background (alpha below 1) by a colour or image."
    )
    color: BGR = Field((0, 255, 0), description="Background colour as [b, g, r], 0-255.")
    image: FilePath | None = Field(
        None, description="Background image file (read once, resized to the frame); wins over color."
    )


class BackgroundBlurParams(CompositeParams):
    """Keys of a `background_blur` composite."""

    kind: Literal["background_blur"] = Field(
        "background_blur", description="Blur the background (alpha below 1)."
    )
    strength: float = Field(
        0.05,
        gt=0.0,
        le=1.0,
        description="Gaussian kernel size as a fraction of the frame's longer side; made odd.",
    )


class BackgroundReplace(Composite):
    """Blend the frame over a colour or an image, weighted by the matte."""

    kind: ClassVar[str] = "background_replace"
    Params: ClassVar[type[CompositeParams]] = BackgroundReplaceParams
    params: BackgroundReplaceParams

    def __init__(self, params: CompositeParams) -> None:
        super().__init__(params)
        self._image: np.ndarray | None = None
        self._resized: np.ndarray | None = None
        if self.params.image is not None:
            self._image = _read_image(self.params.image, self.kind)

    def apply(self, frame: np.ndarray, result: Result) -> None:
        weights = _alpha_weights(frame, result, self.kind)
        _blend(frame, self._background(frame), weights)

    def _background(self, frame: np.ndarray) -> np.ndarray:
        height, width = frame.shape[:2]
        resized = self._resized
        if resized is None or resized.shape[:2] != (height, width):
            if self._image is not None:
                resized = cv2.resize(self._image, (width, height), interpolation=cv2.INTER_AREA)
            else:
                resized = np.empty_like(frame)
                resized[...] = np.asarray(self.params.color, dtype=np.uint8)
            self._resized = resized
        return resized


class BackgroundBlur(Composite):
    """Blend the frame over a blurred copy of itself, weighted by the matte."""

    kind: ClassVar[str] = "background_blur"
    Params: ClassVar[type[CompositeParams]] = BackgroundBlurParams
    params: BackgroundBlurParams

    def apply(self, frame: np.ndarray, result: Result) -> None:
        weights = _alpha_weights(frame, result, self.kind)
        kernel = _odd(self.params.strength * max(frame.shape[:2]))
        _blend(frame, _gaussian(frame, kernel, kernel), weights)


# --- by kind (framewire.registry.COMPOSITES) ------------------------------------------------------

def resolve_composite(kind: str, params: Mapping[str, Any], index: int = 0) -> Composite:
    """The composite `kind` (an entry of the `framewire.composites` group) built from its config
    entry; errors name `composite.<index>.<key>`."""
    cls = COMPOSITES.get(kind, f"composite.{index}.kind")
    if not (isinstance(cls, type) and issubclass(cls, Composite)):
        raise ConfigError(f"composite.{index}.kind: {kind!r} is not a framewire.stages.composite.Composite subclass")
    entry = dict(params)
    entry.setdefault("kind", kind)
    try:
        validated = cls.Params.model_validate(entry)
    except ValidationError as exc:
        raise validation_error(exc, f"composite.{index}", cls.Params) from None
    return cls(validated)


# --- stage ----------------------------------------------------------------------------------------


class CompositeStage(Stage):
    """The composite stage: copies the decoded image into the slot's `output` region and draws the
    frame's result onto it with each composite in order, so outputs can show either image. A frame
    no composite draws on (`Composite.draws`) is neither copied nor drawn, and the outputs show its
    image: the frame's meta names the region it is shown from (`framewire.pipeline.frame.SHOWS`)."""

    facts = Facts()

    def __init__(self, composites: Sequence[Composite]) -> None:
        self.composites = tuple(composites)

    def process(self, frame: Frame) -> Iterable[Frame]:
        result = Result(data=frame.result or {}, arrays=frame.tensors)
        if any(composite.draws(result) for composite in self.composites):
            image = frame.region(IMAGE)
            canvas = frame.region(OUTPUT) if frame.has_region(OUTPUT) else image
            if canvas is not image:
                np.copyto(canvas, image)
                frame.meta[SHOWS] = OUTPUT
            else:
                frame.meta.pop(SHOWS, None)
            for composite in self.composites:
                composite.apply(canvas, result)
        else:
            frame.meta.pop(SHOWS, None)  # the outputs show the image as decoded: no copy to draw on
        # Drawn: the outputs need the pixels and the JSON result, not the matte; embeddings of
        # secondary models go on to the ZeroMQ output.
        frame.tensors = {k: v for k, v in frame.tensors.items() if k.startswith(detections.EMBEDDINGS)}
        yield frame


# --- helpers --------------------------------------------------------------------------------------


def _odd(size: float) -> int:
    """An odd kernel size of at least 3 near `size`."""
    return max(3, int(size) | 1)


def _gaussian(image: np.ndarray, kx: int, ky: int) -> np.ndarray:
    """Gaussian blur with a (kx, ky) kernel; wide kernels run on a downscaled copy."""
    factor = max(kx, ky) // _MAX_DIRECT_KERNEL + 1
    height, width = image.shape[:2]
    if factor == 1 or min(width, height) < 2 * factor:
        return cv2.GaussianBlur(image, (kx, ky), 0)
    small = cv2.resize(image, (width // factor, height // factor), interpolation=cv2.INTER_AREA)
    small = cv2.GaussianBlur(small, (_odd(kx / factor), _odd(ky / factor)), 0)
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)


def _regions(
    frame: np.ndarray, result: Result, params: FaceRegionParams
) -> Iterator[tuple[int, int, int, int]]:
    """(x0, y0, x1, y1) of each wanted detection's box grown by `expand`, clipped to the frame;
    slivers skipped."""
    width, height = yuv.size(frame)
    expand = params.expand
    for found in detections.of(result.data):
        if not params.wants(found):
            continue
        x, y, w, h = (float(v) for v in found["box"])
        x0 = max(0, int(np.floor(x - expand * w)))
        y0 = max(0, int(np.floor(y - expand * h)))
        x1 = min(width, int(np.ceil(x + w + expand * w)))
        y1 = min(height, int(np.ceil(y + h + expand * h)))
        if x1 - x0 >= 2 and y1 - y0 >= 2:
            yield x0, y0, x1, y1


def _boxes(frame: np.ndarray, x0: int, y0: int, x1: int, y1: int) -> Iterator[tuple[np.ndarray, float]]:
    """The box in a BGR frame (scale 1), or in each plane of an I420 one (media.yuv.plane_boxes)."""
    if yuv.is_i420(frame):
        yield from ((region, scale) for region, scale in yuv.plane_boxes(frame, x0, y0, x1, y1) if region.size)
    else:
        yield frame[y0:y1, x0:x1], 1.0


def _class_color(class_id: int) -> tuple[int, int, int]:
    """A fixed, well-spread BGR colour per class id (golden-ratio hues), the same on every run."""
    hue = int((class_id * 0.618033988749895 % 1.0) * 180)
    pixel = np.array([[[hue, 220, 255]]], dtype=np.uint8)
    b, g, r = cv2.cvtColor(pixel, cv2.COLOR_HSV2BGR)[0, 0]
    return int(b), int(g), int(r)


def _alpha_weights(frame: np.ndarray, result: Result, kind: str) -> np.ndarray:
    """The matte resized to the frame as float32 weights in [0, 1], one per pixel and channel."""
    alpha = result.arrays.get("alpha")
    if alpha is None:
        raise ConfigError(
            f"composite {kind!r} needs a matte (Result.arrays['alpha']) but the task gave none; "
            f"use it with a matting task"
        )
    height, width = frame.shape[:2]
    if alpha.shape[:2] != (height, width):
        alpha = cv2.resize(alpha, (width, height), interpolation=cv2.INTER_LINEAR)
    if alpha.dtype == np.uint8:
        return alpha.astype(np.float32) * np.float32(1.0 / 255.0)
    # A user task may hand over a float matte already in [0, 1].
    return np.clip(alpha.astype(np.float32), 0.0, 1.0)


def _blend(frame: np.ndarray, background: np.ndarray, weights: np.ndarray) -> None:
    """frame = frame * w + background * (1 - w), rounded, in place."""
    mixed = cv2.blendLinear(frame, background, weights, np.float32(1.0) - weights)
    np.copyto(frame, mixed)


def _read_image(path: Path, kind: str) -> np.ndarray:
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise ConfigError(f"composite {kind!r}: cannot read image {str(path)!r}")
    return image
