"""The accuracy gate of OpenVINO's precisions: `bench accuracy --record-gate` writes, for each
OpenVINO variant it ran, whether the model passed against ONNX Runtime fp32 on that clip (boxes
matched at IoU >= 0.9, scores, mattes: framewire.app.accuracy). `precision: auto` then never runs
a precision this model failed on any recorded clip: it runs fp32 instead and says why. A precision
asked for by name runs whatever the gate says.

The records live in `openvino_gate.json` beside this module, keyed by the model file's sha256, so
a retrained model is not judged by its predecessor's numbers. A model with no record is not
refused: its precision is the device's default.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GATE = Path(__file__).with_name("openvino_gate.json")


def sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def records(gate: Path = GATE) -> list[dict[str, Any]]:
    """Every record of the gate file (none where it is missing)."""
    if not gate.is_file():
        return []
    data = json.loads(gate.read_text())
    return list(data.get("records", []))


@functools.lru_cache(maxsize=16)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    return sha256(path)


def refused(model_path: str, precision: str, gate: Path = GATE) -> str | None:
    """Why `precision` is refused for this model (the first failing record: clip, frames and
    failures), or None where no record failed."""
    file = Path(model_path)
    stat = file.stat()
    digest = _digest(str(file.resolve()), stat.st_mtime_ns, stat.st_size)
    for record in records(gate):
        if (
            record.get("sha256") == digest
            and record.get("precision") == precision
            and not record.get("passed")
        ):
            failures = "; ".join(record.get("failures") or ["failed"])
            return (
                f"{failures} on {record.get('frames')} frames of {record.get('video')} ({record.get('cpu')})"
            )
    return None


def gated_precision(model_path: str, asked: str, native: str) -> str:
    """The precision to compile for: `asked` unless it is `auto` and the device's default `native`
    failed the gate for this model, then fp32, with one warning."""
    if asked != "auto" or native == "fp32":
        return asked
    why = refused(model_path, native)
    if why is None:
        return asked
    log.warning(
        "engine.precision auto: %s failed the accuracy gate for %s (%s); fp32 runs "
        "(precision: %s runs it anyway)",
        native,
        model_path,
        why,
        native,
    )
    return "fp32"


def record(results: Iterable[Mapping[str, Any]], model_path: str, video: str, frames: int, cpu: str,
           gate: Path = GATE) -> int:  # fmt: skip
    """Add `bench accuracy`'s OpenVINO results to the gate (replacing earlier ones of the same model,
    precision and clip); returns how many were written. A variant whose engine ran another precision
    than its name (bf16 asked on a CPU without bf16 runs fp32) is not a verdict on it: left out."""
    digest = sha256(model_path)
    new = [
        {
            "model": Path(model_path).name,
            "sha256": digest,
            "precision": str(r["variant"]).split(":")[2],
            "device": str(r["variant"]).split(":")[1],
            "video": Path(video).name,
            "frames": frames,
            "cpu": cpu,
            "passed": bool(r.get("passed")),
            "failures": list(r.get("failures") or ([r["error"]] if r.get("error") else [])),
            "faces": r.get("faces"),
            "matte": r.get("matte"),
        }
        for r in results
        if str(r.get("variant", "")).startswith("openvino:") and _ran_as_asked(r)
    ]
    key = {(n["sha256"], n["precision"], n["device"], n["video"]) for n in new}
    kept = [
        r
        for r in records(gate)
        if (r.get("sha256"), r.get("precision"), r.get("device"), r.get("video")) not in key
    ]
    gate.write_text(json.dumps({"records": kept + new}, indent=1) + "\n")
    return len(new)


def _ran_as_asked(result: Mapping[str, Any]) -> bool:
    """Whether the engine's provider (`OpenVINO CPU bf16`, `... int8+fp32`) ran the variant's precision;
    a variant that failed to open is a verdict (it cannot run)."""
    provider = str(result.get("provider") or "")
    if not provider:
        return True
    asked = str(result["variant"]).split(":")[2]
    ran = provider.rsplit(" ", 1)[-1]
    return ran.startswith("int8") if asked == "int8" else ran == asked
