"""A claim whose reply was on its way when another node took the session over (TAKEOVER) is
not applied: the takeover is the later event (linearizable takeover)."""

from __future__ import annotations

import asyncio

import pytest

from xmq.codec.packets import MQTT_5, Connect
from xmq.core.broker import Broker
from xmq.core.cluster_claims import claim_cluster_wide
from xmq.core.cluster_ports import (
    ClaimOutcome,
    ClaimResult,
    ClusterUnavailableError,
    NodeIdentity,
)
from xmq.core.settings import CoreSettings
from xmq.protocol.connect_terms import negotiate_connect


class SlowDirectory:
    """A session directory whose claim answers when the test says so."""

    def __init__(self) -> None:
        self.reply: asyncio.Future[ClaimResult] = asyncio.get_running_loop().create_future()

    async def claim(self, client_id: str, **_: object) -> ClaimResult:
        return await self.reply

    def release(self, client_id: str) -> None:
        pass


async def _claiming(broker: Broker) -> tuple[SlowDirectory, asyncio.Task[object]]:
    directory = SlowDirectory()
    broker.identity = NodeIdentity("node-1", 3, online=True)
    broker.directory = directory
    connect = Connect(protocol_version=MQTT_5, client_id="c", clean_start=False)
    terms = negotiate_connect(connect, broker.settings.limits, broker.new_client_id)
    task = asyncio.get_running_loop().create_task(claim_cluster_wide(broker, terms))
    await asyncio.sleep(0)
    assert broker.claiming == {"c": 1}
    return directory, task


async def test_a_claim_reply_that_predates_a_takeover_is_not_applied() -> None:
    broker = Broker(CoreSettings())
    directory, task = await _claiming(broker)
    broker.revoked_claims.add("c")  # what TAKEOVER does while the claim is in flight
    directory.reply.set_result(ClaimResult(ClaimOutcome.CLAIMED))
    with pytest.raises(ClusterUnavailableError, match="taken over"):
        await task
    assert not broker.claiming and not broker.revoked_claims


async def test_a_claim_without_a_takeover_is_applied() -> None:
    broker = Broker(CoreSettings())
    directory, task = await _claiming(broker)
    directory.reply.set_result(ClaimResult(ClaimOutcome.CLAIMED))
    assert await task is None


async def test_a_node_rejoining_refuses_claims_until_its_orphans_are_loaded() -> None:
    """Back online under a new epoch: until its previous run's sessions are loaded as orphans
    a CONNECT gets 0x88 (a publish would find no route for them and get 0x10)."""
    broker = Broker(CoreSettings())
    broker.identity = NodeIdentity("node-1", 4, online=True)
    broker.identity.rejoining = True
    broker.directory = SlowDirectory()
    connect = Connect(protocol_version=MQTT_5, client_id="c", clean_start=False)
    terms = negotiate_connect(connect, broker.settings.limits, broker.new_client_id)
    with pytest.raises(ClusterUnavailableError, match="rejoining"):
        await claim_cluster_wide(broker, terms)
    assert not broker.claiming
