"""`engine.backend: triton` through the CLI, against a real Triton (pytriton's tritonserver serving
the same ONNX files around ONNX Runtime, tests/support/triton.py): the same boxes as ONNX Runtime in
the daemon, over the socket and through shared memory; an outage in the middle of a paced `block`
job loses nothing and shows in /readyz and /metrics; two daemons get batched together by Triton;
start-up errors in one line."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.helpers import ROOT, iou, read_jsonl, run_cli, start_cli
from tests.e2e.test_http import get
from tests.support import clips
from tests.support.ports import free_port
from tests.support.triton import TOKEN_HEADER, TritonServer, serving_model

pytestmark = pytest.mark.timeout(180)

FACE = "face_detection_yunet_2023mar"
YOLOX = "common_det"


def _config(name: str, tmp: Path, engine: dict[str, Any] | None = None, **source: Any) -> dict[str, Any]:
    """A shipped config (configs/NAME.yaml) writing one JSONL (and a video) into `tmp`."""
    config = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    config["sources"] = [{**config["sources"][0], **source}]
    config["outputs"] = [{"kind": "jsonl", "path": str(tmp / "{source_id}.jsonl")}]
    if engine is not None:
        config["engine"] = {**config["engine"], **engine}
    return config


def _run(config: dict[str, Any], tmp: Path, label: str) -> list[dict[str, Any]]:
    """Run the config through the CLI (exit 0 expected); its JSONL records."""
    out = tmp / label
    out.mkdir()
    config = json.loads(json.dumps(config).replace(str(tmp / "{source_id}"), str(out / "{source_id}")))
    path = out / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    done = run_cli("run", "-c", str(path), timeout=150)
    assert done.returncode == 0, done.stderr[-2000:]
    (jsonl,) = out.glob("*.jsonl")
    return read_jsonl(jsonl)


def _triton(url: str, shared_memory: str = "none", **more: Any) -> dict[str, Any]:
    return {"backend": "triton", "triton": {"url": url, "shared_memory": shared_memory,
            "headers": {TOKEN_HEADER: "${FW_TRITON_TOKEN}"}, **more}}  # fmt: skip


def _serving(tmp: Path) -> dict[str, Path]:
    """Both shipped models as the daemon loads them (dynamic height/width for YuNet's `input_size:
    auto`, a dynamic batch), under their file names: the names the backend looks for by default."""
    from framewire.app.compose.model import build_task
    from framewire.config import load_config
    from framewire.engines.batch_rewrite import with_batch_axis

    models = {}
    for config_name, name in (("default", FACE), ("yolox", YOLOX)):
        config = load_config(ROOT / "configs" / f"{config_name}.yaml")
        task = build_task(config)
        axes = with_batch_axis(task.dynamic_axes(), task.input_name)
        models[name] = serving_model(ROOT / config.model.path, tmp, axes, name)
    return models


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _serving(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def server(models: dict[str, Path]) -> Iterator[TritonServer]:
    with TritonServer(models) as triton:
        yield triton


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FW_TRITON_TOKEN", "framewire-test-token")  # the header comes from ${VAR}


def _assert_same_boxes(ours: list[dict[str, Any]], reference: list[dict[str, Any]]) -> int:
    """Every frame, the same detections as the reference, each box at IoU >= 0.99."""
    assert [r["seq"] for r in ours] == [r["seq"] for r in reference]
    boxes = 0
    for mine, theirs in zip(ours, reference, strict=True):
        a, b = mine["results"]["detections"], theirs["results"]["detections"]
        assert len(a) == len(b), f"frame {mine['seq']}: {len(a)} detections, ONNX Runtime gives {len(b)}"
        for found, expected in zip(a, b, strict=True):
            assert found.get("label") == expected.get("label")
            assert iou(found["box"], expected["box"]) >= 0.99, (mine["seq"], found["box"], expected["box"])
            boxes += 1
    return boxes


@pytest.mark.parametrize("job, frames", [("default", 40), ("yolox", 8)])
def test_same_boxes_as_onnxruntime_over_grpc_and_shared_memory(
    job: str, frames: int | None, server: TritonServer, tmp_path: Path
) -> None:
    source = {"max_frames": frames}
    reference = _run(_config(job, tmp_path, **source), tmp_path, "onnxruntime")
    over_grpc = _run(_config(job, tmp_path, _triton(server.url), **source), tmp_path, "grpc")
    over_shm = _run(_config(job, tmp_path, _triton(server.url, "system"), **source), tmp_path, "shm")
    assert len(reference) == frames
    assert _assert_same_boxes(over_grpc, reference) > 0
    assert _assert_same_boxes(over_shm, reference) > 0


def _metrics(url: str) -> dict[str, Any]:
    status, text = get(url + "/metrics")
    assert status == 200
    return {f.name: f for f in text_string_to_metric_families(text)}


def _sample(families: dict[str, Any], family: str, sample: str | None = None) -> list[float]:
    found = families.get(family)
    return [s.value for s in found.samples if s.name == (sample or family)] if found else []


def _written(families: dict[str, Any]) -> float:
    frames = families.get("framewire_frames")
    return sum(s.value for s in frames.samples if s.labels.get("stage") == "output") if frames else 0.0


def _wait(predicate: Any, proc: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"the daemon exited ({proc.returncode}) while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.timeout(240)
def test_triton_killed_mid_job_loses_no_frame_and_shows_in_readyz_and_metrics(
    models: dict[str, Path], tmp_path: Path
) -> None:
    clip = clips.make_clip(tmp_path / "clip.mp4", width=160, height=120, frames=120, fps=10)  # 12 s paced
    port = free_port()
    with TritonServer({FACE: models[FACE]}) as triton:
        engine = _triton(triton.url, "system", stats_interval_s=0.5, retry_max_s=0.5)
        config = _config("default", tmp_path, engine, id="clip", uri=str(clip), realtime=True)
        config["outputs"].append({"kind": "video_file", "path": str(tmp_path / "{source_id}.mp4")})
        config["http"] = {"enabled": True, "port": port}
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
        proc = start_cli("run", "-c", str(tmp_path / "job.yaml"), env_extra={"FW_TRITON_TOKEN": triton.token})
        url = f"http://127.0.0.1:{port}"
        try:
            _wait(lambda: get(url + "/readyz")[0] == 200, proc, "ready")
            _wait(lambda: _written(_metrics(url)) >= 25, proc, "25 frames written")  # of 120
            before = _metrics(url)
            assert _sample(before, "framewire_backend_queue_seconds", "framewire_backend_queue_seconds_total")
            assert _sample(before, "framewire_backend_up") == [1.0, 1.0]  # both infer workers, from their start
            triton.kill()
            killed = time.monotonic()
            _wait(lambda: "does not answer" in get(url + "/readyz")[1], proc, "not ready", 30)
            status, body = get(url + "/readyz")
            assert status == 503 and json.loads(body)["ready"] is False
            families = _metrics(url)
            assert 0.0 in _sample(families, "framewire_backend_up")
            assert sum(_sample(families, "framewire_backend_outages", "framewire_backend_outages_total")) >= 1
            time.sleep(max(0.0, 10.0 - (time.monotonic() - killed)))  # ~10 s without Triton
            triton.start()
            _wait(lambda: get(url + "/readyz")[0] == 200, proc, "ready again", 60)  # one worker answers
            _wait(lambda: set(_sample(_metrics(url), "framewire_backend_up")) == {1.0}, proc, "every worker", 30)
            assert _written(_metrics(url)) < 120  # the outage was in the middle of the job
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    records = read_jsonl(tmp_path / "clip.jsonl")
    assert [r["seq"] for r in records] == list(range(120))
    assert clips.count_frames(tmp_path / "clip.mp4") == 120
    assert "does not answer" in err and "answers again" in err


def test_two_daemons_are_batched_together_by_triton(models: dict[str, Path], tmp_path: Path) -> None:
    # One request in flight per daemon (one infer process, no batching of its own): a batch of two
    # on the server can only hold a frame of each.
    with TritonServer({FACE: models[FACE]}, delay_us=20000) as triton:
        engine = {**_triton(triton.url), "processes_per_device": 1}
        procs = []
        for i in range(2):
            config = _config("default", tmp_path / f"d{i}", engine, max_frames=60)
            (tmp_path / f"d{i}").mkdir()
            (tmp_path / f"d{i}" / "job.yaml").write_text(yaml.safe_dump(config))
            procs.append(start_cli("run", "-c", str(tmp_path / f"d{i}" / "job.yaml")))
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err[-2000:]
        (stats,) = triton.statistics(FACE).model_stats
    sizes = {b.batch_size: b.compute_infer.count for b in stats.batch_stats}
    assert stats.inference_count == 120
    assert max(sizes) == 2 and sizes[2] > 0, sizes
    for i in range(2):
        assert len(read_jsonl(tmp_path / f"d{i}" / "carphone.jsonl")) == 60


def test_start_up_errors_are_one_line(server: TritonServer, tmp_path: Path) -> None:
    cases = [
        (_triton(f"127.0.0.1:{free_port()}", connect_timeout_s=1), 1, "engine.triton.url: no Triton answers at"),
        (_triton(server.url, model="nope"), 2, "engine.triton.model: Triton at"),
        (_triton(server.url, model=YOLOX), 2, f"triton {YOLOX}@{server.url}: face_detection expects"),
    ]
    for i, (engine, code, message) in enumerate(cases):
        path = tmp_path / f"bad{i}.yaml"
        path.write_text(yaml.safe_dump(_config("default", tmp_path, engine)))
        done = run_cli("run", "-c", str(path), timeout=60)
        assert done.returncode == code, done.stderr[-1500:]
        lines = [line for line in done.stderr.splitlines() if "error" in line.lower() or message in line]
        assert any(message in line for line in lines), done.stderr[-1500:]
        assert "Traceback" not in done.stderr


def test_a_cascades_secondary_models_run_on_triton_too(tmp_path: Path) -> None:
    """The OCR job: text detection, then text recognition and the angle classifier on its crops, all
    three on Triton (the angle model under a name of its own: engine.triton.secondary)."""
    from framewire.app.compose.cascade import build_secondaries
    from framewire.app.compose.model import build_task
    from framewire.config import load_config
    from framewire.engines.batch_rewrite import with_batch_axis

    config = load_config(ROOT / "configs" / "ocr.yaml")
    task = build_task(config)
    served = {Path(config.model.path).stem: (config.model.path, with_batch_axis(task.dynamic_axes(), task.input_name))}
    for item, secondary in zip(config.secondary, build_secondaries(config), strict=True):
        name = "ocr_angle" if item.name == "angle" else Path(item.path).stem
        axes = with_batch_axis(secondary.task.dynamic_axes(), secondary.task.input_name)
        served[name] = (item.path, axes)
    models = {name: serving_model(ROOT / path, tmp_path, axes, name) for name, (path, axes) in served.items()}
    one = {"processes_per_device": 1}  # two frames: one infer process each side is enough
    with TritonServer(models) as triton:
        reference = _run(_config("ocr", tmp_path, one, max_frames=2), tmp_path, "onnxruntime")
        engine = {**_triton(triton.url, secondary={"angle": "ocr_angle"}), **one}
        ours = _run(_config("ocr", tmp_path, engine, max_frames=2), tmp_path, "triton")
        (stats,) = triton.statistics("ocr_angle").model_stats
    assert _assert_same_boxes(ours, reference) > 0
    texts = [[d.get("attributes") for d in r["results"]["detections"]] for r in ours]
    assert texts == [[d.get("attributes") for d in r["results"]["detections"]] for r in reference]
    assert any(a and a.get("text", {}).get("text") for frame in texts for a in frame)
    assert stats.inference_count > 0  # the angle model ran on Triton, under its own name
