"""The reference packages framewire's models are checked against, and the agreement measures.

Each real model is checked against its own package's pipeline on the same frames: the YOLOX detector
against `ddddocr`'s detection, the Ultralytics YOLOv8 model against `nudenet`'s detector (the model
is loaded from that package's folder: it is AGPL-3.0 and never copied into framewire), the PaddleOCR
pair against `rapidocr-onnxruntime`'s pipeline, and the tracker against supervision's ByteTrack.

None of these is a dependency of framewire. They are installed on first use with pip into
`.venv/reference/<name>/` (`--no-deps`, with the few dependencies each needs listed here): rapidocr
and supervision ask for `opencv-python`, which would overwrite the `opencv-python-headless` the
project uses, and they import the headless one just as well. A folder goes on `sys.path` only
while its reference runs (`on_path`).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import ROOT

REFERENCE_DIR = ROOT / ".venv" / "reference"
PACKAGES: dict[str, tuple[str, ...]] = {
    "ddddocr": ("ddddocr==1.6.1",),
    "nudenet": ("nudenet==3.4.2",),
    "rapidocr": ("rapidocr-onnxruntime==1.4.4", "pyclipper==1.4.0", "shapely==2.2.0", "six==1.17.0"),
    "supervision": (
        "supervision==0.25.1",
        "scipy==1.17.1",
        "defusedxml==0.7.1",
        "requests==2.34.2",
        "urllib3==2.8.0",
        "idna==3.20",
        "certifi==2026.10.18",
        "charset-normalizer==3.5.2",
        "tqdm==4.70.1",
    ),
}
"""What each reference needs, pinned: the package itself and the dependencies it imports that the
project's environment lacks (numpy, onnxruntime, Pillow, PyYAML, matplotlib come from the venv)."""


class ReferenceUnavailable(RuntimeError):
    """A reference package could not be installed (no index reachable): the message says which."""


def install(name: str) -> Path:
    """The folder holding reference `name`, installed there with pip on first use."""
    folder = REFERENCE_DIR / name
    marker = folder / ".installed"
    specs = PACKAGES[name]
    if marker.is_file() and marker.read_text() == "\n".join(specs):
        return folder
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--only-binary=:all:",
        "--upgrade",
        "--target",
        str(folder),
        *specs,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
        raise ReferenceUnavailable(f"reference {name}: pip install {' '.join(specs)} failed: {tail[0]}")
    marker.write_text("\n".join(specs))
    return folder


@contextlib.contextmanager
def on_path(name: str) -> Iterator[Path]:
    """Reference `name` importable while inside (installed first if needed)."""
    folder = str(install(name))
    sys.path.insert(0, folder)
    try:
        yield Path(folder)
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


# --- the references, each on BGR frames ----------------------------------------------------------


def ddddocr_boxes(frames: Sequence[np.ndarray]) -> list[np.ndarray]:
    """ddddocr's own detection of each frame (given PNG bytes, as it takes them): [N, 4] corners."""
    import cv2

    with on_path("ddddocr"):
        import ddddocr

        detector = ddddocr.DdddOcr(det=True, ocr=False, show_ad=False)
        out = []
        for frame in frames:
            ok, png = cv2.imencode(".png", frame)
            assert ok
            out.append(np.asarray(detector.detection(png.tobytes()), dtype=np.float64).reshape(-1, 4))
        return out


def nudenet_model() -> Path:
    """The YOLOv8 model inside the installed nudenet package (never copied anywhere)."""
    return install("nudenet") / "nudenet" / "320n.onnx"


def nudenet_detections(frames: Sequence[np.ndarray]) -> list[tuple[np.ndarray, list[str]]]:
    """nudenet's own detector on each frame: corners and class names."""
    with on_path("nudenet"):
        import nudenet

        detector = nudenet.NudeDetector()
        out = []
        for frame in frames:
            found = detector.detect(frame)
            boxes = np.array(
                [
                    [d["box"][0], d["box"][1], d["box"][0] + d["box"][2], d["box"][1] + d["box"][3]]
                    for d in found
                ],
                dtype=np.float64,
            ).reshape(-1, 4)
            out.append((boxes, [str(d["class"]) for d in found]))
        return out


def rapidocr_lines(frames: Sequence[np.ndarray]) -> list[list[tuple[np.ndarray, str]]]:
    """rapidocr-onnxruntime's own pipeline (defaults) on each frame: (corners, text) per line."""
    with on_path("rapidocr"):
        from rapidocr_onnxruntime import RapidOCR

        engine = RapidOCR()
        out = []
        for frame in frames:
            result, _ = engine(frame)
            lines = []
            for quad, text, _score in result or []:
                points = np.asarray(quad, dtype=np.float64)
                lines.append((np.r_[points.min(axis=0), points.max(axis=0)], str(text)))
            out.append(lines)
        return out


def supervision_tracks(
    per_frame: Sequence[tuple[np.ndarray, np.ndarray]], **params: Any
) -> list[dict[int, int]]:
    """supervision's ByteTrack on the same boxes: per frame, {detection index: track id}."""
    with on_path("supervision"):
        import supervision as sv

        tracker = sv.ByteTrack(**params)
        out = []
        for boxes, scores in per_frame:
            found = sv.Detections(
                xyxy=np.asarray(boxes, dtype=np.float64).reshape(-1, 4),
                confidence=np.asarray(scores, dtype=np.float64),
                class_id=np.zeros(len(scores), dtype=int),
            )
            tracked = tracker.update_with_detections(found)
            ids = {}
            for box, track_id in zip(tracked.xyxy, tracked.tracker_id, strict=True):
                ids[int(np.argmin(np.abs(found.xyxy - box).sum(axis=1)))] = int(track_id)
            out.append(ids)
        return out


# --- agreement -----------------------------------------------------------------------------------


def matched(reference: np.ndarray, ours: np.ndarray, min_iou: float) -> list[tuple[int, int, float]]:
    """One-to-one pairs (reference index, our index, IoU) at IoU >= min_iou, most overlap first."""
    from framewire.components import iou

    if len(reference) == 0 or len(ours) == 0:
        return []
    overlap = iou(reference, ours)
    pairs = []
    used_ref, used_ours = set(), set()
    for flat in np.argsort(-overlap, axis=None):
        i, j = np.unravel_index(flat, overlap.shape)
        if overlap[i, j] < min_iou:
            break
        if i in used_ref or j in used_ours:
            continue
        used_ref.add(i)
        used_ours.add(j)
        pairs.append((int(i), int(j), float(overlap[i, j])))
    return pairs


def id_switches(
    truth: Sequence[dict[str, np.ndarray]], tracked: Sequence[list[tuple[np.ndarray, int]]]
) -> int:
    """Identity switches against the ground truth: each frame, truth boxes are matched one to one to
    tracked boxes (IoU >= 0.3); a switch is a truth object matched to another id than the last time."""
    last: dict[str, int] = {}
    switches = 0
    for objects, tracks in zip(truth, tracked, strict=True):
        names = list(objects)
        if not names or not tracks:
            continue
        pairs = matched(np.array([objects[n] for n in names]), np.array([box for box, _ in tracks]), 0.3)
        for i, j, _ in pairs:
            track_id = tracks[j][1]
            if names[i] in last and last[names[i]] != track_id:
                switches += 1
            last[names[i]] = track_id
    return switches
