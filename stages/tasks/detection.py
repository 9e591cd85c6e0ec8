"""A generic object detector, configured instead of coded: YOLOv5/v8/11, YOLOX, end-to-end exports.

The output format comes from the model's output shapes and metadata (stages.tasks.detection_formats)
or from `format:`; preprocessing from the keys of `ImageParams`; labels from a file, a list or the
model's metadata. Boxes come back in frame pixels as `framewire.stages.detections` records.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator

from framewire.pipeline.errors import ConfigError
from framewire.pipeline.wire.tensors import TensorSpec
from framewire.stages import detections
from framewire.stages.tasks.base import ModelInfo, Result, Task, TaskParams
from framewire.stages.tasks.detection_formats import FORMATS, USUAL_PREPROCESSING, Layout, decode, find_layout
from framewire.stages.tasks.imaging import ImageInput, ImageParams
from framewire.stages.tasks.labels import class_filter, label_of, read_labels

log = logging.getLogger(__name__)


class DetectionParams(ImageParams):
    """Keys of `model:` for `task: detection` (besides the preprocessing keys of ImageParams)."""

    format: Literal["auto", "yolov5", "yolov8", "yolox", "end2end", "separate", "gfl", "tf_od"] = Field(
        "auto",
        description="The output format; auto: from the output shapes and the model's metadata. gfl: "
        "a distribution head per stride (NanoDet, PicoDet); tf_od: TensorFlow object detection "
        "(normalised y/x boxes, classes, scores, count).",
    )
    strides: tuple[int, ...] = Field(
        (8, 16, 32), min_length=1, description="yolox and gfl: the grid strides."
    )
    reg_max: int | Literal["auto"] = Field(
        "auto",
        description="gfl: bins of a box side less one (NanoDet-m 10, NanoDet-Plus and PicoDet 7); "
        "auto: told from the outputs' last dims.",
    )
    box_format: Literal["xyxy", "cxcywh", "xywh"] = Field(
        "xyxy", description="separate: how the boxes output writes a box."
    )
    box_units: Literal["pixels", "normalized"] = Field(
        "pixels", description="Boxes in model-input pixels, or normalised to 0-1 (some end-to-end exports)."
    )
    labels: Path | tuple[str, ...] | None = Field(
        None, description="A labels file (one per line) or a list; default: the model's metadata `names`."
    )
    classes: tuple[int | str, ...] | None = Field(
        None, description="Keep only these classes (labels or ids); default: all."
    )
    score_threshold: float = Field(0.25, ge=0.0, le=1.0, description="Minimum score of a detection.")
    iou_threshold: float = Field(0.45, ge=0.0, le=1.0, description="NMS: suppress boxes overlapping more.")
    nms: Literal["auto", "class", "agnostic", "none"] = Field(
        "auto",
        description="class: boxes suppress boxes of their class; agnostic: any box; none: the model did it. "
        "auto: none for end2end, separate and tf_od, class for the others.",
    )
    max_detections: int = Field(300, ge=1, le=100000, description="At most this many detections a frame.")

    @field_validator("format", mode="before")
    @classmethod
    def _known_format(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ("auto", *FORMATS):
            close = difflib.get_close_matches(value, ("auto", *FORMATS), n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown format {value!r}{hint}; the formats: auto, {', '.join(FORMATS)}")
        return value

    @field_validator("reg_max")
    @classmethod
    def _bins(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= 64:
            raise ValueError("reg_max must be 1-64 or auto")
        return value

    @field_validator("strides")
    @classmethod
    def _positive(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(s <= 0 for s in value):
            raise ValueError("strides must be positive")
        return value


class Detection(Task):
    """Any single-input detector whose outputs fit one of `FORMATS`."""

    name: ClassVar[str] = "detection"
    Params: ClassVar[type[TaskParams]] = DetectionParams
    gives_boxes: ClassVar[bool] = True

    def __init__(self, params: TaskParams) -> None:
        if not isinstance(params, DetectionParams):
            raise TypeError(f"Detection needs DetectionParams, got {type(params).__name__}")
        super().__init__(params)
        self.params: DetectionParams = params
        self.image = ImageInput(params, self.name)
        self.layout: Layout | None = None
        self._labels: tuple[str, ...] | None = None
        self._label_source = ""
        self._keep: frozenset[int] | None = None

    def use_model(self, info: ModelInfo) -> None:
        self.image.bind(info)
        self.layout = find_layout(
            info.outputs,
            info.metadata,
            self._fixed_size(),
            self.params.strides,
            self.params.format,
            None if self.params.reg_max == "auto" else self.params.reg_max,
        )
        labels, source = read_labels(self._label_source_param(), info.metadata, "model.labels")
        classes = self.layout.classes
        if labels is not None and classes is not None and len(labels) != classes:
            output = ", ".join(repr(n) for n in self.layout.outputs if n)
            raise ConfigError(
                f"model.labels: {len(labels)} labels ({source}) but the model's output {output} has "
                f"{classes} classes"
            )
        self._labels, self._label_source = labels, source
        self._keep = class_filter(self.params.classes, labels, classes, "model.classes")

    def labels(self) -> tuple[str, ...] | None:
        return self._labels

    def summary(self) -> str:
        layout = self._layout()
        p = self.params
        classes = f"{layout.classes} classes" if layout.classes is not None else "classes unknown"
        labels = f"labels from {self._label_source}" if self._labels else "no labels (class ids)"
        return (
            f"detection: format {layout.format} ({layout.why}), {classes}, {labels}; "
            f"input {self.image.name!r} "
            f"{p.input_size if p.input_size != 'model' else 'as in the model'}, {p.resize}"
            f"{' ' + p.pad if p.resize == 'letterbox' else ''}, {p.channels.upper()}, {self._pixels()}"
        )

    def warnings(self) -> list[str]:
        """The preprocessing keys left at their defaults where the format's family usually takes
        other values (detection_formats.USUAL_PREPROCESSING)."""
        layout = self._layout()
        if layout.format not in USUAL_PREPROCESSING:
            return []
        who, usual, shipped = USUAL_PREPROCESSING[layout.format]
        raw = self.image.dtype == np.uint8  # raw pixels: no scale, mean or std applies
        left = {
            key: value for key, value in usual.items()
            if key not in self.params.model_fields_set and getattr(self.params, key) != value
            and not (raw and key in ("scale", "mean", "std"))
        }  # fmt: skip
        if not left:
            return []
        wanted = ", ".join(f"{k}: {_shown(v)}" for k, v in left.items())
        warning = (
            f"model: format {layout.format} ({who}) usually takes {wanted}; these keys are left at "
            f"their defaults here: set them under model: as {shipped} does (or set them to the defaults "
            "to keep those)"
        )
        return [warning]

    def _pixels(self) -> str:
        """How pixel values are fed: raw uint8 (NHWC or not), or float with its scale."""
        layout = "NHWC" if self.image.nhwc else "NCHW"
        if self.image.dtype == np.uint8:
            return f"uint8 {layout}, raw 0-255 pixels"
        return f"float32 {layout}, scale {self.params.scale}"

    @property
    def input_name(self) -> str:
        return self.image.name

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(name for name in self._layout().outputs if name)

    def dynamic_axes(self) -> dict[str, tuple[int, ...]]:
        return self.image.dynamic_axes()

    def check_model(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        """The model as loaded must still have the input and the outputs its layout reads."""
        layout = self._layout()
        if not any(t.name == self.image.name for t in inputs):
            raise ConfigError(f"detection: the model has no input {self.image.name!r}")
        by_name = {t.name: t for t in outputs}
        missing = [name for name in self.output_names if name not in by_name]
        if missing:
            raise ConfigError(f"detection: the model has no output {missing[0]!r}")
        if layout.format not in ("separate", "gfl", "tf_od"):
            find_layout([by_name[layout.outputs[0]]], {}, None, self.params.strides, layout.format)

    def input_spec(self, frame_width: int, frame_height: int) -> TensorSpec:
        return self.image.spec(frame_width, frame_height)

    def preprocess(self, frame: np.ndarray, out: np.ndarray) -> dict[str, Any]:
        self.image.fill(frame, out)
        return {}

    def preprocess_i420(self, image: np.ndarray, out: np.ndarray) -> dict[str, Any]:
        """An I420 image goes to `fill` as it is: it scales the planes before converting where that
        gives the same pixels (`yuv.to_bgr_resized`)."""
        return self.preprocess(image, out)

    def scales_planes(self, frame_width: int, frame_height: int) -> bool:
        return self.image.scales_planes(frame_width, frame_height)

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], meta: Mapping[str, Any], frame_width: int, frame_height: int
    ) -> Result:
        """Decode, filter by class, NMS, and map the boxes back to frame pixels."""
        layout, p = self._layout(), self.params
        g = self.image.geometry(frame_width, frame_height)
        found = decode(layout, outputs, (g.width, g.height), p.strides, p.score_threshold, p.box_format)
        if p.box_units == "normalized":
            found.boxes = found.boxes * np.array([g.width, g.height, g.width, g.height], dtype=np.float64)
        if self._keep is not None:
            keep = np.isin(found.class_ids, list(self._keep))
            found.boxes, found.scores, found.class_ids = (
                found.boxes[keep],
                found.scores[keep],
                found.class_ids[keep],
            )
        in_model = layout.format in ("end2end", "separate", "tf_od")
        nms = p.nms if p.nms != "auto" else ("none" if in_model else "class")
        if nms == "none":
            order = np.argsort(-found.scores, kind="stable")[: p.max_detections]
        else:
            ids = found.class_ids if nms == "class" else None
            order = detections.nms(found.boxes, found.scores, ids, p.iou_threshold, p.max_detections)
        boxes = g.to_frame(found.boxes[order], frame_width, frame_height)
        records = [
            detections.make(
                box,
                float(found.scores[i]),
                int(found.class_ids[i]),
                label_of(self._labels, int(found.class_ids[i])),
            )
            for box, i in zip(boxes, order, strict=True)
        ]
        return Result(data={detections.KEY: records})

    def _layout(self) -> Layout:
        if self.layout is None:
            raise RuntimeError("detection: use_model() was not called")
        return self.layout

    def _fixed_size(self) -> tuple[int, int] | None:
        """The input size when it does not depend on the frame (a YOLOX grid can then be checked)."""
        size = self.params.input_size
        if size == "auto":
            return None
        if size == "model":
            return self.image.fixed or self.image.metadata_size
        return size

    def _label_source_param(self) -> Path | tuple[str, ...] | None:
        labels = self.params.labels
        return Path(labels) if isinstance(labels, Path) else labels


def _shown(value: object) -> str:
    """A key's value as it is written in YAML: `bgr`, `[103.53, 116.28, 123.675]`."""
    if isinstance(value, tuple):
        return "[" + ", ".join(f"{v:g}" for v in value) + "]"
    return str(value)


__all__ = ["FORMATS", "Detection", "DetectionParams"]
