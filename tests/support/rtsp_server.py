"""A small real RTSP server for the tests: H.264 over RTP (RFC 6184), TCP-interleaved or UDP, and,
with `--audio FILE`, that file's sound as 16 kHz mono L16 (RFC 3551) on a second track (TCP only).

FFmpeg's RTSP muxer only pushes to a server (its `listen` flag is for input), and no RTSP server
comes from PyPI, so the tests serve their own: `python -m tests.support.rtsp_server --port P` encodes a
small clip with libx264 (or, with `--clip FILE`, the frames of a real video at its own size and
rate) and serves it at `rtsp://127.0.0.1:P/live`, looping, paced at real time
(`ffmpeg -re` semantics), to every client that asks (OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN;
anything else, such as a GET_PARAMETER keep-alive, gets a plain 200). Each client's session starts at
the clip's first frame, as a camera's stream starts at a key frame. Killing the process drops every
connection at once, like a camera that loses power.
"""

from __future__ import annotations

import argparse
import base64
import random
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from fractions import Fraction
from typing import Any

import av
import numpy as np

MTU_PAYLOAD = 1400
CLOCK = 90000


def encode_clip(width: int, height: int, frames: int, fps: int) -> list[bytes]:
    """The clip as H.264 Annex B access units, one per frame, each key frame with SPS and PPS."""
    from tests.support.clips import draw_frame

    return encode_frames((draw_frame(i, width, height) for i in range(frames)), width, height, fps)


def read_video(path: str) -> tuple[list[np.ndarray], int]:
    """Every frame of a video file (BGR) and its frame rate, rounded to a whole number."""
    with av.open(path) as container:
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.guessed_rate or 25
        images = [frame.to_ndarray(format="bgr24") for frame in container.decode(stream)]
    if not images:
        raise ValueError(f"{path}: no video frames")
    return images, max(1, round(float(rate)))


def encode_frames(images: Iterable[np.ndarray], width: int, height: int, fps: int) -> list[bytes]:
    """BGR frames as H.264 Annex B access units (a camera's settings: no B-frames, one key frame a
    second, SPS and PPS before each), one per frame."""
    codec = av.CodecContext.create("libx264", "w")
    codec.width, codec.height, codec.pix_fmt = width, height, "yuv420p"
    codec.time_base = Fraction(1, fps)
    codec.framerate = Fraction(fps)
    codec.gop_size = fps
    codec.options = {"preset": "ultrafast", "tune": "zerolatency", "x264-params": "repeat-headers=1"}
    units: list[bytes] = []
    for index, image in enumerate(images):
        frame = av.VideoFrame.from_ndarray(image, format="bgr24")
        frame = frame.reformat(format="yuv420p")
        frame.pts = index
        units.extend(bytes(p) for p in codec.encode(frame))
    units.extend(bytes(p) for p in codec.encode(None))
    return units


def nal_units(access_unit: bytes) -> list[bytes]:
    """The NAL units of an Annex B access unit, without their start codes."""
    out = []
    for chunk in access_unit.split(b"\x00\x00\x01"):
        chunk = chunk.rstrip(b"\x00") if chunk.endswith(b"\x00") else chunk
        if chunk:
            out.append(chunk)
    return out


def rtp_payloads(access_unit: bytes) -> Iterator[bytes]:
    """RTP payloads of one access unit: single NAL unit packets, or FU-A fragments of big ones."""
    for nal in nal_units(access_unit):
        if len(nal) <= MTU_PAYLOAD:
            yield nal
            continue
        indicator = (nal[0] & 0xE0) | 28
        kind = nal[0] & 0x1F
        body = nal[1:]
        for start in range(0, len(body), MTU_PAYLOAD):
            first, last = start == 0, start + MTU_PAYLOAD >= len(body)
            header = (0x80 if first else 0) | (0x40 if last else 0) | kind
            yield bytes([indicator, header]) + body[start : start + MTU_PAYLOAD]


AUDIO_RATE = 16000
AUDIO_PACKET = 320
"""Samples per audio packet: 20 ms at 16 kHz."""


def read_audio(path: str) -> bytes:
    """A file's sound as 16 kHz mono big-endian 16-bit PCM (L16)."""
    from framewire.media.audio import AudioDecoder

    decoder = AudioDecoder("rtsp-server", path, AUDIO_RATE)
    decoder.open()
    samples = np.concatenate([c.samples for c in decoder.chunks()])
    decoder.close()
    return (np.clip(samples, -1, 1) * 32767).astype(">i2").tobytes()


