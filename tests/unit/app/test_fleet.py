"""The `fleet:` section: static shards (I/N, or auto from a StatefulSet pod's name), and what a replica
of a dynamic fleet is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from framewire.app import fleet
from framewire.config import load_config
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.ops.rendezvous import shard_of

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "configs" / "default.yaml"
CLIP = str(ROOT / "assets/videos/carphone_pristine.mp4")
SIX = "sources=[" + ", ".join(f"{{id: cam{i}, uri: '{CLIP}'}}" for i in range(6)) + "]"
OUTPUTS = "outputs=[{kind: jsonl, path: 'out/{source_id}.jsonl'}]"


def config(*overrides: str):  # type: ignore[no-untyped-def]
    return load_config(DEFAULT, [SIX, OUTPUTS, *overrides])


def test_a_static_shard_keeps_its_own_sources_and_the_shards_cover_each_source_once() -> None:
    seen: list[str] = []
    for index in range(3):
        part = fleet.local_part(config(f"fleet.shard={index}/3"))
        ids = [s.id for s in part.sources]
        assert ids == [f"cam{i}" for i in range(6) if shard_of(f"cam{i}", index, 3)]
        seen += ids
    assert sorted(seen) == [f"cam{i}" for i in range(6)]
    assert fleet.local_part(config()).sources == config().sources  # not sharded: every source


def test_auto_takes_the_ordinal_from_the_hostname_and_the_count_from_the_environment() -> None:
    auto = config("fleet.shard=auto")
    env = {"FRAMEWIRE_REPLICAS": "4"}
    assert fleet.shard(auto, "framewire-2", env) == (2, 4)
    assert fleet.shard(auto, "framewire-0.framewire.default.svc.cluster.local", env) == (0, 4)
    with pytest.raises(ConfigError, match=r"^fleet.shard: auto: the hostname 'laptop' does not end in -<ordinal>"):
        fleet.shard(auto, "laptop", env)
    with pytest.raises(ConfigError, match=r"^fleet.shard: auto: set FRAMEWIRE_REPLICAS .* \(got ''\)"):
        fleet.shard(auto, "framewire-1", {})
    with pytest.raises(ConfigError, match=r"^fleet.shard: auto: ordinal 4 of 'framewire-4' is not below FRAMEWIRE_REPLICAS=4"):
        fleet.shard(auto, "framewire-4", env)


@pytest.mark.parametrize(("override", "error"), [
    ("fleet.shard=3/3", "I must be 0 to N-1"),
    ("fleet.shard=one", "expected I/N (e.g. 0/3) or auto"),
    ("fleet.store=http://redis:6379", "expected a redis://, rediss:// or unix:// URL"),
    ("fleet.lease_s=0.1", "greater than or equal to 0.5"),
])  # fmt: skip
def test_bad_fleet_settings_are_refused_naming_the_key(override: str, error: str) -> None:
    with pytest.raises(ConfigError, match="fleet") as refused:
        config(override)
    assert error in str(refused.value)


def test_shard_and_store_do_not_go_together() -> None:
    with pytest.raises(ConfigError, match="not both"):
        config("fleet.shard=0/2", "fleet.store=redis://127.0.0.1:6379/0")


def test_a_replica_of_a_dynamic_fleet_needs_http_and_seeds_the_config_sources() -> None:
    with pytest.raises(ConfigError, match=r"fleet.store: needs http.enabled: true"):
        config("fleet.store=redis://127.0.0.1:6379/0")
    got = fleet.settings(config("fleet.store=redis://127.0.0.1:6379/0", "http.enabled=true", "fleet.replica=r1",
                                "fleet.lease_s=3"))  # fmt: skip
    assert got is not None and (got.replica, got.lease_s, got.namespace) == ("r1", 3.0, "framewire")
    assert [sid for sid, _ in got.seed] == [f"cam{i}" for i in range(6)]
    assert got.seed[0][1]["uri"] == CLIP
    assert fleet.settings(config()) is None


def test_a_file_taken_over_resumes_and_a_live_source_connects_again() -> None:
    stream = {"id": "door", "uri": "rtsp://127.0.0.1:8554/live"}
    assert fleet.resumed(stream) == stream
    assert fleet.resumed({"id": "x", "urii": "typo"}) == {"id": "x", "urii": "typo"}  # refused where it starts
    item = {"id": "cam0", "uri": CLIP}
    from framewire.config.sources import SourceConfig

    assert "resume" in SourceConfig.model_fields
    assert fleet.resumed(item) == {**item, "resume": True}
    # Outputs that cannot be resumed (an mp4 recording): the file starts again, and the log says why.
    assert fleet.resumed(item, problem="outputs.0.container: mp4 cannot be resumed") == item
