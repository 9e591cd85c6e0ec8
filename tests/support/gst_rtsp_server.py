"""A real RTSP server for the tests: GStreamer's (gst-rtsp-server, Debian's packages unpacked by
tests.support.components.gst_rtsp), serving a video file's own H.264 packets as they are in the
file, paced at real time, at `rtsp://127.0.0.1:PORT/live`: `filesrc ! qtdemux ! h264parse !
rtph264pay`. Nothing is decoded or encoded, so what a client records can be compared with the
file's packets. Each client gets the file from its start (a media of its own) and, at the file's
end, an RTCP BYE: the stream ends, as a camera's does when it is switched off.

`spawn(path)` starts it (Debian's python3 with its GObject bindings, the unpacked GStreamer beside
it) on a port it picks, and returns once it listens. `python3 gst_rtsp_server.py FILE` is the server
itself: it imports nothing of framewire or of the tests (it runs outside the venv).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

LAUNCH = "( filesrc location={path} ! qtdemux ! h264parse ! rtph264pay name=pay0 pt=96 config-interval=-1 )"
"""config-interval -1: SPS and PPS before every key frame, as cameras send them."""


def spawn(path: str | Path) -> tuple[Any, int]:
    """The server on `path` in a child process and the port it listens on."""
    from tests.support.components import gst_rtsp

    python, env = gst_rtsp()
    process = subprocess.Popen(
        [str(python), __file__, str(path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("serving "):
        process.kill()
        process.wait(timeout=10)
        raise RuntimeError(f"GStreamer's RTSP server did not start: {line!r}")
    return process, int(line.split()[1])


def main(path: str) -> None:
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer

    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service("0")  # the system picks the port; the line below says which
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(LAUNCH.format(path=path))
    server.get_mount_points().add_factory("/live", factory)
    server.attach(None)
    print(f"serving {server.get_bound_port()}", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main(sys.argv[1])
