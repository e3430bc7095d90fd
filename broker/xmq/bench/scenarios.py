"""The scenarios of the seed pages, scaled by flags: who connects, who publishes what, how fast.

A scenario turns its options into a :class:`ScenarioPlan`: one :class:`WorkerPlan` per worker
process, the accounting expectations (receiver -> publishers it must hear from) and the figures
the report needs (offered rate, deliveries per published message). Scenarios that need a cluster
(``persistence``, ``migration``, ``survivability``) plug in here later with the same shape plus
a Redis URL and several broker PIDs in :class:`CommonOptions`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import TypeVar

from xmq.bench.packets import MQTT_V5
from xmq.bench.plan import PublisherSpec, SubscriberSpec, Target, WorkerPlan

_T = TypeVar("_T")

MESSAGES = "messages"
CONNECTIONS = "connections"


@dataclass(frozen=True, slots=True)
class CommonOptions:
    workers: int = 1
    protocol: int = MQTT_V5
    qos: int = 1
    keepalive: int = 300
    duration_s: float = 20.0
    warmup_s: float = 3.0
    drain_s: float = 10.0
    interval_s: float = 1.0
    source_addresses: int = 8
    setup_connect_rate: float = 2000.0
    run_id: str = field(default_factory=lambda: f"{os.getpid():x}")
    broker_pids: tuple[int, ...] = ()
    redis_url: str | None = None
    nodes: tuple[Target, ...] = ()
    """Cluster nodes to spread clients over (publishers offset by one node from subscribers,
    so point-to-point traffic crosses nodes); empty = the one target."""


@dataclass(slots=True)
class ScenarioPlan:
    name: str
    kind: str
    description: str
    workers: list[WorkerPlan]
    expectations: dict[int, list[int]]
    deliveries_per_message: int
    offered_rate: float
    """Deliveries per second offered (connections per second for ``connections``)."""
    publish_duration_s: float
    params: dict[str, object]
    hold_s: float = 0.0


def source_addresses(host: str, count: int) -> tuple[str, ...]:
    """Spread clients over 127.0.0.1..count when the target is on loopback."""
    if not host.startswith("127.") or count <= 0:
        return ()
    return tuple(f"127.0.0.{n}" for n in range(1, min(count, 254) + 1))


def _split(items: list[_T], parts: int) -> list[list[_T]]:
    return [items[index::parts] for index in range(parts)]


def _worker_plans(
    target: Target,
    options: CommonOptions,
    subscribers: list[SubscriberSpec],
    publishers: list[PublisherSpec],
    rate_per_publisher: float,
    messages_per_publisher: int,
    session_expiry: int = 0,
) -> list[WorkerPlan]:
    workers = max(1, options.workers)
    sources = source_addresses(target.host, options.source_addresses)
    count = len(options.nodes)
    if count > 1:
        subscribers = [replace(s, node=n % count) for n, s in enumerate(subscribers)]
        publishers = [replace(p, node=(n + 1) % count) for n, p in enumerate(publishers)]
    sub_parts = _split(subscribers, workers)
    pub_parts = _split(publishers, workers)
    return [
        WorkerPlan(
            worker_index=index,
            target=target,
            source_addresses=sources,
            protocol=options.protocol,
            qos=options.qos,
            keepalive=options.keepalive,
            subscribers=tuple(sub_parts[index]),
            publishers=tuple(pub_parts[index]),
            rate_per_publisher=rate_per_publisher,
            messages_per_publisher=messages_per_publisher,
            connect_rate=options.setup_connect_rate / workers,
            interval_s=options.interval_s,
            session_expiry=session_expiry,
            nodes=options.nodes,
            worker_count=workers,
        )
        for index in range(workers)
    ]


def fanout(
    target: Target,
    options: CommonOptions,
    *,
    publishers: int = 5,
    topics: int = 5,
    subscribers: int = 1000,
    rate: float = 20_000.0,
) -> ScenarioPlan:
    """P publishers on T topics, S subscribers on all T; ``rate`` is total deliveries/s."""
    prefix = f"bench/{options.run_id}/fanout"
    topic_names = [f"{prefix}/{n}" for n in range(topics)]
    subs = [
        SubscriberSpec(f"xb{options.run_id}-fs{n}", tuple(topic_names), receiver=n)
        for n in range(subscribers)
    ]
    pubs = [
        PublisherSpec(f"xb{options.run_id}-fp{n}", topic_names[n % topics], publisher_id=n)
        for n in range(publishers)
    ]
    per_publisher = rate / (subscribers * publishers)
    count = max(1, math.ceil(per_publisher * options.duration_s))
    return ScenarioPlan(
        name="fanout",
        kind=MESSAGES,
        description=(
            f"{publishers} publishers on {topics} topics, {subscribers} subscribers on all, "
            f"{rate:,.0f} deliveries/s"
        ),
        workers=_worker_plans(target, options, subs, pubs, per_publisher, count),
        expectations={n: list(range(publishers)) for n in range(subscribers)},
        deliveries_per_message=subscribers,
        offered_rate=per_publisher * publishers * subscribers,
        publish_duration_s=count / per_publisher,
        params={
            "publishers": publishers,
            "topics": topics,
            "subscribers": subscribers,
            "rate": rate,
            "rate_per_publisher": per_publisher,
        },
    )


def p2p(
    target: Target, options: CommonOptions, *, pairs: int = 2000, rate: float = 10_000.0
) -> ScenarioPlan:
    """N publisher/subscriber pairs, one topic each; ``rate`` is total messages/s."""
    prefix = f"bench/{options.run_id}/p2p"
    subs = [
        SubscriberSpec(f"xb{options.run_id}-ps{n}", (f"{prefix}/{n}",), receiver=n)
        for n in range(pairs)
    ]
    pubs = [
        PublisherSpec(f"xb{options.run_id}-pp{n}", f"{prefix}/{n}", publisher_id=n)
        for n in range(pairs)
    ]
    per_publisher = rate / pairs
    count = max(1, math.ceil(per_publisher * options.duration_s))
    return ScenarioPlan(
        name="p2p",
        kind=MESSAGES,
        description=f"{pairs} pairs, one topic each, {rate:,.0f} msg/s",
        workers=_worker_plans(target, options, subs, pubs, per_publisher, count),
        expectations={n: [n] for n in range(pairs)},
        deliveries_per_message=1,
        offered_rate=per_publisher * pairs,
        publish_duration_s=count / per_publisher,
        params={"pairs": pairs, "rate": rate, "rate_per_publisher": per_publisher},
    )


def persistence(
    target: Target,
    options: CommonOptions,
    *,
    pairs: int = 2000,
    rate: float = 5_000.0,
    session_expiry: int = 3600,
) -> ScenarioPlan:
    """Point-to-point where every session is persistent (Clean Start 0 + Session Expiry).

    Every message is QoS 1 (``--qos 1``); against XMQ with Redis each delivery is recorded
    before it is handed on, so run it as a rate ladder and watch for climbing latency.
    """
    plan = p2p(target, options, pairs=pairs, rate=rate)
    plan.name = "persistence"
    plan.description = (
        f"{pairs} pairs, persistent sessions (expiry {session_expiry} s), {rate:,.0f} msg/s"
    )
    plan.workers = [replace(w, session_expiry=session_expiry) for w in plan.workers]
    plan.params["session_expiry"] = session_expiry
    return plan


def fanin(
    target: Target,
    options: CommonOptions,
    *,
    publishers: int = 2000,
    subscribers: int = 50,
    rate_per_publisher: float = 1.0,
    group: str = "bench",
) -> ScenarioPlan:
    """P publishers at r msg/s each to a ``$share`` group of S subscribers."""
    prefix = f"bench/{options.run_id}/fanin"
    shared = f"$share/{group}/{prefix}/#"
    subs = [
        SubscriberSpec(f"xb{options.run_id}-is{n}", (shared,), receiver=0)
        for n in range(subscribers)
    ]
    pubs = [
        PublisherSpec(f"xb{options.run_id}-ip{n}", f"{prefix}/{n}", publisher_id=n)
        for n in range(publishers)
    ]
    count = max(1, math.ceil(rate_per_publisher * options.duration_s))
    return ScenarioPlan(
        name="fanin",
        kind=MESSAGES,
        description=(
            f"{publishers} publishers at {rate_per_publisher:g} msg/s to $share group "
            f"of {subscribers}"
        ),
        workers=_worker_plans(target, options, subs, pubs, rate_per_publisher, count),
        expectations={0: list(range(publishers))},
        deliveries_per_message=1,
        offered_rate=rate_per_publisher * publishers,
        publish_duration_s=count / rate_per_publisher,
        params={
            "publishers": publishers,
            "subscribers": subscribers,
            "rate_per_publisher": rate_per_publisher,
        },
    )


def connections(
    target: Target,
    options: CommonOptions,
    *,
    clients: int = 5000,
    rate: float = 1000.0,
    hold_s: float = 5.0,
) -> ScenarioPlan:
    """C clients connecting at R/s (scheduled), then holding idle for ``hold_s``."""
    workers = max(1, options.workers)
    ids = [f"xb{options.run_id}-c{n}" for n in range(clients)]
    base = _worker_plans(target, options, [], [], 0.0, 0)
    plans = [
        replace(plan, idle_clients=tuple(part), connect_rate=rate / workers)
        for plan, part in zip(base, _split(ids, workers), strict=True)
    ]
    return ScenarioPlan(
        name="connections",
        kind=CONNECTIONS,
        description=f"{clients:,} clients at {rate:,.0f}/s, hold {hold_s:g} s",
        workers=plans,
        expectations={},
        deliveries_per_message=0,
        offered_rate=rate,
        publish_duration_s=clients / rate,
        params={"clients": clients, "rate": rate, "hold_s": hold_s},
        hold_s=hold_s,
    )