class Clip:
    def __init__(
        self, width: int, height: int, frames: int, fps: int, path: str | None = None, audio: str | None = None
    ) -> None:
        self.audio = read_audio(audio) if audio else None
        if path is not None:
            images, fps = read_video(path)
            height, width = images[0].shape[:2]
            self.units = encode_frames(images, width, height, fps)
        else:
            self.units = encode_clip(width, height, frames, fps)
        self.fps = fps
        first = nal_units(self.units[0])
        sps = next(n for n in first if n[0] & 0x1F == 7)
        pps = next(n for n in first if n[0] & 0x1F == 8)
        self.fmtp = (
            f"packetization-mode=1;profile-level-id={sps[1:4].hex()};"
            f"sprop-parameter-sets={base64.b64encode(sps).decode()},{base64.b64encode(pps).decode()}"
        )

    def sdp(self, host: str) -> str:
        return (
            "v=0\r\n"
            f"o=- 0 0 IN IP4 {host}\r\n"
            "s=framewire test clip\r\n"
            "c=IN IP4 0.0.0.0\r\n"
            "t=0 0\r\n"
            "m=video 0 RTP/AVP 96\r\n"
            "a=rtpmap:96 H264/90000\r\n"
            f"a=fmtp:96 {self.fmtp}\r\n"
            "a=control:track1\r\n"
        ) + (
            "m=audio 0 RTP/AVP 97\r\n"
            f"a=rtpmap:97 L16/{AUDIO_RATE}/1\r\n"
            "a=control:track2\r\n"
            if self.audio
            else ""
        )


