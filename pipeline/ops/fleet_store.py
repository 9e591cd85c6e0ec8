"""The fleet's shared state in Redis: the wanted sources, the live replicas, and a lease per source.

Keys, under the fleet's namespace `NS` (fleet.namespace), one standalone Redis (not a cluster: the
scripts touch keys they are not passed):

    NS:sources        hash   source id -> its `sources:` item (JSON): what the fleet should run
    NS:done           hash   source id -> how it ended (JSON): ended sources are not started again
    NS:stop           set    running sources a DELETE asked to stop
    NS:started        set    sources started at least once: the next start resumes (file sources)
    NS:status         hash   source id -> its runner's latest `GET /sources` entry (JSON)
    NS:members        zset   replica id -> when its membership expires (ms, Redis's clock)
    NS:tokens         hash   replica id -> the token of the process that holds the id
    NS:lease:<id>     string the token of the replica that runs the source, with a TTL (PX)

A replica's token is `<replica id>#<random>`, new for each process, so a restarted replica does not
mistake its dead predecessor's leases for its own: they expire, and are taken over, like anyone's.
Every change that reads before it writes is one Lua script, so two replicas never both claim a
source (SET NX PX) and a lease is renewed or released only by its holder. Expiry runs on Redis's
clock alone (PX, TIME): the replicas' clocks may disagree.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from framewire.pipeline.errors import FramewireError
from framewire.pipeline.uris import redact

CONNECT_TIMEOUT_S = 2.0
"""A store that does not answer this fast counts as unreachable (the call fails; the agent retries)."""

_HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) > now and redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return {-1}
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local lost = {1}
for i = 5, #ARGV do
  local key = ARGV[4] .. ARGV[i]
  if redis.call('GET', key) == ARGV[2] then
    redis.call('PEXPIRE', key, lease)
  else
    table.insert(lost, ARGV[i])
  end
end
return lost
"""
"""Join or stay in the fleet and renew the leases held; returns {1, lost ids...}, or {-1} when
another live process holds this replica id."""

_CLAIM = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 or redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1
   or redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then
  return -1
end
if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) then
  return -1
end
redis.call('HDEL', KEYS[6], ARGV[1])
return redis.call('SADD', KEYS[5], ARGV[1])
"""
"""-1: not claimed (held, ended, stopping or not wanted); 1: claimed, first start; 0: claimed, it ran
before (resume it). The previous runner's last status goes: its counts are not the new runner's."""

_FINISH = """
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return 0
end
if ARGV[4] == '1' or redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then
  if redis.call('HEXISTS', KEYS[5], ARGV[1]) == 1 then
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  end
  redis.call('SREM', KEYS[3], ARGV[1])
end
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[1])
return 1
"""
"""A source this replica ran has retired: ended for good (ARGV[4] == '1', or a DELETE asked for it)
it is recorded in `done`; else (this replica is stopping) it is handed over. The lease goes."""

_UPDATE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 or redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""
"""A wanted source's item replaced (its settings changed): 0 when it is not wanted, or has ended."""

_ADD = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  return 1
end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return 2
end
return 0
"""

_REMOVE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  redis.call('SREM', KEYS[3], ARGV[1])
  redis.call('SREM', KEYS[5], ARGV[1])
  return 1
end
if redis.call('EXISTS', KEYS[6]) == 1 then
  redis.call('SADD', KEYS[3], ARGV[1])
else
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
end
return 2
"""
"""DELETE: 0 no such source; 1 an ended one forgotten; 2 a running one asked to stop (an unclaimed
one ends at once)."""

_LEAVE = """
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return 1
"""


class StoreError(FramewireError):
    """The coordination store could not be reached or refused a command."""


def replica_of(token: str | None) -> str | None:
    """The replica id in a lease's token."""
    return token.rsplit("#", 1)[0] if token else None


