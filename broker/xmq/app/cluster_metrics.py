"""The node side of a cluster member on ``/metrics``: membership, lease, links, appends,
takeovers, self-fencing (held acknowledgements: `xmq.app.redis_metrics`). Read at scrape time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from xmq.app.cluster_runtime import ClusterRuntime
from xmq.cluster.membership import Membership
from xmq.observability.broker_metrics import LabelledSource


def cluster_metric_sources(cluster: ClusterRuntime) -> list[LabelledSource]:
    identity = cluster.identity
    hub = cluster.hub
    broker = cluster.broker
    node = identity.node_id

    def read(value: Callable[[Membership], float]) -> Callable[[], dict[str, float]]:
        return lambda: {} if cluster.membership is None else {node: value(cluster.membership)}

    def membership() -> dict[str, float]:
        return {"online": float(identity.online), "offline": float(not identity.online)}

    def lease_age() -> dict[str, float]:
        member = cluster.membership
        if member is None or not identity.online:
            return {}
        return {node: asyncio.get_running_loop().time() - member.last_renewed}

    def links() -> dict[str, float]:
        """1 up, 0 dropped and being dialled again (resuming); absent: not linked."""
        return {peer: float(not link.closed) for peer, link in hub.links.items()}

    def link_write_buffers() -> dict[str, float]:
        """Bytes waiting in each link's transport (above 1 MiB its local publishers are
        paused: ``cluster.link_backpressure.WRITE_HIGH``)."""
        return {
            peer: float(link.transport.get_write_buffer_size())
            for peer, link in hub.links.items()
            if link.transport is not None and not link.closed
        }

    def link_events() -> dict[str, float]:
        dead = cluster.dead_peers
        return {
            "resumed": hub.recovery.resumed,
            "given_up": hub.recovery.given_up,
            "heartbeat_timeout": hub.recovery.heartbeat_timeouts,
            "stale_routes_dropped": hub.recovery.stale_routes,
            "dead_peer_released": 0 if dead is None else dead.released,
        }

    def link_messages() -> dict[str, float]:
        return {"forwarded": hub.forwarded, "received": hub.received}

    def appends() -> dict[str, float]:
        orphans = hub.orphans
        return {
            "appended": orphans.appends,
            "owner_alive_retry": orphans.retries,
            "unlinked_owner": orphans.unlinked,
        }

    def retained() -> dict[str, float]:
        sync = cluster.retained
        return {
            "written": sync.written,
            "failed": sync.failures,
            "reread": sync.rereads,
            "pending_topics": len(sync.convergence.pending),
        }

    def fence() -> dict[str, float]:
        return {"reads_held": broker.fence.holds, "waiting": broker.fence.waiting}

    return [
        LabelledSource(
            "xmq_cluster_lease_held",
            "1 while this node holds its lease in Redis (a cluster member), else 0.",
            "node",
            lambda: {node: 1 if identity.online else 0},
        ),
        LabelledSource(
            "xmq_cluster_lease_losses",
            "Times this node lost its lease and went offline.",
            "node",
            read(lambda m: m.lease_losses),
            kind="counter",
        ),
        LabelledSource(
            "xmq_cluster_redis_errors",
            "Lease renewals or joins that failed on Redis (error or timeout).",
            "node",
            read(lambda m: m.redis_errors),
            kind="counter",
        ),
        LabelledSource(
            "xmq_cluster_members",
            "Cluster members holding a live lease, as this node last read them.",
            "node",
            read(lambda m: len(m.peers)),
        ),
        LabelledSource(
            "xmq_cluster_membership", "1 for this node's membership state.", "state", membership
        ),
        LabelledSource(
            "xmq_cluster_lease_age_seconds",
            "Seconds since the last successful lease renewal began.",
            "node",
            lease_age,
        ),
        LabelledSource(
            "xmq_cluster_link_up",
            "Node links: 1 up, 0 dropped and being dialled again.",
            "peer",
            links,
        ),
        LabelledSource(
            "xmq_cluster_link_write_buffer_bytes",
            "Bytes waiting in each node link's write buffer (its local publishers are paused "
            "above 1 MiB until it drains under 256 KiB).",
            "peer",
            link_write_buffers,
        ),
        LabelledSource(
            "xmq_cluster_link_events",
            "Links resumed after a drop, given up (peer treated as dead), closed by heartbeat;"
            " routes a resumed link's snapshot no longer named (removed while it was down);"
            " leases of killed peers released by this node.",
            "event",
            link_events,
            kind="counter",
        ),
        LabelledSource(
            "xmq_cluster_link_messages",
            "PUBLISH frames sent to peers (one per node a message is routed to) and received.",
            "direction",
            link_messages,
            kind="counter",
        ),
        LabelledSource(
            "xmq_cluster_orphan_appends",
            "APPEND_IF_OWNER calls for sessions of owners believed dead, appends asked "
            "again because the owner still held its lease, and messages for sessions of a live "
            "owner run that no live node has announced (sent to that run, once linked).",
            "kind",
            appends,
            kind="counter",
        ),
        LabelledSource(
            "xmq_cluster_takeovers",
            "Session takeovers: requested by this node, handed over by it, requests timed "
            "out, claims revoked by a takeover.",
            "kind",
            lambda: dict(hub.takeovers.counts),
            kind="counter",
        ),
        LabelledSource(
            "xmq_cluster_retained",
            "Retained changes written to Redis and not stored (counters), topics re-read after "
            "changes of them on several nodes at once (counter), topics with changes not "
            "announced as written yet (gauge-like).",
            "kind",
            retained,
        ),
        LabelledSource(
            "xmq_cluster_fence",
            "Self-fencing: reads held while the lease was unproven (counter-like), and "
            "connections waiting now.",
            "kind",
            fence,
        ),
    ]
