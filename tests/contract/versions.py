"""The real package versions the contract tests check: one per TensorRT major version and per
cuda-python major version the extras allow (tests/contract/test_pins.py keeps these and pyproject's
extras in step). `FRAMEWIRE_CONTRACT_TENSORRT_10=11.4.0.106` (or `_11`, `FRAMEWIRE_CONTRACT_CUDA_12`,
`_13`) points a contract at another version, to see what it would break."""

from __future__ import annotations

import os

TENSORRT = {
    10: ("tensorrt-cu12-bindings", "10.16.1.11"),  # the `gpu` extra (CUDA 12)
    11: ("tensorrt-cu13-bindings", "11.4.0.106"),  # the `gpu-trt11` extra (CUDA 13)
}
CUDA = {
    12: ("cuda-bindings", "12.9.10"),  # cuda-python 12.9.x: the `gpu` extra
    13: ("cuda-bindings", "13.4.4"),  # cuda-python 13.4.x: the `gpu-cu13` and `gpu-trt11` extras
}


def tensorrt(major: int) -> tuple[str, str]:
    name, version = TENSORRT[major]
    return name, os.environ.get(f"FRAMEWIRE_CONTRACT_TENSORRT_{major}", version)


def cuda(major: int) -> tuple[str, str]:
    name, version = CUDA[major]
    return name, os.environ.get(f"FRAMEWIRE_CONTRACT_CUDA_{major}", version)
