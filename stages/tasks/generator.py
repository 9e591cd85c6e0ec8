"""`generator`: a model with several named inputs, each filled as the config says, that returns an
image for the frame's region; the image is pasted back by the `paste` composite.

This is the lip-sync workload: a face crop from a template (a reference crop and the crop with its
lower half masked, six channels) and the audio features around the frame's time go into one model,
which returns the generated crop. No code is needed for such a model, only `inputs:`:

    model:
      path: generator.onnx
      task: generator
      size: [320, 320]
      inputs:
        image: {fill: [masked_crop, reference]}   # 6 channels: the crop masked, then the reference
        audio: {fill: audio, step: audio}         # the tensor of the `audio` step, reshaped to the input
        temperature: {fill: constant, value: 1.0}

Fills: `crop` (the frame's region, resized to `size`), `masked_crop` (the same with the rows from
`mask_from` of its height down set to 0), `reference` (`reference_image`, resized, or else the
unmasked crop), a list of those (stacked on the channel axis, 3 channels each), `audio` (an
`audio_features` step's tensor), `constant` (`value`). Every model input must be filled, and only
model inputs may be. Image pixels go in as `pixel_range` (0-1 by default), in `channel_order`.

The first image input lives in the frame pool (written once by preprocessing, read in place by
inference); other inputs travel with the frame. The output (`output`, default the first) is an image
[1, 3, H, W] in `output_range`; it comes back as `Result.arrays["generated"]` (BGR uint8, the model's
size) with the region in `Result.data["generated"]["box"]`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, FilePath, field_validator, model_validator

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.frame import Frame
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages.tasks.base import Result, Task, TaskParams

IMAGE_FILLS = ("crop", "masked_crop", "reference")
FILLS = (*IMAGE_FILLS, "audio", "constant")


class InputFill(BaseModel):
    """What fills one model input (`model.inputs.<name>`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fill: str | tuple[str, ...] = Field(
        description="crop, masked_crop, reference, or a list of them (stacked on the channel axis); "
        "audio (an audio_features step's tensor); constant."
    )
    step: str | None = Field(None, description="fill audio: the audio_features step; default the only one.")
    value: float = Field(0.0, description="fill constant: the value of every element.")

    @field_validator("fill", mode="before")
    @classmethod
    def _known(cls, value: Any) -> Any:
        parts = [value] if isinstance(value, str) else list(value) if isinstance(value, list | tuple) else None
        if not parts:
            raise ValueError(f"fill must be one of {', '.join(FILLS)} or a list of {', '.join(IMAGE_FILLS)}")
        if len(parts) > 1 or parts[0] in IMAGE_FILLS:
            bad = [p for p in parts if p not in IMAGE_FILLS]
            if bad:
                raise ValueError(f"image parts must be {', '.join(IMAGE_FILLS)}, not {bad[0]!r}")
            return tuple(parts)
        if parts[0] not in FILLS:
            raise ValueError(f"fill must be one of {', '.join(FILLS)}, not {parts[0]!r}")
        return parts[0]

    @property
    def parts(self) -> tuple[str, ...]:
        """The image parts, 3 channels each; () for audio and constant inputs."""
        return self.fill if isinstance(self.fill, tuple) else ()


class GeneratorParams(TaskParams):
    """Keys of `model:` for `task: generator`."""

    inputs: dict[str, InputFill] = Field(min_length=1, description="Each model input by name and what fills it.")
    size: tuple[int, int] = Field((320, 320), description="[width, height] of the crops (the image inputs' size).")
    pixel_range: tuple[float, float] = Field((0.0, 1.0), description="Pixels 0-255 go in mapped onto this range.")
    channel_order: Literal["rgb", "bgr"] = Field("rgb", description="Channel order of image inputs and the output.")
    mask_from: float = Field(0.5, ge=0, le=1, description="masked_crop: rows from this fraction of the height down are 0.")
    reference_image: FilePath | None = Field(None, description="reference: an image file; default the frame's own crop.")
    output: str | None = Field(None, description="The output holding the image; default the first.")
    output_range: tuple[float, float] = Field((0.0, 1.0), description="The output image's value range (mapped to 0-255).")

    @model_validator(mode="after")
    def _sane(self) -> GeneratorParams:
        if not any(f.parts for f in self.inputs.values()):
            raise ValueError("inputs: at least one input must be an image (crop, masked_crop, reference)")
        if min(self.size) < 1 or self.pixel_range[0] == self.pixel_range[1] or self.output_range[0] == self.output_range[1]:
            raise ValueError("size must be positive, pixel_range and output_range must not be empty")
        return self


class Generator(Task):
    """A multi-input generator; its result is an image for the frame's region."""

    name: ClassVar[str] = "generator"
    Params: ClassVar[type[TaskParams]] = GeneratorParams

    def __init__(self, params: TaskParams) -> None:
        if not isinstance(params, GeneratorParams):
            raise TypeError(f"Generator needs GeneratorParams, got {type(params).__name__}")
        super().__init__(params)
        self.params: GeneratorParams = params
        self.images = [name for name, f in params.inputs.items() if f.parts]
        self._specs: dict[str, TensorSpec] = {}
        self._output = params.output
        self._reference: np.ndarray | None = None
        if params.reference_image is not None:
            self._reference = _read(params.reference_image, params.size)

    # --- the model ---------------------------------------------------------------------------------

    @property
    def input_name(self) -> str:
        return self.images[0]

    @property
    def output_names(self) -> tuple[str, ...] | None:
        return (self._output,) if self._output else None

    def input_spec(self, frame_width: int, frame_height: int) -> TensorSpec:
        return self._image_spec(self.input_name)

    def _image_spec(self, name: str) -> TensorSpec:
        width, height = self.params.size
        channels = 3 * len(self.params.inputs[name].parts)
        return TensorSpec(name, np.dtype(np.float32), (1, channels, height, width))

    def shape_of(self, name: str) -> tuple[int, ...]:
        """The shape of image input `name` (batch of one)."""
        return tuple(int(d) for d in self._image_spec(name).shape)  # type: ignore[arg-type]

    def audio_inputs(self) -> dict[str, str | None]:
        """Model input -> the audio_features step it takes (None: the only one), for app.compose's checks."""
        return {name: f.step for name, f in self.params.inputs.items() if f.fill == "audio"}

    def check_model(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        """Every model input filled, every fill a model input, image inputs of the right shape."""
        by_name = {t.name: t for t in inputs}
        for spec in inputs:
            if spec.name not in self.params.inputs:
                raise ConfigError(
                    f"model.inputs: the model input {spec.name!r} {list(spec.shape)} is not mapped "
                    f"(give it a fill: {', '.join(FILLS)})"
                )
        for name in self.params.inputs:
            if name not in by_name:
                raise ConfigError(f"model.inputs.{name}: the model has no input {name!r} (inputs: {', '.join(by_name)})")
        for name in self.images:
            want, got = self._image_spec(name), by_name[name]
            if len(got.shape) != 4 or any(isinstance(g, int) and g != w for g, w in zip(got.shape, want.shape)):
                raise ConfigError(
                    f"model.inputs.{name}: the model input is {list(got.shape)}, the fill "
                    f"{list(self.params.inputs[name].parts)} at model.size {list(self.params.size)} gives {list(want.shape)}"
                )
        if not outputs:
            raise ConfigError("generator expects a model with an output; this one has none")
        outs = {t.name: t for t in outputs}
        name = self.params.output or outputs[0].name
        if name not in outs:
            raise ConfigError(f"model.output: the model has no output {name!r} (outputs: {', '.join(outs)})")
        shape = outs[name].shape
        if len(shape) != 4 or (isinstance(shape[1], int) and shape[1] != 3):
            raise ConfigError(f"model.output: {name!r} is {list(shape)}, expected an image [1, 3, H, W]")
        self._specs = dict(by_name)
        self._output = name

    def check_audio(self, name: str, tensor: tuple[int, ...], step: str) -> None:
        """The audio step's tensor fits model input `name` (same number of values)."""
        spec = self._specs.get(name)
        if spec is None:
            return
        fixed = [d for d in spec.shape[1:] if isinstance(d, int)]  # the batch axis aside
        values = int(np.prod(tensor[1:]))
        if len(fixed) == len(spec.shape) - 1 and -1 not in tensor and int(np.prod(fixed)) != values:
            raise ConfigError(
                f"model.inputs.{name}: the model input is {list(spec.shape)}, step {step!r} gives "
                f"{list(tensor)} ({values} values); set that step's window_ms, features or shape"
            )

    # --- per frame ---------------------------------------------------------------------------------

    def preprocess(self, frame: np.ndarray, out: np.ndarray) -> dict[str, Any]:
        """The whole frame as the region (a frame without a region step)."""
        height, width = frame.shape[:2]
        return self._fill(frame, [0, 0, width, height], out, {})

    def preprocess_frame(self, frame: Frame, out: np.ndarray) -> dict[str, Any]:
        image = frame.region("image")
        height, width = image.shape[:2]
        region = frame.meta.get("region") or [0, 0, width, height]
        return self._fill(image, [int(v) for v in region], out, frame.tensors)

    def _fill(self, image: np.ndarray, region: list[int], out: np.ndarray, tensors: dict[str, np.ndarray]) -> dict[str, Any]:
        x0, y0, x1, y1 = region
        width, height = self.params.size
        crop = cv2.resize(image[y0:y1, x0:x1], (width, height), interpolation=cv2.INTER_AREA
                          if (x1 - x0) > width else cv2.INTER_LINEAR)
        parts = {"crop": crop, "reference": self._reference if self._reference is not None else crop}
        if any("masked_crop" in self.params.inputs[n].parts for n in self.images):
            masked = crop.copy()
            masked[int(round(self.params.mask_from * height)) :] = 0
            parts["masked_crop"] = masked
        for index, name in enumerate(self.images):
            target = out if index == 0 else np.empty(self.shape_of(name), np.float32)
            self._planes([parts[p] for p in self.params.inputs[name].parts], target)
            if index:
                tensors[name] = target
        return {"region": region}

    def _planes(self, images: Sequence[np.ndarray], out: np.ndarray) -> None:
        """BGR uint8 crops -> [1, 3 * n, H, W] float32 in pixel_range and channel_order, in `out`."""
        low, high = self.params.pixel_range
        scale = np.float32((high - low) / 255.0)
        order = (2, 1, 0) if self.params.channel_order == "rgb" else (0, 1, 2)
        for i, picture in enumerate(images):
            for c, channel in enumerate(order):
                np.multiply(picture[:, :, channel], scale, out=out[0, 3 * i + c], casting="unsafe")
        if low:
            out += np.float32(low)

    def feeds(self, frame: Frame) -> dict[str, np.ndarray]:
        feeds = {self.input_name: frame.region("input")}
        for name, fill in self.params.inputs.items():
            if name == self.input_name:
                continue
            if fill.parts:
                feeds[name] = frame.tensors[name]
            elif fill.fill == "audio":
                feeds[name] = self._audio(frame, name, fill)
            else:
                feeds[name] = np.full(self._shape(name), fill.value, dtype=self._dtype(name))
        return feeds

    def _audio(self, frame: Frame, name: str, fill: InputFill) -> np.ndarray:
        step = fill.step or next((k for k, v in frame.tensors.items() if k not in self.images), None)
        if step is None or step not in frame.tensors:
            raise ConfigError(f"model.inputs.{name}: the frame has no audio features (step {fill.step or 'audio_features'!r})")
        return frame.tensors[step].reshape(self._shape(name, frame.tensors[step].shape)).astype(self._dtype(name), copy=False)

    def _shape(self, name: str, fallback: tuple[int, ...] = (1,)) -> tuple[int, ...]:
        spec = self._specs.get(name)
        if spec is None or not all(isinstance(d, int) for d in spec.shape[1:]):
            return fallback
        return (1, *(int(d) for d in spec.shape[1:]))  # type: ignore[arg-type]

    def _dtype(self, name: str) -> np.dtype[Any]:
        spec = self._specs.get(name)
        return np.dtype(spec.dtype) if spec is not None else np.dtype(np.float32)

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], meta: Mapping[str, Any], frame_width: int, frame_height: int
    ) -> Result:
        """The output image as BGR uint8 (its own size) and the region it belongs to."""
        name = self._output or next(iter(outputs))
        value = np.asarray(outputs[name], dtype=np.float32)
        if value.ndim != 4 or value.shape[:2] != (1, 3):
            raise ConfigError(f"generator: model output {name!r} is {list(value.shape)}, expected [1, 3, H, W]")
        low, high = self.params.output_range
        pixels = np.clip((value[0] - np.float32(low)) * np.float32(255.0 / (high - low)), 0, 255)
        order = (2, 1, 0) if self.params.channel_order == "rgb" else (0, 1, 2)
        image = np.ascontiguousarray(np.rint(pixels[list(order)].transpose(1, 2, 0))).astype(np.uint8)
        x0, y0, x1, y1 = meta.get("region") or [0, 0, frame_width, frame_height]
        return Result(data={"generated": {"box": [x0, y0, x1 - x0, y1 - y0]}}, arrays={"generated": image})


def _read(path: Path, size: tuple[int, int]) -> np.ndarray:
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise ConfigError(f"model.reference_image: cannot read image {str(path)!r}")
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA)
