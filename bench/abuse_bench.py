"""One abusive client at a time next to 100 well-behaved ones (issue 13), against a real broker.

For each attack a fresh ``xmq serve`` (one node, in memory, ``$SYS`` off; for the cross-node
row node-2 of a cluster on a throw-away ``redis-server``, node-1 started by the attack) is
started; 100
well-behaved MQTT 5 clients connect, subscribe and exchange QoS 1 messages (each publishes to
the next one's topic every 50 ms) while a prober opens a new connection every 100 ms; after a
warm-up the attack runs. Reported per attack: the well-behaved clients' CONNACK and delivery
p99 during the attack, the longest event-loop stall (the broker's 10 ms loop-lag sampler,
``xmq_event_loop_lag_max_seconds``, polled every 250 ms) and, in brackets, the CPU time the
loop's thread spent in the worst stall (``xmq_event_loop_busy_max_seconds``: the rest is
waiting for a CPU on a shared host), the ``/healthz`` statuses seen, RSS
before/after, what the broker refused (CONNACK, SUBACK, DISCONNECT, PUBACK reasons, caps and
drops, from ``/metrics``) and the tracebacks in its log, and which targets it missed: a
stall over 100 ms (wall clock or loop CPU), ``/healthz`` not 200, RSS growth over
``limits.memory_budget_bytes`` (64 MiB here) plus a 40 MiB baseline, any traceback. Not a
timed test: a table to read.

    .venv/bin/python bench/abuse_bench.py [--attack NAME ...] [--markdown]

The parts beside this file: abuse_broker (the broker subprocess), abuse_clients (the raw client,
the well-behaved ones) and abuse_attacks (the attacks); this one runs and measures them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:  # run as a file (python bench/abuse_bench.py): the modules beside it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.abuse_attacks import (  # noqa: E402
    PERSISTENT_CAP,
    RETAINED_BYTES_CAP,
    RETAINED_CAP,
    abandoned_scram,
    deep_retained,
    half_proxy_headers,
    many_client_ids,
    no_attack,
    offline_fanout,
    one_publish_fanout,
    peer_fanout,
    queued_flood,
    retained_caps,
    subscribe_hash_x1000,
    unauthenticated_flood,
    wrong_login_flood,
)
from bench.abuse_broker import BUDGET, Broker, cluster_config  # noqa: E402
from bench.abuse_clients import WellBehaved  # noqa: E402
from xmq.app.cluster_cli import start_redis  # noqa: E402
from xmq.auth.verifiers import HashPolicy, derive_scram_credentials, hash_password  # noqa: E402

GOOD_PASSWORD = "good-password"
BASELINE = 40 * 1024 * 1024
"""The RSS target: at most the budget plus this fixed baseline of growth during an attack
(as ``tests/integration/broker/test_memory_budget.py``)."""
MAX_STALL_S = 0.1


@dataclass
class Attack:
    name: str
    run: Callable[[Broker], Awaitable[str]]
    config: str = ""
    login: dict[str, object] = field(default_factory=dict)
    cluster: bool = False
    """Run against node-2 of a cluster on a Redis of its own (the attack starts node-1)."""


def _accounts(directory: Path) -> Path:
    scram = derive_scram_credentials(GOOD_PASSWORD, iterations=4096)
    path = directory / "accounts.yaml"
    verifier = hash_password(GOOD_PASSWORD, HashPolicy())
    path.write_text(f'users:\n  good:\n    password: "{verifier}"\n    scram: "{scram.encode()}"\n')
    return path


def attacks(workdir: Path) -> list[Attack]:
    accounts = _accounts(workdir)
    auth = f"auth: {{allow_anonymous: false, accounts_file: {accounts}}}\n"
    login: dict[str, object] = {"username": "good", "password": GOOD_PASSWORD.encode()}
    return [
        Attack("(no attack: the noise floor)", no_attack),
        Attack("subscribe # x1000 vs 5,000 retained", subscribe_hash_x1000),
        Attack("200 x # vs deep retained topics", deep_retained),
        Attack("offline fan-out flood (2,000 x 3,000)", offline_fanout),
        Attack("one PUBLISH to 20,000 offline sessions x10", one_publish_fanout),
        Attack("the same from another node (20,000 x10)", peer_fanout, cluster=True),
        Attack(
            "50,000 persistent client ids",
            many_client_ids,
            f"limits: {{max_persistent_sessions: {PERSISTENT_CAP}}}\n",
        ),
        Attack(
            "retained caps",
            retained_caps,
            f"limits: {{max_retained_messages: {RETAINED_CAP}, "
            f"max_retained_bytes: {RETAINED_BYTES_CAP}}}\n",
        ),
        Attack("abandoned SCRAM x50", abandoned_scram, auth, login),
        Attack("unauthenticated flood", unauthenticated_flood, auth, login),
        Attack("wrong-login flood, 60 addresses", wrong_login_flood, auth, login),
        Attack(
            "half-sent PROXY headers x1000",
            half_proxy_headers,
            "listeners:\n  - {name: mqtt, protocol: tcp, host: 127.0.0.1, port: 0}\n"
            "  - {name: proxied, protocol: tcp, host: 127.0.0.1, port: 0, "
            "proxy_protocol: required}\n",
        ),
        Attack(
            f"queued flood vs {BUDGET >> 20} MiB budget",
            queued_flood,
            "limits: {max_queued_messages: 10000000, max_queued_bytes: 4000000000}\n",
        ),
    ]


@dataclass
class Row:
    attack: str
    connack_p99_ms: float
    delivery_p99_ms: float
    failed_connects: int
    stall_ms: float
    busy_ms: float
    healthz: str
    rss_before_mb: float
    rss_after_mb: float
    refused: str
    tracebacks: int
    outcome: str
    load: float  # the host's 1-minute load average at the end of the attack
    own_lag_ms: float  # this process's longest loop lag: the well-behaved clients' own stall

    def missed(self) -> list[str]:
        """The targets this attack missed: stall (wall clock, loop CPU), /healthz, RSS
        growth over the budget plus the baseline, tracebacks."""
        missed = []
        if self.stall_ms > MAX_STALL_S * 1000:
            missed.append("wall stall")
        if self.busy_ms > MAX_STALL_S * 1000:
            missed.append("CPU stall")
        if "503" in self.healthz or "no answer" in self.healthz:
            missed.append("/healthz")
        if self.rss_after_mb - self.rss_before_mb > (BUDGET + BASELINE) / 2**20:
            missed.append("RSS")
        if self.tracebacks:
            missed.append("tracebacks")
        return missed


def _p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


_REFUSALS = (
    "xmq_connects_refused_total",
    "xmq_subscriptions_refused_total",
    "xmq_disconnects_total",
    "xmq_cap_refusals_total",
    "xmq_messages_dropped_by_reason_total",
)


def _refused(before: dict[str, float], after: dict[str, float]) -> str:
    parts = []
    for key, value in sorted(after.items()):
        if key.startswith(_REFUSALS) and (delta := value - before.get(key, 0)) > 0:
            kind = key.split("{")[0].removeprefix("xmq_").removesuffix("_total")
            label = key[key.index('"') + 1 : -2] if "{" in key else ""
            parts.append(f"{kind} {label} {int(delta)}")
    return "; ".join(parts) or "-"


async def _watch(
    broker: Broker, stalls: list[float], busy: list[float], health: dict[str, int]
) -> None:
    while True:
        status, _ = await asyncio.to_thread(broker.http, "/healthz", 2.0)
        key = str(status) if status else "no answer"
        health[key] = health.get(key, 0) + 1
        metrics = await asyncio.to_thread(broker.metrics)
        stalls.append(metrics.get("xmq_event_loop_lag_max_seconds", 0.0))
        busy.append(metrics.get("xmq_event_loop_busy_max_seconds", 0.0))
        await asyncio.sleep(0.25)


async def _own_lag(lags: list[float]) -> None:
    """This process's loop lag, sampled every 10 ms: the well-behaved clients and the
    attacker share the loop, so a CONNACK or delivery time is the broker's only while this
    stays small."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + 0.01
        await asyncio.sleep(0.01)
        lags.append(loop.time() - due)


