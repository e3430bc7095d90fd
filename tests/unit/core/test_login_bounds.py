"""What a connection holds before its CONNACK, the connect deadline's states, will checks."""

from __future__ import annotations

import asyncio

import pytest

from xmq.auth.acl import AclRule, Action, Permission, RuleAcl
from xmq.codec.packets import Connect, Pingreq, Will
from xmq.codec.properties import Properties
from xmq.core.auth_ports import (
    AllowAll,
    AnonymousAuthenticator,
    AuthExchange,
    AuthStep,
    Credentials,
)
from xmq.core.broker import Broker
from xmq.core.connection_states import AUTHENTICATING, CLOSED, CONNECTED
from xmq.core.login_input import (
    MAX_HELD_PACKETS,
    MAX_PENDING_BEFORE_CONNACK,
    accepts_pending,
    login_overdue,
)
from xmq.core.session_access import will_refusal
from xmq.core.settings import CoreSettings

from .test_login_eager import _conn, _SlowAuthenticator


async def test_pipelined_packets_are_held_up_to_a_bound() -> None:
    conn, link = _conn(Broker(CoreSettings()), _SlowAuthenticator())
    conn.handle(Connect(client_id="a", protocol_version=5))
    assert conn.state == AUTHENTICATING and login_overdue(conn)
    for _ in range(MAX_HELD_PACKETS):
        conn.handle(Pingreq())
    assert conn.state == AUTHENTICATING and accepts_pending(conn, 10 * MAX_PENDING_BEFORE_CONNACK)
    conn.handle(Pingreq())
    assert conn.state == CLOSED and link.out[0] == 0x20 and link.out[3] == 0x97  # Quota exceeded
    conn.connection_lost()  # cancels the login still waiting for its authenticator


class _Exchanging(_SlowAuthenticator):
    """Starts exchanges whose steps answer once the test sets ``answer``."""

    def start_exchange(self, method: str, credentials: Credentials) -> AuthExchange | None:
        return self

    async def step(self, data: bytes | None) -> AuthStep:
        await self.answer.wait()
        return AuthStep(0x18)


async def test_during_an_exchange_only_auth_may_come_and_little_may_wait() -> None:
    conn, link = _conn(Broker(CoreSettings()), _Exchanging())
    props = Properties()
    props.authentication_method = "SCRAM-SHA-256"
    conn.handle(Connect(client_id="a", protocol_version=5, properties=props))
    assert accepts_pending(conn, MAX_PENDING_BEFORE_CONNACK)
    assert not accepts_pending(conn, MAX_PENDING_BEFORE_CONNACK + 1)
    conn.handle(Pingreq())
    assert conn.state == CLOSED and link.out[0] == 0x20 and link.out[3] == 0x82  # Protocol error
    assert not login_overdue(conn)
    step = conn.auth_task
    assert step is not None
    conn.connection_lost()  # cancels the exchange's step
    await asyncio.wait([step], timeout=2)  # (the bound only if it were not cancelled)
    assert step.cancelled()


async def test_a_connected_client_is_not_under_the_connect_deadline() -> None:
    conn, _ = _conn(Broker(CoreSettings()), AnonymousAuthenticator())
    assert login_overdue(conn)  # waiting for its CONNECT
    conn.handle(Connect(client_id="a", protocol_version=5))
    assert conn.state == CONNECTED
    assert not login_overdue(conn) and accepts_pending(conn, 10**9)


RULES = [
    AclRule(Permission.DENY, Action.PUBLISH, "devices/+/locked/#", retain=True),
    AclRule(Permission.ALLOW, Action.BOTH, "devices/%u/#"),
]


@pytest.mark.parametrize(
    ("topic", "qos", "retain", "code"),
    [
        ("devices/a/x", 1, True, None),
        ("devices/b/x", 0, False, 0x87),
        ("devices/a/locked/x", 0, True, 0x87),
        ("devices/a/locked/x", 0, False, None),
        ("$SYS/x", 0, False, 0x87),
        ("", 0, False, 0x90),
        ("devices/a/#", 0, False, 0x90),
        ("devices/a/x/y/z", 0, False, 0x90),  # deeper than max_topic_levels (4)
    ],
)
def test_a_will_is_checked_like_a_publish(
    topic: str, qos: int, retain: bool, code: int | None
) -> None:
    acl = RuleAcl(RULES, username="a", groups=(), client_id="c")
    refusal = will_refusal(Will(topic, b"x", qos, retain), acl, 65535, 4)
    assert (refusal[0] if refusal else None) == code
    assert will_refusal(Will("$SYS/x", b"", 0, False), AllowAll(), 65535, 0) is not None
