"""Which of the config's sources this daemon runs when it is one replica of several (`fleet:`).

Static (`fleet.shard: I/N`, `run --shard I/N`, or `auto` in a StatefulSet): the sources that
rendezvous hashing gives replica I; the others are not opened, not even checked. Dynamic
(`fleet.store`): none at start; the config's sources join the fleet's wanted sources in the store,
and each replica starts those it claims (framewire.pipeline.ops.fleet).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import socket
from collections.abc import Mapping
from typing import Any

from framewire.config import Config
from framewire.config.job import resume_problem
from framewire.pipeline.errors import ConfigError
from framewire.pipeline.ops.rendezvous import shard_of
from framewire.pipeline.plan import FleetSettings, Plan
from framewire.pipeline.uris import source_kind

log = logging.getLogger(__name__)

REPLICAS_ENV = "FRAMEWIRE_REPLICAS"
"""How many replicas a `fleet.shard: auto` fleet has (a StatefulSet's `replicas`)."""
ORDINAL = re.compile(r"-(\d+)$")


def shard(
    config: Config, hostname: str | None = None, environ: Mapping[str, str] | None = None
) -> tuple[int, int] | None:
    """(I, N) of a statically sharded replica; None when the config is not sharded."""
    value = config.fleet.shard
    if value is None:
        return None
    if value != "auto":
        first, _, second = value.partition("/")
        return int(first), int(second)
    env = os.environ if environ is None else environ
    name = hostname if hostname is not None else socket.gethostname()
    found = ORDINAL.search(name.split(".")[0])
    if not found:
        raise ConfigError(f"fleet.shard: auto: the hostname {name!r} does not end in -<ordinal> "
                          "(a StatefulSet pod's does): give --shard I/N")  # fmt: skip
    text = env.get(REPLICAS_ENV, "")
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"fleet.shard: auto: set {REPLICAS_ENV} to the number of replicas (got {text!r})")
    index, count = int(found.group(1)), int(text)
    if index >= count:
        raise ConfigError(f"fleet.shard: auto: ordinal {index} of {name!r} is not below "
                          f"{REPLICAS_ENV}={count}")  # fmt: skip
    return index, count


def local_part(config: Config) -> Config:
    """The config with only the sources this replica runs (static sharding); unchanged otherwise."""
    found = shard(config)
    if found is None:
        return config
    index, count = found
    mine = tuple(s for s in config.sources if shard_of(s.id, index, count))
    log.info("fleet: shard %d/%d runs %d of %d source(s): %s", index, count, len(mine), len(config.sources),
             ", ".join(s.id for s in mine) or "none")  # fmt: skip
    analytics = {sid: spec for sid, spec in config.analytics.items() if any(s.id == sid for s in mine)}
    return config.model_copy(update={"sources": mine, "analytics": analytics})


def settings(config: Config) -> FleetSettings | None:
    """What the runtime needs to take part in a dynamic fleet; None without `fleet.store`."""
    fleet = config.fleet
    if fleet.store is None:
        return None
    if not config.http.enabled:
        raise ConfigError("fleet.store: needs http.enabled: true (sources are added, and the fleet "
                          "shown, through the control API)")  # fmt: skip
    seed = tuple((s.id, s.model_dump(mode="json")) for s in config.sources)
    return FleetSettings(store=fleet.store, replica=fleet.replica or socket.gethostname(),
                         lease_s=fleet.lease_s, namespace=fleet.namespace, seed=seed,
                         resume=functools.partial(resumed, problem=resume_problem(config.outputs)))  # fmt: skip


def joined(plan: Plan, config: Config) -> Plan:
    """The plan of a replica of a dynamic fleet: it starts no source itself (the fleet's agent starts
    those it claims) and stays up when they end, for the next; any other plan as it is."""
    found = settings(config)
    if found is None or plan.http is None:
        return plan
    http = dataclasses.replace(plan.http, keep_running=True)
    return dataclasses.replace(plan, sources=(), fleet=found, http=http)


def resumed(item: Mapping[str, Any], problem: str | None = None) -> Mapping[str, Any]:
    """A source's item as a replica that takes it over starts it: a file continues where its outputs
    stop (`resume: true`); a live source simply connects again. `problem`: why the job's outputs
    cannot resume (config.job.resume_problem): then a file starts again from its first frame."""
    from pydantic import TypeAdapter, ValidationError

    from framewire.config.sources import Source

    try:
        source = TypeAdapter(Source).validate_python(item)
    except ValidationError:
        return item  # refused, with its reason, where it is started
    uri = getattr(source, "uri", None)
    if "resume" not in type(source).model_fields or not isinstance(uri, str) or source_kind(uri) != "file":
        return item
    if problem is not None:
        log.warning("fleet: source %s starts again from its first frame: %s", source.id, problem)
        return item
    return {**item, "resume": True}
