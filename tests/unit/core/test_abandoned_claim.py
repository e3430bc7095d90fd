"""A claim whose client went away before the reply: the session is parked here, not lost.

Redis has made this node the owner by the time the reply arrives. Before, the client's
connection loss cancelled the login task, the reply was never read, and the session was owned
in Redis by a node that did not hold it: nothing routed its subscriptions here, nothing
expired it. Now the claim runs to its end and the session is held as if its client had
connected and dropped at once (no will: its CONNECT was never accepted).
"""

from __future__ import annotations

import asyncio

from xmq.codec.packets import MQTT_5, Connect, Will
from xmq.codec.properties import Properties
from xmq.core.auth_ports import AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.cluster_ports import (
    ClaimOutcome,
    ClaimResult,
    NodeIdentity,
    RestoredSession,
    SubscriptionSpec,
)
from xmq.core.connection_states import CLAIMING, CLOSED
from xmq.core.settings import CoreSettings

from .test_login_eager import _conn


class _SlowDirectory:
    """A session directory whose claim answers when the test says so."""

    def __init__(self) -> None:
        self.reply: asyncio.Future[ClaimResult] = asyncio.get_running_loop().create_future()
        self.released: list[str] = []

    async def claim(self, client_id: str, **_: object) -> ClaimResult:
        return await self.reply

    def release(self, client_id: str) -> None:
        self.released.append(client_id)


def _connect(expiry: int) -> Connect:
    props = Properties(session_expiry_interval=expiry) if expiry else None
    will = Will("c/will", b"gone", 1, False, None)
    return Connect(
        protocol_version=MQTT_5, client_id="c", clean_start=False, properties=props, will=will
    )


async def _abandoned(expiry: int, restored: RestoredSession) -> Broker:
    broker = Broker(CoreSettings())
    broker.identity = NodeIdentity("node-1", 3, online=True)
    directory = _SlowDirectory()
    broker.directory = directory
    conn, _ = _conn(broker, AnonymousAuthenticator())
    conn.handle(_connect(expiry))
    for _ in range(3):
        await asyncio.sleep(0)
    assert conn.state == CLAIMING and broker.claiming == {"c": 1}
    conn.connection_lost()  # the client left; Redis still runs the claim
    assert conn.state == CLOSED
    if not directory.reply.done():  # (the code before cancelled the claim with the login)
        directory.reply.set_result(ClaimResult(ClaimOutcome.CLAIMED, restored=restored))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not broker.claiming
    return broker


async def test_a_persistent_session_claimed_for_a_gone_client_is_parked_here() -> None:
    stored = RestoredSession(subscriptions=[SubscriptionSpec("t/#", "t/#", 1)], incarnation="i1")
    broker = await _abandoned(600, stored)
    session = broker.sessions.get("c")
    assert session is not None, "the claimed session is not held by the node that owns it"
    assert session.connection is None
    assert "t/#" in session.subscriptions  # routed to it here
    assert session.will is None  # its CONNECT was never accepted: no will
    assert session.wheel_slot  # parked: its expiry is filed
    assert broker.stats.clients_connected == 0 and not broker.connections


async def test_a_clean_session_claimed_for_a_gone_client_is_not_kept() -> None:
    broker = await _abandoned(0, RestoredSession(stored=False))
    assert "c" not in broker.sessions
