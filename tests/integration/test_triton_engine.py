"""The Triton engine against a real server (pytriton's tritonserver, tests/support/triton.py): the
outputs equal ONNX Runtime's on the socket and through shared memory, regions are registered once
and reused, a batch split over requests in flight comes back whole and in order, outputs that
outgrow their regions are learned again, and closing leaves nothing registered or in /dev/shm."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from framewire.config.engine import TritonConfig
from framewire.engines.batch_rewrite import with_batch_axis
from framewire.engines.onnxruntime import OnnxRuntimeEngine
from framewire.engines.triton import TritonEngine
from framewire.pipeline.errors import BackendUnavailable, ConfigError
from tests.support.triton import TOKEN_HEADER, TritonServer, serving_model

pytestmark = pytest.mark.timeout(120)

YUNET = Path(__file__).resolve().parents[2] / "assets" / "models" / "yunet" / "face_detection_yunet_2023mar.onnx"
AXES = with_batch_axis({"input": (2, 3)}, "input")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    model = serving_model(YUNET, tmp_path_factory.mktemp("m"), AXES, "yunet")
    with TritonServer({"yunet": model}) as triton:
        yield triton


@pytest.fixture(scope="module")
def reference() -> OnnxRuntimeEngine:
    return OnnxRuntimeEngine(str(YUNET), threads=1, dynamic_axes=AXES)


def _engine(server: TritonServer, **settings: object) -> TritonEngine:
    config = TritonConfig(url=server.url, model="yunet", headers={TOKEN_HEADER: server.token}, **settings)  # type: ignore[arg-type]
    return TritonEngine(config, "yunet", AXES)


def _registered(server: TritonServer) -> list[str]:
    client = grpcclient.InferenceServerClient(server.url)
    try:
        status = client.get_system_shared_memory_status(headers=server.headers, as_json=True)
        return sorted(region["name"] for region in status.get("regions", {}).values())
    finally:
        client.close()


def _same(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> None:
    assert sorted(ours) == sorted(theirs)
    for name, value in theirs.items():
        np.testing.assert_allclose(ours[name], value, rtol=0, atol=1e-5, err_msg=name)


def test_socket_and_shared_memory_give_onnxruntimes_outputs(
    server: TritonServer, reference: OnnxRuntimeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    rng = np.random.default_rng(0)
    frames = rng.random((4, 3, 160, 192), dtype=np.float32)
    expected = reference.infer({"input": frames})
    plain = _engine(server)
    assert [t.name for t in plain.inputs] == ["input"] and plain.inputs[0].shape == (None, 3, None, None)
    assert plain.max_batch == 8
    _same(plain.infer({"input": frames}), expected)
    plain.close()

    shm = _engine(server, shared_memory="system", in_flight=2)
    _same(shm.infer({"input": frames}), expected)  # outputs learned (socket), inputs in regions
    first = _registered(server)
    assert len([n for n in first if "-in-" in n]) == 2  # one input region per lane
    _same(shm.infer({"input": frames}), expected)  # outputs in regions now
    regions = _registered(server)
    assert set(first) <= set(regions) and len([n for n in regions if "-out-" in n]) == 2 * 12
    _same(shm.infer({"input": frames}), expected)
    assert _registered(server) == regions  # registered once, reused
    one = shm.infer({"input": frames[:1]})
    _same(one, {k: v[:1] for k, v in expected.items()})

    for lane in shm.regions or ():  # outputs that outgrow what was learned: learned again
        lane.output_bytes = {key: 4 for key in lane.output_bytes}
    with caplog.at_level("INFO", logger="framewire.engines.triton"):
        _same(shm.infer({"input": frames}), expected)
    assert "learning their sizes again" in caplog.text
    keys = [r.handle._shm_key for lane in shm.regions or () for r in lane.regions.values()]
    shm.close()
    assert _registered(server) == []
    assert not any(os.path.exists("/dev/shm" + key) for key in keys)


def test_tls_with_the_servers_ca(tmp_path: Path, reference: OnnxRuntimeEngine) -> None:
    """gRPC over TLS: a self-signed certificate for 127.0.0.1, trusted through root_certificates."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    model = serving_model(YUNET, tmp_path, AXES, "yunet")
    with TritonServer({"yunet": model}, tls=(cert, key)) as server:
        engine = _engine(server, ssl=True, root_certificates=str(cert))
        frame = np.random.default_rng(1).random((1, 3, 64, 96), dtype=np.float32)
        _same(engine.infer({"input": frame}), reference.infer({"input": frame}))
        engine.close()
        with pytest.raises(BackendUnavailable):  # the system's CAs do not know it: no answer, as if down
            _engine(server, ssl=True)
        with pytest.raises(ConfigError, match="engine.triton.root_certificates: cannot read"):
            _engine(server, ssl=True, root_certificates=str(tmp_path / "missing.pem"))
