"""What a fault test's cluster looked like at the end, dumped when the checker finds a loss.

For each stream with missing messages: its subscriber's connection (the node it is connected
to, its reconnects), the subscriber session's owner record in Redis, the length of its Redis
queue and in-flight table; the publishers' acknowledgement reason codes; and each node's
cluster counters from ``/metrics`` (appends, held reads, dropped messages...). Cheap: read
once, only when something is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import redis

from tests.support.fault_checker import DeliveryLedger, Fleet
from tests.support.http_probe import http
from xmq.contract.keys import ClusterKeys

METRIC_PREFIXES = (
    "xmq_cluster_",
    "xmq_messages_dropped",
    "xmq_sessions",
    "xmq_persistent_sessions",
    "xmq_held_",
    "xmq_inflight_messages",
    "xmq_queued_messages",
    "xmq_deliveries_routed",
    "xmq_connects",
    "xmq_redis_errors",
    "xmq_redis_retries",
    "xmq_redis_writes_given_up",
)


def _metrics(port: int) -> list[str]:
    try:
        status, body = http(port, "/metrics")
    except OSError as error:
        return [f"(metrics unreadable: {error!r})"]
    if status != 200:
        return [f"(metrics: HTTP {status})"]
    return [
        line
        for line in body.splitlines()
        if line.startswith(METRIC_PREFIXES) and not line.endswith((" 0", " 0.0"))
    ]


def cluster_state(
    ledger: DeliveryLedger,
    fleet: Fleet,
    client: redis.Redis,
    cluster: str,
    metrics_ports: Mapping[str, int],
    node_names: Mapping[int, str],
) -> str:
    """``node_names``: MQTT port -> node name; ``metrics_ports``: node name -> its /metrics
    port."""
    keys = ClusterKeys(cluster)
    lines: list[str] = []

    def node(port: int) -> str:
        return node_names.get(port, "none") if port else "none"

    def connects(log: list[tuple[int, int]]) -> str:
        return " ".join(f"{node(port)}:{reason:#x}" for port, reason in log)

    lossy = ledger.lossy_streams()
    for publisher in fleet.publishers:
        reasons = dict(sorted(ledger.reasons.get(publisher.stream, {}).items()))
        mark = " (MISSING)" if publisher.stream in lossy else ""
        lines.append(
            f"publisher {publisher.client_id}{mark}: on {node(publisher.connected_port)}, "
            f"CONNACKs [{connects(publisher.connect_log)}], ack reasons {reasons}"
        )
    for subscriber in fleet.subscribers:
        missing = lossy.get(subscriber.topic)
        if missing is None:
            continue
        cid = subscriber.client_id
        owner = client.get(keys.session_owner(cid))
        queue = client.llen(keys.session_queue(cid))
        inflight = client.hlen(keys.session_inflight(cid))
        subs = client.hkeys(keys.session_subscriptions(cid))
        lines.append(
            f"subscriber {cid}: missing {missing}, on {node(subscriber.connected_port)}, "
            f"CONNACKs [{connects(subscriber.connect_log)}], "
            f"disconnect reasons {dict(subscriber.disconnect_reasons)}; Redis owner {owner!r}, "
            f"queue {queue}, inflight {inflight}, subs {subs}"
        )
        if queue:
            head = client.lrange(keys.session_queue(cid), 0, 0)[0]
            lines.append(f"  queue head: {head[:120]!r}")
    for raw_member in sorted(client.smembers(keys.members())):
        member = raw_member.decode() if isinstance(raw_member, bytes) else str(raw_member)
        lease = client.get(keys.lease(member))
        sessions = client.smembers(keys.node_sessions(member))
        lines.append(f"{member}: lease {lease!r}, {len(sessions)} sessions in node:sessions")
    for name, port in metrics_ports.items():
        lines.append(f"--- {name} /metrics (non-zero cluster lines):")
        lines += [f"  {line}" for line in _metrics(port)]
    return "\n".join(lines)


def state_reader(
    ledger: DeliveryLedger,
    fleet: Fleet,
    redis_client: Callable[[], redis.Redis],
    cluster: str,
    metrics_ports: Callable[[], Mapping[str, int]],
    node_names: Mapping[int, str],
) -> Callable[[], str]:
    """``cluster_state`` as the checker's ``state`` callback (read only when it is called)."""

    def read() -> str:
        client = redis_client()
        try:
            return cluster_state(ledger, fleet, client, cluster, metrics_ports(), node_names)
        except (redis.RedisError, OSError) as error:
            return f"(cluster state unreadable: {error!r})"
        finally:
            client.close()

    return read
