"""The deployment files agree with the daemon: the job they carry validates, the probes they call
exist, the frame pool gets its /dev/shm, a stop has time to drain, and systemd takes the unit.
(`make check-deploy` adds the schemas: Kubernetes, compose-spec, hadolint.)"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from framewire.pipeline.ops import control
from framewire.config import TransportConfig, load_config

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DRAIN_S = TransportConfig().shutdown_timeout_s


def manifests() -> dict[str, Any]:
    found = {}
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        found[doc["kind"]] = doc
    return found


def test_kubernetes_job_validates_and_the_pod_serves_it() -> None:
    docs = manifests()
    assert {"ConfigMap", "Secret", "Deployment", "Service", "PersistentVolumeClaim", "Kustomization"} <= set(docs)
    secret = docs["Secret"]["stringData"]
    config = load_config("job.yaml", text=docs["ConfigMap"]["data"]["job.yaml"], environ=secret)
    assert config.http.enabled and config.http.token == secret["FRAMEWIRE_TOKEN"]
    assert "viewer:change-me@" in config.sources[0].uri  # the camera's credentials came from the Secret
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"][:3] == ["run", "-c", "/etc/framewire/job.yaml"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": config.http.port, "results": int(config.outputs[2].endpoint.rsplit(":", 1)[1])}  # type: ignore[union-attr]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "/livez" in control.__doc__ and "/readyz" in control.__doc__  # type: ignore[operator]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert pod["terminationGracePeriodSeconds"] > DRAIN_S


def test_compose_service_validates_and_has_shared_memory() -> None:
    service = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["framewire"]
    args = service["command"]
    assert args[:3] == ["run", "-c", "/opt/framewire/configs/default.yaml"]
    overrides = [a.replace("$$", "$") for a in args[4::2]]  # compose writes $$ for a literal $
    config = load_config(ROOT / "configs" / "default.yaml", overrides, environ={"FRAMEWIRE_TOKEN": "t"})
    assert config.http.token == "t" and config.outputs[0].segment_s == 300  # type: ignore[union-attr]
    assert service["shm_size"] == "1gb"
    assert int(service["stop_grace_period"].rstrip("s")) > DRAIN_S


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

