"""What this CPU offers a model: the instruction sets that make bf16 and int8 fast, read from
/proc/cpuinfo (Linux; elsewhere none are known, and `backend: auto` stays with ONNX Runtime).

Measured on a Xeon with AMX and AVX-512 VNNI, one thread: OpenVINO bf16 ran NanoDet-m 416 4.9x
faster than ONNX Runtime fp32, u2netp 3.2x, YuNet 1.3x; OpenVINO f32 was no faster than ONNX
Runtime. Without AMX or VNNI OpenVINO has nothing to gain over ONNX Runtime on the CPU.
"""

from __future__ import annotations

import functools
from pathlib import Path

FEATURES: dict[str, str] = {
    "amx_bf16": "AMX bf16 (Sapphire Rapids and later: bf16 matrix tiles)",
    "amx_int8": "AMX int8",
    "amx_fp16": "AMX fp16 (Granite Rapids)",
    "avx512_bf16": "AVX-512 BF16 (Cooper Lake, Zen 4)",
    "avx512_vnni": "AVX-512 VNNI (int8 dot products; Cascade Lake and later)",
    "avx_vnni": "AVX-VNNI (int8 dot products; Alder Lake and later)",
    "avx512f": "AVX-512",
    "avx2": "AVX2",
}
"""The flags that matter here, and what each one is (for `doctor`)."""

GAINS = ("amx_bf16", "amx_int8", "avx512_vnni", "avx_vnni")
"""Any of these, and OpenVINO runs bf16 or int8 at a speed ONNX Runtime fp32 does not reach."""


@functools.lru_cache(maxsize=4)
def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's flags (of its first processor), or none where the file cannot be read."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def known(flags: frozenset[str]) -> list[str]:
    """The flags of FEATURES this CPU has, in FEATURES' order."""
    return [name for name in FEATURES if name in flags]


def gains_from_openvino(flags: frozenset[str]) -> str | None:
    """Why OpenVINO beats ONNX Runtime fp32 on this CPU (its AMX or VNNI flags), or None."""
    found = [name for name in GAINS if name in flags]
    return ", ".join(found) if found else None


def default_precision(flags: frozenset[str]) -> str:
    """What OpenVINO's CPU plugin runs by default: bf16 with AMX bf16 (or AVX-512 BF16), else fp32."""
    return "bf16" if "amx_bf16" in flags or "avx512_bf16" in flags else "fp32"
