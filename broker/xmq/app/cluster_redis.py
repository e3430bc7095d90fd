"""The cluster's Redis as the configuration names it, and whose key namespace it is.

``redis_url_of`` reads the URL (``cluster.redis_url``, ``XMQ_REDIS_URL``, sentinels), which also
decides whether the node runs as part of a cluster at all (``app.server``, ``app.preflight``);
``check_cluster_uid`` refuses to join a namespace recorded for another XmqCluster
(``app.cluster_runtime`` calls it before joining; ``app.cli`` reports the refusal).
"""

from __future__ import annotations

import os
from urllib.parse import quote

import redis.asyncio as aioredis

from xmq.config import BrokerConfig
from xmq.contract.keys import ClusterKeys
from xmq.contract.pod import CLUSTER_UID_ENV, REDIS_URL_ENV
from xmq.store.redis_endpoint import SENTINEL_SCHEME, RedisEndpoint


def redis_url_of(config: BrokerConfig) -> str | None:
    """The cluster's Redis URL: ``cluster.redis_url``, else ``XMQ_REDIS_URL``, else None; with
    ``cluster.redis_sentinels`` a ``redis+sentinel://`` URL of them (credentials and database
    from that URL)."""
    cluster = config.cluster
    url = cluster.redis_url or os.environ.get(REDIS_URL_ENV) or None
    if not cluster.redis_sentinels:
        return url
    base = RedisEndpoint.parse(url) if url else RedisEndpoint()
    endpoint = base.with_sentinels(cluster.redis_sentinels, cluster.redis_master_name)
    return endpoint_url(endpoint)


def endpoint_url(endpoint: RedisEndpoint) -> str:
    """The ``redis+sentinel://`` URL of an endpoint with sentinels."""
    auth = ""
    if endpoint.password:
        auth = f"{quote(endpoint.username or '', safe='')}:{quote(endpoint.password, safe='')}@"
    hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in endpoint.sentinels)
    return f"{SENTINEL_SCHEME}://{auth}{hosts}/{quote(endpoint.master_name, safe='')}/{endpoint.db}"


class ClusterIdentityError(RuntimeError):
    """The cluster's Redis key namespace is recorded for another XmqCluster (``cluster:uid``)."""


async def check_cluster_uid(client: aioredis.Redis, keys: ClusterKeys, uid: str) -> None:
    """Record ``uid`` as the namespace's owner unless one is recorded; refuse another one."""
    key = keys.cluster_uid()
    await client.set(key, uid, nx=True)
    recorded = await client.get(key)
    text = recorded.decode() if isinstance(recorded, bytes) else recorded
    if text is not None and text != uid:
        raise ClusterIdentityError(
            f"cluster {keys.cluster!r} in Redis belongs to XmqCluster UID {text}, "
            f"not to this node's {CLUSTER_UID_ENV}={uid}: refusing to join it "
            "(give this cluster its own config cluster.name)"
        )