async def measure(attack: Attack) -> Row:
    if not attack.cluster:
        return await _measure(attack, attack.config)
    with tempfile.TemporaryDirectory(prefix="xmq-abuse-redis-") as data_dir:
        redis_proc, url = start_redis(data_dir)
        try:
            return await _measure(attack, attack.config + cluster_config(url), "node-2")
        finally:
            redis_proc.terminate()
            redis_proc.wait()


async def _measure(attack: Attack, config: str, node_id: str | None = None) -> Row:
    if "listeners:" not in config:
        config += "listeners:\n  - {name: mqtt, protocol: tcp, host: 127.0.0.1, port: 0}\n"
    broker = Broker(config, node_id)
    good = WellBehaved(broker, attack.login)
    try:
        await good.start()
        await asyncio.sleep(2)
        rss_before = broker.rss()
        before = await asyncio.to_thread(broker.metrics)
        stalls: list[float] = []
        busy: list[float] = []
        health: dict[str, int] = {}
        watcher = asyncio.create_task(_watch(broker, stalls, busy, health))
        own: list[float] = [0.0]
        own_watcher = asyncio.create_task(_own_lag(own))
        good.seen.recording = True
        outcome = await asyncio.wait_for(attack.run(broker), 300)
        await asyncio.sleep(3)
        good.seen.recording = False
        watcher.cancel()
        own_watcher.cancel()
        after = await asyncio.to_thread(broker.metrics)
        stalls.append(after.get("xmq_event_loop_lag_max_seconds", 0.0))
        busy.append(after.get("xmq_event_loop_busy_max_seconds", 0.0))
        return Row(
            attack.name,
            _p99(good.seen.connack_s),
            _p99(good.seen.delivery_s),
            good.seen.failed_connects,
            max(stalls) * 1000,
            max(busy) * 1000,
            ", ".join(f"{k}: {v}" for k, v in sorted(health.items())),
            rss_before / 2**20,
            broker.rss() / 2**20,
            _refused(before, after),
            broker.tracebacks(),
            outcome,
            os.getloadavg()[0],
            max(own) * 1000,
        )
    finally:
        good.stop()
        broker.stop()


