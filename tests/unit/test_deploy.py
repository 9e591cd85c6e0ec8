"""The deployment files agree with the daemon and with each other: the jobs they carry validate, the
probes they call exist, the frame pool gets its /dev/shm, a stop has time to drain, the names one
manifest gives another (Services, claims, the Redis and Triton addresses) match, the Triton model
repository their init steps write is a real one, and the first run does not trip over file owners,
relative paths or loopback binds. (`make check-deploy` adds the schemas: Kubernetes, compose-spec,
hadolint, yamllint, systemd.)"""

from __future__ import annotations

import copy
import http.server
import json
import re
import shutil
import subprocess
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from framewire import cli
from framewire.config import Config, EngineConfig, TransportConfig, load_config
from framewire.pipeline.ops import control

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBE = DEPLOY / "kubernetes"
DRAIN_S = TransportConfig().shutdown_timeout_s
YUNET = "face_detection_yunet_2023mar"


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    """Every Kubernetes object of deploy/kubernetes, by (kind, name)."""
    found = {}
    for path in sorted(KUBE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            found[(doc["kind"], doc.get("metadata", {}).get("name", path.name))] = doc
    return found


def pending(raw: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """The job less the sections whose schema another branch of issue 19 adds (`fleet:`, the Triton
    backend), while this checkout lacks it. Once they are merged nothing is left out, and the whole
    job validates."""
    raw, left_out = copy.deepcopy(raw), set()
    if "fleet" not in Config.model_fields and "fleet" in raw:
        raw.pop("fleet")
        left_out.add("fleet")
    engine = raw.get("engine", {})
    if "triton" not in EngineConfig.model_fields and engine.get("backend") == "triton":
        engine.pop("triton", None)
        engine["backend"] = "auto"
        left_out.add("engine.triton")
    return raw, left_out


def pending_overrides(overrides: list[str]) -> list[str]:
    """As `pending`, for `--set` overrides."""
    if "triton" in EngineConfig.model_fields:
        return overrides
    return [o for o in overrides if not o.startswith(("engine.triton.", "engine.backend=triton"))]


def kube_job() -> tuple[dict[str, Any], dict[str, str]]:
    docs = manifests()
    return yaml.safe_load(docs[("ConfigMap", "framewire-job")]["data"]["job.yaml"]), docs[("Secret", "framewire")]["stringData"]


def on_this_machine(raw: dict[str, Any]) -> dict[str, Any]:
    """The job with the image's /opt/framewire paths pointing at the checkout."""
    return yaml.safe_load(yaml.safe_dump(raw).replace("/opt/framewire/", f"{ROOT}/"))


def test_kubernetes_job_validates_and_the_fleet_serves_it() -> None:
    raw, secret = kube_job()
    known, left_out = pending(raw)
    config = load_config("job.yaml", text=yaml.safe_dump(known), environ=secret)
    assert left_out <= {"fleet", "engine.triton"}
    assert config.http.enabled and config.http.token == secret["FRAMEWIRE_TOKEN"]
    assert "viewer:change-me@" in config.sources[0].uri  # type: ignore[attr-defined]  # the camera's credentials came from the Secret
    docs = manifests()
    sts = docs[("StatefulSet", "framewire")]
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"][:3] == ["run", "-c", "/etc/framewire/job.yaml"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": config.http.port, "results": int(config.outputs[2].endpoint.rsplit(":", 1)[1])}  # type: ignore[attr-defined]
    assert config.outputs[2].endpoint.startswith("tcp://0.0.0.0:")  # type: ignore[attr-defined]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "/livez" in control.__doc__ and "/readyz" in control.__doc__  # type: ignore[operator]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert pod["terminationGracePeriodSeconds"] > DRAIN_S
    # Replicas: N from the StatefulSet for --shard auto; the replica id is the pod's hostname.
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FRAMEWIRE_REPLICAS"] == str(sts["spec"]["replicas"]) and sts["spec"]["replicas"] > 1
    assert "replica" not in raw["fleet"]
    # The recordings are one volume every replica mounts: a taken-over source writes where it did.
    claim = docs[("PersistentVolumeClaim", volumes[mounts["/data"]]["persistentVolumeClaim"]["claimName"])]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert all(o.path.startswith("/data/") for o in config.outputs if hasattr(o, "path"))  # type: ignore[attr-defined]


def test_kubernetes_objects_name_each_other_consistently() -> None:
    docs = manifests()
    for (kind, name), doc in docs.items():
        if kind in ("StatefulSet", "Deployment"):
            labels = doc["spec"]["template"]["metadata"]["labels"]
            assert doc["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
            pod = doc["spec"]["template"]["spec"]
            for volume in pod.get("volumes", []):
                if "persistentVolumeClaim" in volume:
                    assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in docs
                if "configMap" in volume:
                    assert ("ConfigMap", volume["configMap"]["name"]) in docs
            for container in pod["containers"] + pod.get("initContainers", []):
                for source in container.get("envFrom", []):
                    assert ("Secret", source["secretRef"]["name"]) in docs
        if kind == "Service":
            selected = [d for d in docs.values() if d["kind"] in ("StatefulSet", "Deployment")
                        and doc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]  # fmt: skip
            assert len(selected) == 1, name
            ports = {p["name"] for c in selected[0]["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
            assert {p["targetPort"] for p in doc["spec"]["ports"]} <= ports, name
    headless = docs[("Service", docs[("StatefulSet", "framewire")]["spec"]["serviceName"])]
    assert headless["spec"]["clusterIP"] == "None"
    listed = set(docs[("Kustomization", "kustomization.yaml")]["resources"])
    assert listed == {p.name for p in KUBE.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}


def service_port(name: str, port_name: str) -> int:
    [port] = [p["port"] for p in manifests()[("Service", name)]["spec"]["ports"] if p["name"] == port_name]
    return int(port)


def test_fleet_store_is_the_redis_service_with_the_secrets_password() -> None:
    raw, secret = kube_job()
    store = urlsplit(raw["fleet"]["store"])
    assert (store.scheme, store.hostname, store.port) == ("redis", "framewire-redis", service_port("framewire-redis", "redis"))
    assert store.password == "${REDIS_PASSWORD}" and "REDIS_PASSWORD" in secret
    redis = manifests()[("Deployment", "framewire-redis")]["spec"]["template"]["spec"]["containers"][0]
    assert redis["args"][redis["args"].index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert redis["env"][0]["valueFrom"]["secretKeyRef"] == {"name": "framewire", "key": "REDIS_PASSWORD"}
    assert redis["args"][redis["args"].index("--appendonly") + 1] == "yes"  # sources added at run time survive a restart


def test_triton_runs_on_a_gpu_node_and_its_init_container_writes_the_jobs_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw, secret = kube_job()
    host, port = raw["engine"]["triton"]["url"].rsplit(":", 1)
    assert raw["engine"]["backend"] == "triton" and (host, int(port)) == ("framewire-triton", service_port("framewire-triton", "grpc"))
    pod = manifests()[("Deployment", "framewire-triton")]["spec"]["template"]["spec"]
    [triton] = pod["containers"]
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == 1 and pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert triton["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    [init] = pod["initContainers"]
    assert init["args"][:3] == ["triton-repo", "-c", "/etc/framewire/job.yaml"]
    repo_in_pod = init["args"][init["args"].index("-o") + 1]
    mounts = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
    assert f"--model-repository={repo_in_pod}" in triton["args"]
    assert {m["name"] for m in triton["volumeMounts"] if m["mountPath"] == repo_in_pod} == {mounts[repo_in_pod]}
    # The init container's command, run here on the same job: the repository Triton would load.
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(on_this_machine(pending(raw)[0])))
    for key, value in secret.items():
        monkeypatch.setenv(key, value)
    args = [str(job) if a == "/etc/framewire/job.yaml" else str(tmp_path / "models") if a == repo_in_pod else a
            for a in init["args"]]  # fmt: skip
    assert cli.main(args) == 0
    name = raw["engine"]["triton"].get("model", YUNET)  # framewire's default name: the file's stem
    config = text_format.Parse((tmp_path / "models" / name / "config.pbtxt").read_text(), mc.ModelConfig())
    [group] = config.instance_group
    assert (group.kind, group.count, list(group.gpus)) == (mc.ModelInstanceGroup.KIND_GPU, raw["engine"]["processes_per_device"], [0])
    assert config.platform == "onnxruntime_onnx" and config.max_batch_size >= 8


def compose(name: str = "compose.yaml") -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / name).read_text())


def overrides(command: list[str]) -> list[str]:
    return [command[i + 1].replace("$$", "$") for i, arg in enumerate(command) if arg == "--set"]  # $$: a literal $


def test_compose_service_validates_and_has_shared_memory() -> None:
    service = compose()["services"]["framewire"]
    args = service["command"]
    assert args[:3] == ["run", "-c", "/opt/framewire/configs/default.yaml"]
    sets = overrides(args)
    config = load_config(ROOT / "configs" / "default.yaml", pending_overrides(sets), environ={"FRAMEWIRE_TOKEN": "t"})
    assert config.http.token == "t" and config.outputs[0].segment_s == 300  # type: ignore[attr-defined]
    assert config.outputs[2].endpoint == "tcp://0.0.0.0:5560"  # type: ignore[attr-defined]
    assert service["shm_size"] == "1gb"
    assert int(service["stop_grace_period"].rstrip("s")) > DRAIN_S
    # framewire asks the triton service for the model the `models` service wrote.
    assert "engine.backend=triton" in sets and "engine.triton.url=triton:8001" in sets
    assert service["depends_on"]["triton"] == {"condition": "service_healthy"}


def test_compose_output_folder_is_the_checkouts_and_belongs_to_the_user_that_writes_it() -> None:
    services = compose()["services"]
    [mount] = services["framewire"]["volumes"]
    host, container = mount.split(":")[:2]
    assert (DEPLOY / host).resolve() == ROOT / "out"  # Compose resolves against deploy/, the file's folder
    assert container == "/data/out"  # the image's working folder is /data: `out/...` paths land here
    # The one-shot `out` service creates that folder (Docker would create it as root's) and gives it
    # to the user framewire runs as.
    out = services["out"]
    assert out["volumes"] == [mount] and out["user"] == "0:0"
    uid, gid = re.fullmatch(r"(\$\{[^}]*\}):(\$\{[^}]*\})", services["framewire"]["user"]).groups()  # type: ignore[union-attr]
    entrypoint = out["entrypoint"]
    assert entrypoint[:2] == ["install", "-d"] and entrypoint[-1] == container
    assert (entrypoint[entrypoint.index("-o") + 1], entrypoint[entrypoint.index("-g") + 1]) == (uid, gid)
    assert uid == "${FRAMEWIRE_UID:-10001}" and gid == "${FRAMEWIRE_GID:-10001}"  # the image's user by default
    assert services["framewire"]["depends_on"]["out"] == {"condition": "service_completed_successfully"}


def test_compose_models_service_writes_the_repository_triton_serves(tmp_path: Path) -> None:
    services = compose()["services"]
    command = services["models"]["command"]
    [models_mount] = services["models"]["volumes"]
    volume, repo = models_mount.split(":")[:2]
    assert f"{volume}:{repo}:ro" in services["triton"]["volumes"]
    assert f"--model-repository={repo}" in services["triton"]["command"]
    assert services["triton"]["depends_on"]["models"] == {"condition": "service_completed_successfully"}
    args = [str(tmp_path) if a == repo else a.replace("/opt/framewire/", f"{ROOT}/") for a in command]
    assert cli.main(args) == 0
    config = text_format.Parse((tmp_path / YUNET / "config.pbtxt").read_text(), mc.ModelConfig())
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    gpu = compose("compose.gpu.yaml")["services"]
    assert gpu["models"]["command"] == [*command, "--instances", "gpu"]
    [device] = gpu["triton"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]


@pytest.fixture
def health_server() -> Iterator[tuple[int, list[int]]]:
    """A local HTTP server answering /v2/health/ready with the status the test sets."""
    status = [200]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status[0] if self.path == "/v2/health/ready" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], status
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_compose_triton_healthcheck_tells_ready_from_not_ready(health_server: tuple[int, list[int]]) -> None:
    port, status = health_server
    test = compose()["services"]["triton"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "bash", "-c"]
    script = test[3].replace("/127.0.0.1/8000", f"/127.0.0.1/{port}")
    assert script != test[3]
    assert subprocess.run(["bash", "-c", script], timeout=10).returncode == 0
    status[0] = 503
    assert subprocess.run(["bash", "-c", script], timeout=10).returncode != 0


def unit() -> dict[str, str]:
    entries = {}
    for line in (DEPLOY / "framewire.service").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            entries[key] = value
    return entries


def test_systemd_unit_stops_the_whole_group_and_waits_for_the_drain() -> None:
    entries = unit()
    assert "KillMode" not in entries  # the default, control-group: SIGTERM to every process at once
    assert float(entries["TimeoutStopSec"]) > DRAIN_S
    assert "run -c /etc/framewire/job.yaml" in entries["ExecStart"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    # verify insists that ExecStart's program exists: this machine has no /opt/framewire.
    text = (DEPLOY / "framewire.service").read_text()
    (tmp_path / "framewire.service").write_text(text.replace("/opt/framewire/.venv/bin/framewire", shutil.which("true") or "/bin/true"))
    done = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "framewire.service")], capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="systemd-sysusers is not installed")
