"""`fleet:`: this daemon as one replica of several that share the sources out (docs: Guides, Fleet)."""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from framewire.config.base import _Model

SHARD = re.compile(r"^(auto|(\d{1,4})/(\d{1,4}))$")


class FleetConfig(_Model):
    """Static sharding (`shard`) or a coordination store (`store`); neither: one daemon runs every source."""

    shard: str | None = Field(
        default=None,
        description="Static sharding: `I/N` runs only the sources that rendezvous hashing gives replica "
        "I of N (0-based); `auto` takes I from the hostname's `-<n>` suffix (a StatefulSet's pod "
        "name) and N from the FRAMEWIRE_REPLICAS environment variable. `run --shard` sets it.",
    )
    store: str | None = Field(
        default=None,
        description="Dynamic fleet: the Redis that holds the wanted sources and a lease per source "
        "(redis://[:password@]host:port/db, rediss:// with TLS, unix:///path.sock). Each source runs "
        "on one replica; a dead replica's sources are taken over. Needs http.enabled.",
    )
    replica: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="This replica's id in the store, unique among the live ones; null: the hostname.",
    )
    lease_s: float = Field(
        default=10.0,
        ge=0.5,
        le=3600,
        description="A replica renews its leases every third of this; one silent this long (dead, or "
        "cut off from the store) has its sources taken over by the others.",
    )
    namespace: str = Field(
        default="framewire",
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="Prefix of the store's keys: fleets that share one Redis each need their own.",
    )

    @model_validator(mode="after")
    def _one_way(self) -> FleetConfig:
        if self.shard is not None:
            found = SHARD.match(self.shard)
            if not found:
                raise ValueError(f"shard: expected I/N (e.g. 0/3) or auto, got {self.shard!r}")
            if found.group(2) is not None and not int(found.group(2)) < int(found.group(3)):
                raise ValueError(f"shard: {self.shard}: I must be 0 to N-1")
            if self.store is not None:
                raise ValueError("shard: a fleet is sharded statically (shard) or through a store (store), "
                                 "not both")  # fmt: skip
        if self.store is not None and not re.match(r"^(redis|rediss|unix)://", self.store):
            raise ValueError("store: expected a redis://, rediss:// or unix:// URL")
        return self