def markdown(rows: list[Row]) -> str:
    lines = [
        "| attack | CONNACK p99 | delivery p99 | longest stall (CPU) | /healthz "
        "| RSS before → after "
        "| refused (reason: count) | tracebacks | what the attacker got | load "
        "| bench's own lag | targets |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        failed = f" ({r.failed_connects} failed)" if r.failed_connects else ""
        lines.append(
            f"| {r.attack} | {r.connack_p99_ms:.0f} ms{failed} | {r.delivery_p99_ms:.0f} ms "
            f"| {r.stall_ms:.0f} ms ({r.busy_ms:.0f}) | {r.healthz} | {r.rss_before_mb:.0f} → "
            f"{r.rss_after_mb:.0f} MB | {r.refused} | {r.tracebacks} | {r.outcome} "
            f"| {r.load:.1f} | {r.own_lag_ms:.0f} ms "
            f"| {'missed: ' + ', '.join(r.missed()) if r.missed() else 'met'} |"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attack", action="append", help="substring of the attacks to run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="xmq-abuse-") as workdir:
        chosen = [
            attack
            for attack in attacks(Path(workdir))
            if not args.attack or any(part in attack.name for part in args.attack)
        ]
        rows = []
        for attack in chosen:
            print(f"-- {attack.name}", file=sys.stderr, flush=True)
            try:
                row = await measure(attack)
            except Exception as error:  # report the attack as not measured, run the others
                print(f"{attack.name}: {error!r}", file=sys.stderr, flush=True)
                continue
            print(row, file=sys.stderr, flush=True)
            rows.append(row)
    print(markdown(rows))
    print(f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())} at the end")


if __name__ == "__main__":
    asyncio.run(main())