def test_sysusers_file_creates_the_units_user_and_group(tmp_path: Path) -> None:
    # Installed as the unit's comment says, into a scratch root: the passwd and group it writes.
    conf = tmp_path / "etc" / "sysusers.d" / "framewire.conf"
    conf.parent.mkdir(parents=True)
    shutil.copyfile(DEPLOY / "framewire.sysusers", conf)
    done = subprocess.run(["systemd-sysusers", f"--root={tmp_path}"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    entries = unit()
    passwd = {line.split(":")[0]: line.split(":") for line in (tmp_path / "etc" / "passwd").read_text().splitlines()}
    groups = {line.split(":")[0] for line in (tmp_path / "etc" / "group").read_text().splitlines()}
    user = passwd[entries["User"]]
    assert entries["Group"] in groups and user[5] == "/var/lib/framewire" and user[6].endswith("nologin")
    assert f"/var/lib/{entries['StateDirectory']}" == user[5] == entries["WorkingDirectory"]
    assert "deploy/framewire.sysusers /etc/sysusers.d/framewire.conf" in (DEPLOY / "framewire.service").read_text()


def dockerfile_cmd(name: str) -> list[str]:
    [line] = [line for line in (DEPLOY / name).read_text().splitlines() if line.startswith("CMD ")]
    return list(json.loads(line.removeprefix("CMD ")))


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.gpu"])
def test_images_install_framewire_and_ship_the_configs(name: str) -> None:
    text = (DEPLOY / name).read_text()
    assert "COPY configs /opt/framewire/configs" in text and "COPY assets /opt/framewire/assets" in text
    assert "--require-hashes -r locks/" in text
    assert "--shm-size" in text
    copied = {line.split()[1] for line in text.splitlines() if line.startswith("COPY ") and len(line.split()) == 3}
    folders = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
    assert folders == {"framewire", "pipeline", "stages", "engines"}
    assert folders <= copied  # every folder the wheel is built from goes in
    # /data/out is the user's: a named volume mounted there starts writable.
    assert "install -d -o 10001 -g 10001 /data/out" in text and "USER 10001:10001" in text
    assert '--user "$(id -u):$(id -g)"' in text  # a bind mount: run as the host folder's owner


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.gpu"])
def test_image_default_job_publishes_on_the_exposed_port(name: str) -> None:
    cmd = dockerfile_cmd(name)
    assert cmd[:3] == ["run", "-c", "/opt/framewire/configs/default.yaml"]
    config = load_config(ROOT / "configs" / "default.yaml", overrides(cmd))
    [zmq] = [o for o in config.outputs if o.kind == "zmq"]
    host, port = zmq.endpoint.removeprefix("tcp://").rsplit(":", 1)  # type: ignore[attr-defined]
    [expose] = [line for line in (DEPLOY / name).read_text().splitlines() if line.startswith("EXPOSE ")]
    assert host == "0.0.0.0" and port in expose.split()[1:]
