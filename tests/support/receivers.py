"""The receiving end of a live video push, as a test starts it: FFmpeg (through PyAV) listening for
an RTSP ANNOUNCE/RECORD (`rtsp_flags=listen`) or an RTMP publish (`listen=1`), in a process of its own.

Run as a script (`python -m tests.support.receivers URL OUT_DIR`), it decodes what it is sent and
writes one JSON line per frame to stdout: `{"n", "t", "pts", "w", "h", "red"}`, where `red` is the share
of pixels that are strongly red (the box colour the tests draw), and saves frame 10 as `frame.npy`
in OUT_DIR. It ends with `{"end": reason}`. The test reads the lines as they come.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import av
import numpy as np

from tests.support import clips

ROOT = Path(__file__).resolve().parents[2]


def face_clip(path: Path, frames: int, fps: int = 15, size: tuple[int, int] = (352, 288)) -> Path:
    """A clip of `frames` frames of the shipped face close-up (carphone), played forward and back
    as often as needed, at `size` and `fps`: a face in every frame, for the face job to box."""
    pictures = clips._pictures(ROOT / "assets/videos/carphone_pristine.mp4", size[0], size[1], 120)
    cycle = pictures + pictures[::-1]
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(cycle[i % len(cycle)], format="bgr24")
            frame.pts = i
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def red_share(image: np.ndarray) -> float:
    """The share of pixels of a BGR image that are strongly red: a box drawn in (0, 0, 255)."""
    b, g, r = (image[..., i].astype(np.int16) for i in range(3))
    return float(np.mean((r > 170) & (g < 90) & (b < 90)))


def listen(url: str, out: Path) -> str:
    options = {"rtsp_flags": "listen", "listen_timeout": "20"} if url.startswith("rtsp") else {"listen": "1"}
    if url.startswith("rtmp"):  # an FLV stream's parameters are in its first packets: no need to probe long
        options.update({"analyzeduration": "500000", "probesize": "32768"})
    container = av.open(url, options=options, timeout=(30, 10))
    n = 0
    try:
        for frame in container.decode(video=0):
            image = frame.to_ndarray(format="bgr24")
            line = {"n": n, "t": time.monotonic(), "pts": frame.pts, "w": frame.width, "h": frame.height,
                    "red": red_share(image)}  # fmt: skip
            if n == 10:
                np.save(out / "frame.npy", image)
            print(json.dumps(line), flush=True)
            n += 1
    except (av.FFmpegError, OSError) as exc:  # RTMP ends with EIO when the publisher goes
        return f"error: {exc}"
    finally:
        container.close()
    return "eof"


class Receiver:
    """The receiver in a subprocess; `lines` fills as frames arrive."""

    def __init__(self, url: str, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.lines: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.receivers", url, str(out)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(json.loads(raw))

    @property
    def frames(self) -> list[dict[str, Any]]:
        return [line for line in self.lines if "n" in line]

    def wait_frames(self, count: int, timeout_s: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while len(self.frames) < count:
            if time.monotonic() > deadline or (self.proc.poll() is not None and not self._reader.is_alive()):
                err = self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else ""
                raise AssertionError(f"receiver got {len(self.frames)} of {count} frames; {self.lines[-1:]} {err[-500:]}")
            time.sleep(0.05)
        return self.frames

    def wait_end(self, timeout_s: float) -> dict[str, Any]:
        self.proc.wait(timeout_s)
        self._reader.join(5)
        return self.lines[-1] if self.lines else {}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)


if __name__ == "__main__":
    print(json.dumps({"end": listen(sys.argv[1], Path(sys.argv[2]))}), flush=True)
