"""Where the cluster's Redis is: one address, or a master named by Redis Sentinel.

``redis://[[user]:password@]host:port[/db]`` (``rediss`` is not supported) names one server.
``redis+sentinel://[[user]:password@]host:port[,host:port...]/<master name>[/db]`` names the
sentinels to ask for the master's address (``SENTINEL get-master-addr-by-name``); the
credentials and database are the master's (the sentinels are asked without them). The config
keys ``cluster.redis_sentinels`` + ``cluster.redis_master_name`` say the same next to a plain
``redis_url`` (which then only gives credentials and database). Every new connection asks the
sentinels again and checks that the server it reached is a master (``ROLE``), so a node follows
a failover without a restart: the batcher reconnects on a lost connection or a ``READONLY``
reply, and the lease client (redis-py's ``Sentinel``) does the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel

SENTINEL_SCHEME = "redis+sentinel"
DEFAULT_SENTINEL_PORT = 26379


def _host_port(text: str, default_port: int) -> tuple[str, int]:
    text = text.strip()
    if text.startswith("["):  # [::1]:26379
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
        return host, int(port) if port else default_port
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, default_port
    return host or "127.0.0.1", int(port)


@dataclass(frozen=True, slots=True)
class RedisEndpoint:
    host: str = "127.0.0.1"
    port: int = 6379
    username: str | None = None
    password: str | None = None
    db: int = 0
    sentinels: tuple[tuple[str, int], ...] = ()
    master_name: str = ""

    @classmethod
    def parse(cls, url: str) -> RedisEndpoint:
        scheme, sep, rest = url.partition("://")
        if not sep:
            raise ValueError(f"not a Redis URL: {url!r}")
        if scheme == SENTINEL_SCHEME:
            return cls._parse_sentinel(rest)
        if scheme != "redis":
            raise ValueError(f"unsupported Redis URL scheme {scheme!r} (redis, {SENTINEL_SCHEME})")
        parsed = urlparse(url)
        db = parsed.path.lstrip("/")
        return cls(
            host=parsed.hostname or "127.0.0.1",
            port=parsed.port or 6379,
            username=unquote(parsed.username) if parsed.username else None,
            password=unquote(parsed.password) if parsed.password else None,
            db=int(db) if db else 0,
        )

    @classmethod
    def _parse_sentinel(cls, rest: str) -> RedisEndpoint:
        netloc, _, path = rest.partition("/")
        path = path.partition("?")[0]
        userinfo, at, hosts = netloc.rpartition("@")
        if not at:
            hosts = netloc
        username = password = None
        if userinfo:
            user, colon, secret = userinfo.partition(":")
            username = unquote(user) if user else None
            password = unquote(secret) if colon else None
        master, _, db = path.partition("/")
        if not master:
            raise ValueError(f"{SENTINEL_SCHEME} URL without a master name: .../<name>")
        sentinels = tuple(_host_port(h, DEFAULT_SENTINEL_PORT) for h in hosts.split(",") if h)
        if not sentinels:
            raise ValueError(f"{SENTINEL_SCHEME} URL without sentinels")
        return cls(
            username=username,
            password=password,
            db=int(db) if db else 0,
            sentinels=sentinels,
            master_name=unquote(master),
        )

    def with_sentinels(self, sentinels: Sequence[str], master_name: str) -> RedisEndpoint:
        """This endpoint's credentials and database, the master found by ``sentinels``."""
        return RedisEndpoint(
            username=self.username,
            password=self.password,
            db=self.db,
            sentinels=tuple(_host_port(s, DEFAULT_SENTINEL_PORT) for s in sentinels),
            master_name=master_name,
        )

    def describe(self) -> str:
        """For logs: never the password."""
        if self.sentinels:
            hosts = ",".join(f"{h}:{p}" for h, p in self.sentinels)
            return f"sentinel master {self.master_name!r} via {hosts}"
        return f"{self.host}:{self.port}/{self.db}"


def redis_py_client(endpoint: RedisEndpoint, timeout_s: float) -> aioredis.Redis:
    """A redis-py client of the endpoint (the node's lease and look-ups); with sentinels, a
    client of the current master that re-resolves it after a lost connection or READONLY."""
    if not endpoint.sentinels:
        return aioredis.Redis(
            host=endpoint.host,
            port=endpoint.port,
            username=endpoint.username,
            password=endpoint.password,
            db=endpoint.db,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
        )
    options: dict[str, Any] = {
        "username": endpoint.username,
        "password": endpoint.password,
        "db": endpoint.db,
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
    }
    # (Sentinel's __init__ is typed from redis 8.2 on: the ignore is unused there)
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(endpoint.sentinels),
        sentinel_kwargs={"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s},
    )
    client: aioredis.Redis = sentinel.master_for(endpoint.master_name, **options)
    return client
