"""Freed memory kept in a worker's heap for its next frame, not handed back to the kernel.

A worker allocates the same temporaries for every frame: a scaled picture, its planes, a converted
frame, hundreds of KB to MBs each. glibc gives the top of its heap back to the kernel once the free
block there is over its trim threshold (twice the largest block it has yet served from a mapping
of its own: 128 KB at first), and serves blocks over its mmap threshold from a mapping of their
own, unmapped on free. A frame's temporaries, freed together at its end, make such a block, and
the next frame faults every one of their pages in again, each zeroed by the kernel: 700 page faults
a 720p frame in the model's preprocessing alone, which took 3.8 ms a frame instead of 1.6
(docs/results/history.md, "Page faults"). Here both thresholds are set once in each worker:
blocks up to 32 MB (glibc's largest mmap threshold) come from the heap, and the heap keeps up to
256 MB of free memory at its top. A worker's memory then stays at its peak, what its next frame
needs anyway.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""mallopt's parameters (glibc's malloc.h)."""
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 256 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Set the thresholds in this process (glibc only: elsewhere nothing changes); True when set."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other libcs have no mallopt
        log.debug("no mallopt here: freed memory goes back to the kernel as the libc decides")
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    mapped = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    return bool(mapped) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