@dataclass
class Scan:
    """What one replica needs to decide what to claim: the fleet as the store holds it now."""

    now_ms: int
    wanted: dict[str, dict[str, Any]]
    """Wanted sources that have not ended and are not being stopped, with their items."""
    stopping: set[str]
    live: dict[str, int]
    """Live replicas and when each one's membership expires (ms)."""
    holders: dict[str, str | None] = field(default_factory=dict)
    """Each wanted source's lease token (None: nobody runs it)."""
    ttl_ms: dict[str, int] = field(default_factory=dict)
    """Each held lease's time left (ms)."""


class RedisStore:
    """One replica's view of the store: `replica` is its id, `token` this process's."""

    def __init__(self, url: str, namespace: str, replica: str, lease_s: float) -> None:
        try:
            import redis
        except ImportError:
            raise StoreError("fleet.store needs the redis package: pip install 'framewire[fleet]'") from None
        self.url = url
        self.replica = replica
        self.token = f"{replica}#{secrets.token_hex(6)}"
        self.lease_ms = max(1, int(lease_s * 1000))
        self.ns = f"{namespace}:"
        self._errors = (redis.RedisError, OSError)
        timeout = min(CONNECT_TIMEOUT_S, max(0.2, lease_s / 4))
        try:  # typed Any: redis-py's stubs type a pipeline's chained calls as their replies
            self.db: Any = redis.Redis.from_url(url, decode_responses=True, socket_timeout=timeout,
                                           socket_connect_timeout=timeout, health_check_interval=0)  # fmt: skip
        except ValueError as exc:
            raise StoreError(f"fleet.store: {redact(url)}: {exc}") from None
        self._scripts = {name: self.db.register_script(text) for name, text in (
            ("heartbeat", _HEARTBEAT), ("claim", _CLAIM), ("finish", _FINISH), ("add", _ADD),
            ("remove", _REMOVE), ("leave", _LEAVE), ("update", _UPDATE))}  # fmt: skip

    def key(self, name: str) -> str:
        return self.ns + name

    def _keys(self, *names: str) -> list[str]:
        return [self.ns + name for name in names]

    def lease_key(self, source_id: str) -> str:
        return f"{self.ns}lease:{source_id}"

    def _call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        try:
            return self._scripts[name](keys=keys, args=args)
        except self._errors as exc:
            raise StoreError(f"fleet store {redact(self.url)}: {type(exc).__name__}: {exc}") from None

    # --- membership and leases ----------------------------------------------------------------------

    def heartbeat(self, held: Iterable[str]) -> list[str] | None:
        """Stay a member and renew the leases of `held`: the ones lost (expired, or someone else's
        now); None when another live process holds this replica id."""
        reply = self._call("heartbeat", [self.key("members"), self.key("tokens")],
                           [self.replica, self.token, self.lease_ms, f"{self.ns}lease:", *held])  # fmt: skip
        if int(reply[0]) < 0:
            return None
        return [str(sid) for sid in reply[1:]]

    def claim(self, source_id: str) -> int:
        """-1 not claimed; 1 claimed (first run); 0 claimed (it ran before: resume)."""
        keys = [self.lease_key(source_id), *self._keys("sources", "done", "stop", "started", "status")]
        return int(self._call("claim", keys, [source_id, self.token, self.lease_ms]))

    def finish(self, source_id: str, record: Mapping[str, Any], *, ended: bool) -> bool:
        """A source this replica ran retired: recorded as ended (`ended`, or a DELETE asked for it) or
        handed over; its lease is let go. False when the lease was no longer this replica's."""
        keys = [self.lease_key(source_id), *self._keys("done", "stop", "status", "sources")]
        args = [source_id, self.token, json.dumps(dict(record)), "1" if ended else "0"]
        return bool(self._call("finish", keys, args))

    def leave(self) -> None:
        self._call("leave", [self.key("members"), self.key("tokens")], [self.replica, self.token])

    def publish(self, statuses: Mapping[str, Mapping[str, Any]]) -> None:
        """The latest entry of each source this replica runs, for `GET /sources` on any replica."""
        if not statuses:
            return
        mapping = {sid: json.dumps(dict(entry)) for sid, entry in statuses.items()}
        try:
            self.db.hset(self.key("status"), mapping=mapping)
        except self._errors as exc:
            raise StoreError(f"fleet store {redact(self.url)}: {type(exc).__name__}: {exc}") from None

    # --- the wanted sources -------------------------------------------------------------------------

    def add(self, source_id: str, item: Mapping[str, Any]) -> int:
        """1 added; 0 already wanted; 2 already there and ended (DELETE forgets it)."""
        return int(self._call("add", self._keys("sources", "done"), [source_id, json.dumps(dict(item))]))

    def update(self, source_id: str, item: Mapping[str, Any]) -> bool:
        """Replace a wanted source's item (its settings changed); False when it is not wanted or ended."""
        return bool(self._call("update", self._keys("sources", "done"), [source_id, json.dumps(dict(item))]))

    def item(self, source_id: str) -> dict[str, Any] | None:
        """A wanted source's item as added (with its settings), None when there is no such source."""
        try:
            raw = self.db.hget(self.key("sources"), source_id)
        except self._errors as exc:
            raise StoreError(f"fleet store {redact(self.url)}: {type(exc).__name__}: {exc}") from None
        return json.loads(raw) if raw is not None else None

    def remove(self, source_id: str, record: Mapping[str, Any]) -> int:
        """0 no such source; 1 an ended one forgotten; 2 asked to stop (`record`: how an unclaimed
        one ends)."""
        keys = [*self._keys("sources", "done", "stop", "status", "started"), self.lease_key(source_id)]
        return int(self._call("remove", keys, [source_id, json.dumps(dict(record))]))

    # --- reading the fleet --------------------------------------------------------------------------

    def scan(self) -> Scan:
        """The wanted sources, who holds each, and the live replicas (two round trips)."""
        try:
            pipe = self.db.pipeline(transaction=False)
            pipe.time().hgetall(self.key("sources")).hkeys(self.key("done")).smembers(self.key("stop"))
            pipe.zrange(self.key("members"), 0, -1, withscores=True)
            (seconds, micros), items, done, stop, members = pipe.execute()
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            ended = set(done) | set(stop)
            wanted = {sid: json.loads(raw) for sid, raw in items.items() if sid not in ended}
            scan = Scan(now_ms, wanted, set(stop), {m: int(s) for m, s in members if int(s) > now_ms})
            ids = sorted(wanted)
            if ids:
                pipe = self.db.pipeline(transaction=False)
                for sid in ids:
                    pipe.get(self.lease_key(sid)).pttl(self.lease_key(sid))
                answers = pipe.execute()
                for i, sid in enumerate(ids):
                    scan.holders[sid], scan.ttl_ms[sid] = answers[2 * i], int(answers[2 * i + 1])
            return scan
        except self._errors as exc:
            raise StoreError(f"fleet store {redact(self.url)}: {type(exc).__name__}: {exc}") from None

    def view(self) -> dict[str, Any]:
        """Everything `GET /sources` shows: every source with its item, state and runner."""
        try:
            pipe = self.db.pipeline(transaction=False)
            pipe.time().hgetall(self.key("sources")).hgetall(self.key("done")).hgetall(self.key("status"))
            pipe.smembers(self.key("stop")).zrange(self.key("members"), 0, -1, withscores=True)
            (seconds, micros), items, done, status, stop, members = pipe.execute()
            ids = sorted(items)
            holders = self.db.mget([self.lease_key(sid) for sid in ids]) if ids else []
        except self._errors as exc:
            raise StoreError(f"fleet store {redact(self.url)}: {type(exc).__name__}: {exc}") from None
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        return {
            "ids": ids,
            "done": {sid: json.loads(raw) for sid, raw in done.items()},
            "status": {sid: json.loads(raw) for sid, raw in status.items()},
            "stop": set(stop),
            "holders": dict(zip(ids, holders)),
            "live": sorted(m for m, s in members if int(s) > now_ms),
        }

    def close(self) -> None:
        try:
            self.db.close()
        except self._errors:
            pass