class Session(threading.Thread):
    """One client connection: answers its requests and, once it plays, sends it the clip."""

    def __init__(self, conn: socket.socket, clip: Clip) -> None:
        super().__init__(daemon=True)
        self.conn = conn
        self.clip = clip
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.udp: tuple[socket.socket, tuple[str, int]] | None = None
        self.session_id = f"{random.getrandbits(32):08x}"

    def run(self) -> None:
        buffer = b""
        try:
            while not self.closed.is_set():
                data = self.conn.recv(65536)
                if not data:
                    break
                buffer += data
                buffer = self._requests(buffer)
        except OSError:
            pass
        finally:
            self.closed.set()
            self.conn.close()

    def _requests(self, buffer: bytes) -> bytes:
        while buffer:
            if buffer[:1] == b"$":  # interleaved RTCP from the client: skip it
                if len(buffer) < 4:
                    return buffer
                size = struct.unpack("!H", buffer[2:4])[0]
                if len(buffer) < 4 + size:
                    return buffer
                buffer = buffer[4 + size :]
                continue
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return buffer
            head = buffer[:end].decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
            length = int(headers.get("content-length", "0"))
            if len(buffer) < end + 4 + length:
                return buffer
            buffer = buffer[end + 4 + length :]
            self._answer(head[0].split(" "), headers)
        return buffer

    def _answer(self, request: list[str], headers: dict[str, str]) -> None:
        method, url = request[0], request[1] if len(request) > 1 else ""
        extra: dict[str, str] = {}
        body = ""
        if method == "OPTIONS":
            extra["Public"] = "OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER"
        elif method == "DESCRIBE":
            body = self.clip.sdp(self.conn.getsockname()[0])
            extra["Content-Base"] = url.rstrip("/") + "/"
            extra["Content-Type"] = "application/sdp"
        elif method == "SETUP":
            transport = headers.get("transport", "")
            if "TCP" in transport:
                channels = "2-3" if url.rstrip("/").endswith("track2") else "0-1"
                extra["Transport"] = f"RTP/AVP/TCP;unicast;interleaved={channels}"
            else:
                port = int(transport.split("client_port=")[1].split("-")[0])
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sock.bind((self.conn.getsockname()[0], 0))
                self.udp = (sock, (self.conn.getpeername()[0], port))
                own = sock.getsockname()[1]
                extra["Transport"] = f"RTP/AVP;unicast;client_port={port}-{port + 1};server_port={own}-{own + 1}"
            extra["Session"] = f"{self.session_id};timeout=60"
        elif method == "PLAY":
            extra["Session"] = self.session_id
            started = time.monotonic() + 0.05  # both tracks start at the same instant: in sync
            threading.Thread(target=self._play, args=(started,), daemon=True).start()
            if self.clip.audio and self.udp is None:
                threading.Thread(target=self._play_audio, args=(started,), daemon=True).start()
        elif method == "TEARDOWN":
            self.closed.set()
        cseq = headers.get("cseq", "0")
        lines = ["RTSP/1.0 200 OK", f"CSeq: {cseq}", *(f"{k}: {v}" for k, v in extra.items())]
        if body:
            lines.append(f"Content-Length: {len(body)}")
        self._write(("\r\n".join(lines) + "\r\n\r\n" + body).encode())

    def _write(self, data: bytes) -> None:
        with self.lock:
            self.conn.sendall(data)

    def _play_audio(self, started: float) -> None:
        """The sound, looped, in 20 ms packets on interleaved channel 2, paced like the frames."""
        assert self.clip.audio is not None
        ssrc, seq, index = random.getrandbits(32), random.getrandbits(16), 0
        # A random first timestamp, as RFC 3550 asks: FFmpeg takes a first timestamp of 0 for "none
        # yet" and starts the track at the second packet, 20 ms off the video.
        base = random.randrange(1, 2**31)
        data, step = self.clip.audio, AUDIO_PACKET * 2
        try:
            while not self.closed.is_set():
                delay = started + index * AUDIO_PACKET / AUDIO_RATE - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                at = (index * step) % len(data)
                payload = (data + data)[at : at + step] if at + step > len(data) else data[at : at + step]
                stamp = (base + index * AUDIO_PACKET) & 0xFFFFFFFF
                packet = struct.pack("!BBHII", 0x80, 97, seq, stamp, ssrc) + payload
                seq = (seq + 1) & 0xFFFF
                self._write(b"$\x02" + struct.pack("!H", len(packet)) + packet)
                index += 1
        except OSError:
            self.closed.set()

    def _play(self, started: float) -> None:
        ssrc = random.getrandbits(32)
        seq = random.getrandbits(16)
        base = random.randrange(1, 2**31)
        index = 0
        try:
            while not self.closed.is_set():
                unit = self.clip.units[index % len(self.clip.units)]
                delay = started + index / self.clip.fps - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                stamp = (base + index * CLOCK // self.clip.fps) & 0xFFFFFFFF
                payloads = list(rtp_payloads(unit))
                for n, payload in enumerate(payloads):
                    marker = 0x80 if n == len(payloads) - 1 else 0
                    packet = struct.pack("!BBHII", 0x80, marker | 96, seq, stamp, ssrc) + payload
                    seq = (seq + 1) & 0xFFFF
                    if self.udp is not None:
                        self.udp[0].sendto(packet, self.udp[1])
                    else:
                        self._write(b"$\x00" + struct.pack("!H", len(packet)) + packet)
                index += 1
        except OSError:
            self.closed.set()


def serve(port: int, clip: Clip, host: str = "127.0.0.1") -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(16)
    print(f"serving rtsp://{host}:{port}/live", flush=True)
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        Session(conn, clip).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--width", type=int, default=160)
    parser.add_argument("--height", type=int, default=120)
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--fps", type=int, default=25)
    parser.add_argument("--clip", help="serve this video's frames (its size and rate) instead, looped")
    parser.add_argument("--audio", help="also serve this file's sound (16 kHz mono L16), looped")
    args = parser.parse_args()
    serve(args.port, Clip(args.width, args.height, args.frames, args.fps, args.clip, args.audio))


if __name__ == "__main__":
    main()


def spawn(
    port: int,
    *,
    width: int = 160,
    height: int = 120,
    frames: int = 50,
    fps: int = 25,
    clip: str | None = None,
    audio: str | None = None,
) -> Any:
    """Start the server in a child process (`python -m tests.support.rtsp_server`); returns once it listens.
    With `clip`, it serves that video's frames (re-encoded, looped) instead of a drawn clip."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.rtsp_server", "--port", str(port), "--width", str(width),
         "--height", str(height), "--frames", str(frames), "--fps", str(fps),
         *(["--clip", clip] if clip else []), *(["--audio", audio] if audio else [])],
        cwd=root, env=env, stdout=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("serving"):
        process.kill()
        raise RuntimeError(f"the test RTSP server did not start: {line!r}")
    return process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
