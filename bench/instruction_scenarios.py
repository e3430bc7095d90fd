"""The scenarios ``bench/instructions.py`` measures: N, rate, nodes and what each needs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xmq.bench.plan import Target
from xmq.bench.scenarios import (
    CommonOptions,
    ScenarioPlan,
    connections,
    fanout,
    p2p,
    persistence,
)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    units: int
    """N: deliveries (or clients) of the larger run."""
    rate: float
    """Deliveries (clients) per second offered in the larger run (half that in the other)."""
    build: Callable[[Target, CommonOptions, int, float], ScenarioPlan]
    nodes: int = 1
    redis: bool = False
    max_queued_writes: int = 0
    mosquitto: bool = True
    settle_s: float = 0.0
    """Wait after set-up before the window opens (subscriptions spreading between nodes)."""
    tail_s: float = 10.0
    """The window closes this long after the publishing ends (the last delivery arrived well
    before: else the run is flagged ``overran``), in both runs: their windows are the same
    length, so what a broker does per second whatever it carries cancels exactly."""


def _fanout(target: Target, options: CommonOptions, units: int, rate: float) -> ScenarioPlan:
    return fanout(target, options, publishers=5, topics=5, subscribers=100, rate=rate)


def _p2p(target: Target, options: CommonOptions, units: int, rate: float) -> ScenarioPlan:
    return p2p(target, options, pairs=100, rate=rate)


def _durable(target: Target, options: CommonOptions, units: int, rate: float) -> ScenarioPlan:
    return persistence(target, options, pairs=100, rate=rate, session_expiry=3600)


def _connect(target: Target, options: CommonOptions, units: int, rate: float) -> ScenarioPlan:
    return connections(target, options, clients=units, rate=rate, hold_s=1.0)


# Rates low enough that the broker, ~50x slower under callgrind and sharing a busy machine,
# is idle most of the time: each message (each publish's fan-out) is handled alone in its loop
# turn whatever else runs, so the counts do not depend on the machine's load.
SCENARIOS = {
    "fanout": Scenario("fanout", 6000, 200.0, _fanout),
    "p2p": Scenario("p2p", 1000, 50.0, _p2p),
    # A cluster node renews its lease and checks its links every few seconds: more messages
    # (and a longer run) so that the difference of two runs is not lost in that; at 25/s, as
    # at 50/s the two nodes under callgrind fell behind (p99 0.1-2.8 s) on a shared machine.
    "cross-node": Scenario(
        "cross-node", 2000, 25.0, _p2p, nodes=2, redis=True, mosquitto=False, settle_s=5.0
    ),
    "durable": Scenario("durable", 2000, 50.0, _durable, redis=True, mosquitto=False),
    "connect": Scenario("connect", 300, 15.0, _connect),
}
