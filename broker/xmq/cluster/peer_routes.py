"""A starting node accepts clients once it knows its live peers' routes (a bounded wait).

A node joins the cluster (its lease), reads the persistent sessions in Redis, and its peers
with a smaller id dial it on their next peer-loop pass after their membership read shows its
lease: its links form ~1-2 s after it joined. Until a peer's link is up and its route snapshot
complete (``SNAPSHOT_END``), this node knows nothing of that peer's subscriptions made since it
read Redis — a clean session's, or a persistent session's subscribed after that read: a
message published here for one of them matched nothing, PUBACK 0x10, and was lost though its
subscriber had its SUBACK (``test_partitions.py::test_the_survivability_bench_s_partition_fault``
failed so, ~1 run in 8, when a link formed after the bench's first publish;
``test_start_gate.py`` stages it). So the listeners open only once every live peer's link has
delivered its snapshot, or after ``start_wait_s`` (a peer paused or partitioned at our start
does not keep the node closed: its persistent sessions read from Redis wait for its link,
``RouteTable.pending``; docs/cluster.md "Limits" for the rest).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from xmq.contract.records import NodeLease

POLL_S = 0.05


class LinkState(Protocol):
    """What the wait reads of a node link (``PeerLink``)."""

    @property
    def closed(self) -> bool: ...

    @property
    def peer_epoch(self) -> int: ...

    @property
    def announced(self) -> object | None: ...


def start_wait_s(lease_ttl_s: float) -> float:
    """How long a starting node waits for its peers' links: their membership read (every
    TTL / 5), their peer-loop pass (every min(1 s, TTL / 5)) and a second for the dial, the
    HELLOs and the snapshot."""
    return lease_ttl_s / 5 + min(1.0, lease_ttl_s / 5) + 1.0


def peers_without_routes(
    links: Mapping[str, LinkState], peers: Mapping[str, NodeLease], me: str
) -> list[str]:
    """The live peers (``peers``: node id -> lease, this node's own included) whose routes
    this node does not know yet: no open link to their run, or its snapshot not complete."""
    missing = []
    for node, lease in peers.items():
        if node == me:
            continue
        link = links.get(node)
        if (
            link is None
            or link.closed
            or link.peer_epoch != lease.epoch
            or link.announced is not None  # its snapshot has not ended yet
        ):
            missing.append(node)
    return missing


async def wait_for_peer_routes(
    links: Mapping[str, LinkState],
    peers: Callable[[], Mapping[str, NodeLease]],
    me: str,
    wait_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> list[str]:
    """Until every live peer's routes are known here, or ``wait_s`` has passed; returns the
    peers still missing then (empty: all known). ``peers`` is read again on each poll (a peer
    whose lease went is not waited for; one that joined meanwhile is)."""
    deadline = clock() + wait_s
    while True:
        missing = peers_without_routes(links, peers(), me)
        if not missing or clock() >= deadline:
            return missing
        await sleep(POLL_S)
