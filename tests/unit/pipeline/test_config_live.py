"""The live-source keys of `sources:` items: defaults that follow the URI, and one-line errors."""

from __future__ import annotations

import pytest

from framewire.config import Config, Policy, load_config
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.uris import endpoint_problem, is_live, redact, source_kind, zmq_endpoint

pytestmark = pytest.mark.timeout(30)

BASE = """
model: {path: model.onnx, task: face_detection}
outputs: [{kind: jsonl, path: "out/{source_id}.jsonl"}]
sources:
"""


def load(source: str) -> Config:
    return load_config("live.yaml", text=BASE + source)


def error_of(source: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(source)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_live_source_drops_by_default_and_a_file_blocks() -> None:
    config = load(
        "  - {id: cam, uri: 'rtsp://u:p@10.0.0.5/s1', max_staleness_ms: 300}\n"
        "  - {id: file, uri: clip.mp4}\n"
        "  - {id: kept, uri: 'rtsp://h/s', policy: drop_newest}\n"
        "  - {id: looped, uri: clip.mp4, live: true}\n"
    )
    cam, file, kept, looped = config.sources
    assert (cam.policy, cam.is_live, cam.max_staleness_ms) == (Policy.DROP_OLDEST, True, 300)
    assert (file.policy, file.is_live) == (Policy.BLOCK, False)
    assert kept.policy == Policy.DROP_NEWEST
    assert (looped.policy, looped.is_live) == (Policy.DROP_OLDEST, True)
    assert (cam.timeout_s, cam.reconnect.initial_s, cam.reconnect.max_s, cam.reconnect.max_attempts) == (
        5.0, 0.5, 30.0, None,
    )


def test_all_live_keys_load() -> None:
    (source,) = load(
        "  - id: cam\n"
        "    uri: /dev/video0\n"
        "    camera: {width: 1280, height: 720, fps: 30, input_format: mjpeg}\n"
        "    timeout_s: 3\n"
        "    reconnect: {initial_s: 1, max_s: 10, max_attempts: 5}\n"
        "    ffmpeg_options: {use_libv4l2: '1'}\n"
    ).sources
    assert source.camera is not None and source.camera.input_format == "mjpeg"
    assert source.reconnect.max_attempts == 5 and source.ffmpeg_options == {"use_libv4l2": "1"}


def test_a_live_source_bounds_its_waiting_frames_and_a_file_does_not() -> None:
    from framewire.app.compose.sources import MAX_WAITING, source_plan

    cam, own, file = load(
        "  - {id: cam, uri: 'rtsp://h/s'}\n"
        "  - {id: own, uri: 'rtsp://h/t', policy: drop_newest, max_waiting: 1}\n"
        "  - {id: file, uri: clip.mp4}\n"
    ).sources
    assert source_plan(cam).options.waiting_limit == MAX_WAITING
    assert source_plan(own).options.waiting_limit == 1
    assert source_plan(file).options.waiting_limit is None  # block: every frame waits its turn


def test_a_latency_budget_goes_with_any_policy() -> None:
    cam, file = load(
        "  - {id: cam, uri: 'rtsp://h/s', max_staleness_ms: 400, latency_budget_ms: 2000}\n"
        "  - {id: file, uri: clip.mp4, latency_budget_ms: 2000}\n"  # block: counted, never dropped
    ).sources
    assert (cam.max_staleness_ms, cam.latency_budget_ms) == (400, 2000)
    assert (file.policy, file.latency_budget_ms) == (Policy.BLOCK, 2000)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{id: a, uri: clip.mp4, rtsp_transport: udp}", "sources.0.rtsp_transport: only for rtsp:// sources"),
        ("{id: a, uri: 'rtsp://h/s', rtsp_transport: quic}", "sources.0.rtsp_transport: Input should be 'tcp' or 'udp'"),
        ("{id: a, uri: 'rtsp://h/s', camera: {fps: 5}}", "sources.0.camera: only for V4L2 cameras"),
        ("{id: a, uri: /dev/video0, camera: {width: 640}}", "sources.0.camera: width and height go together"),
        ("{id: a, uri: 'rtsp://h/s', policy: block, max_staleness_ms: 50}", "max_staleness_ms: needs policy"),
        ("{id: a, uri: clip.mp4, max_staleness_ms: 50}", "max_staleness_ms: needs policy"),
        ("{id: a, uri: 'rtsp://h/s', max_staleness_ms: 0}", "sources.0.max_staleness_ms: Input should be greater than 0"),
        ("{id: a, uri: 'rtsp://h/s', realtime: true}", "realtime: only for files"),
        ("{id: a, uri: clip.mp4, max_waiting: 2}", "sources.0.max_waiting: needs policy drop_oldest or drop_newest"),
        ("{id: a, uri: 'rtsp://h/s', max_waiting: 0}", "sources.0.max_waiting: Input should be greater than or equal to 1"),
        ("{id: a, uri: 'rtsp://h/s', max_staleness_ms: 500, latency_budget_ms: 500}",
         "sources.0: max_staleness_ms (500) must be below latency_budget_ms (500)"),
        ("{id: a, uri: 'rtsp://h/s', latency_budget_ms: -1}", "sources.0.latency_budget_ms: Input should be greater than 0"),
        ("{id: a, uri: 'rtsp://h/s', reconnect: {initial_s: 9, max_s: 1}}", "sources.0.reconnect: max_s (1.0) must be at least"),
        ("{id: a, uri: 'rtsp://h/s', reconnect: {tries: 3}}", "sources.0.reconnect.tries: unknown key"),
        ("{id: a, uri: 'zmq+tcp://127.0.0.1'}", "expected zmq+tcp://host:port or zmq+ipc:///path"),
        ("{id: a, uri: 'zmq+tcp://127.0.0.1:99999'}", "sources.0.uri: 'zmq+tcp://127.0.0.1:99999': port '99999' is not"),
    ],
)
def test_bad_live_keys_name_the_key(source: str, expected: str) -> None:
    assert expected in error_of(f"  - {source}\n")


def test_errors_never_show_a_password() -> None:
    message = error_of("  - {id: a, uri: 'rtsp://admin:hunter2@cam/s', camera: {fps: 5}}\n")
    assert "hunter2" not in message and "rtsp://***@cam/s" in message


@pytest.mark.parametrize(
    ("uri", "kind", "live"),
    [
        ("clip.mp4", "file", False),
        ("file:///data/clip.mp4", "file", False),
        ("rtsp://cam/s", "stream", True),
        ("RTMP://host/app/key", "stream", True),
        ("srt://host:9000", "stream", True),
        ("https://host/clip.mp4", "stream", False),
        ("https://host/live/index.m3u8?token=x", "stream", True),
        ("/dev/video0", "camera", True),
        ("/dev/v4l/by-id/usb-cam-video-index0", "camera", True),
        ("zmq+tcp://127.0.0.1:5570", "zmq", True),
        ("zmq+ipc:///tmp/frames.sock", "zmq", True),
    ],
)
def test_uri_kinds(uri: str, kind: str, live: bool) -> None:
    assert (source_kind(uri), is_live(uri)) == (kind, live)


def test_redact_and_zmq_endpoint() -> None:
    assert redact("rtsp://user:p@ss/w@rd@10.0.0.5:554/s?x=1") == "rtsp://***@10.0.0.5:554/s?x=1"
    assert redact("rtsp://10.0.0.5/s") == "rtsp://10.0.0.5/s"
    assert redact("/dev/video0") == "/dev/video0"
    assert zmq_endpoint("zmq+ipc:///tmp/x.sock") == "ipc:///tmp/x.sock"
    with pytest.raises(ValueError):
        zmq_endpoint("tcp://127.0.0.1:1")


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        ("tcp://127.0.0.1:5560", None),
        ("tcp://*:*", None),
        ("tcp://[::1]:0", None),
        ("tcp://eth0:5560", None),
        ("ipc:///tmp/framewire.sock", None),
        ("inproc://results", None),
        ("tcp://127.0.0.1:notaport", "port 'notaport' is not a number from 0 to 65535 (0 or *: any free port)"),
        ("tcp://127.0.0.1:65536", "port '65536' is not a number from 0 to 65535 (0 or *: any free port)"),
        ("tcp://127.0.0.1", "expected tcp://HOST:PORT"),
        ("ipc://", "expected ipc:///path"),
        ("ipc:///" + "d" * 107, "an ipc:// path is at most 107 bytes (this one is 108)"),
        ("udp://127.0.0.1:5560", "must start with tcp://, ipc:// or inproc://"),
    ],
)
def test_endpoint_problems_are_what_zmq_would_refuse(endpoint: str, problem: str | None) -> None:
    assert endpoint_problem(endpoint) == problem
    if problem is None:
        return
    import zmq

    with zmq.Context() as ctx, ctx.socket(zmq.PUB) as sock:
        sock.setsockopt(zmq.LINGER, 0)
        with pytest.raises(zmq.ZMQError):
            sock.bind(endpoint)
    assert endpoint_problem("tcp://127.0.0.1:5560/x") == "expected tcp://HOST:PORT"  # a path: a typo
