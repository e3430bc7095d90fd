"""Logging in without a task when the authenticator does not wait; with one when it does."""

from __future__ import annotations

import asyncio

import pytest

from xmq.auth.acl import RuleAcl
from xmq.codec.packets import Connack, Connect, Disconnect, Pingreq, Subscribe
from xmq.codec.packets import SubscriptionRequest as Request
from xmq.codec.properties import Properties
from xmq.codec.writer import encode
from xmq.core.auth_ports import (
    AllowAll,
    AnonymousAuthenticator,
    AuthDecision,
    ClientAcl,
    Credentials,
)
from xmq.core.broker import Broker
from xmq.core.connack_encoding import plain_connack
from xmq.core.connection import ClientConnection
from xmq.core.connection_states import AUTHENTICATING, CLOSED, CONNECTED
from xmq.core.inline_auth import is_inline_pair
from xmq.core.settings import CoreSettings
from xmq.protocol.connect_terms import ServerLimits, connack_properties, negotiate_connect

from .test_deadline_wheel import _Link


class _SlowAuthenticator(AnonymousAuthenticator):
    """Answers once the test sets ``answer`` (an account store that takes a while)."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()

    async def authenticate(self, credentials: Credentials) -> AuthDecision:
        await self.answer.wait()
        return AuthDecision(0, credentials.username)


class _BrokenAuthenticator(AnonymousAuthenticator):
    def __init__(self, wait: bool) -> None:
        super().__init__()
        self.wait = wait

    async def authenticate(self, credentials: Credentials) -> AuthDecision:
        if self.wait:
            await asyncio.sleep(0)
        raise RuntimeError("account store broken")


def _conn(broker: Broker, authenticator: AnonymousAuthenticator) -> tuple[ClientConnection, _Link]:
    link = _Link()
    return ClientConnection(broker, link, authenticator, AllowAll()), link


async def test_an_in_memory_login_is_accepted_within_handle() -> None:
    broker = Broker(CoreSettings())
    conn, link = _conn(broker, AnonymousAuthenticator())
    conn.handle(Connect(client_id="a", protocol_version=5))
    assert conn.state == CONNECTED and conn.auth_task is None
    assert link.out.startswith(b"\x20")  # CONNACK, without waiting for a loop tick
    conn.handle(Pingreq())
    assert link.out.endswith(b"\xd0\x00")


async def test_a_waiting_authenticator_holds_packets_and_replays_them_in_order() -> None:
    broker = Broker(CoreSettings())
    authenticator = _SlowAuthenticator()
    conn, link = _conn(broker, authenticator)
    conn.handle(Connect(client_id="a", protocol_version=5))
    conn.handle(Subscribe(1, [Request("t/1", 1)]))
    conn.handle(Pingreq())
    task = conn.auth_task
    assert conn.state == AUTHENTICATING and task is not None and link.out == b""
    for _ in range(3):  # the task waits for the account store: nothing goes meanwhile
        await asyncio.sleep(0)
    assert conn.state == AUTHENTICATING and link.out == b""
    authenticator.answer.set()
    await task
    assert conn.state == CONNECTED and conn.auth_task is None
    assert link.out[0] == 0x20  # CONNACK, then SUBACK, then PINGRESP
    suback_at = link.out[1] + 2
    assert link.out[suback_at] == 0x90 and link.out.endswith(b"\xd0\x00")
    assert "t/1" in broker.sessions["a"].subscriptions


async def test_a_connection_lost_while_authenticating_cancels_the_task() -> None:
    broker = Broker(CoreSettings())
    conn, link = _conn(broker, _SlowAuthenticator())
    conn.handle(Connect(client_id="a", protocol_version=5))
    task = conn.auth_task
    assert task is not None
    conn.connection_lost()
    await asyncio.wait([task], timeout=2)  # (the bound only if it were not cancelled)
    assert task.cancelled() and conn.state == CLOSED and link.out == b""
    assert "a" not in broker.sessions


@pytest.mark.parametrize("wait", [False, True])
async def test_an_authenticator_error_refuses_with_0x88(wait: bool) -> None:
    broker = Broker(CoreSettings())
    conn, link = _conn(broker, _BrokenAuthenticator(wait))
    conn.handle(Connect(client_id="a", protocol_version=5))
    task = conn.auth_task
    assert task is not None
    await asyncio.wait([task])  # its done callback (the refusal) runs before this wait's
    assert conn.state == CLOSED and link.closed
    assert link.out[0] == 0x20 and link.out[3] == 0x88
    assert broker.stats.refused_by_reason == {0x88: 1}


async def test_disconnect_in_the_same_read_as_connect() -> None:
    broker = Broker(CoreSettings())
    conn, link = _conn(broker, AnonymousAuthenticator())
    conn.handle(Connect(client_id="a", protocol_version=4))
    conn.handle(Disconnect(0))
    assert conn.state == CLOSED and link.closed and link.out == b"\x20\x02\x00\x00"
    assert broker.stats.clients_connected == 0


@pytest.mark.parametrize(
    "limits",
    [
        ServerLimits(),
        ServerLimits(maximum_qos=1, retain_available=False, wildcard_available=False),
        ServerLimits(shared_available=False, subscription_ids_available=False),
    ],
)
@pytest.mark.parametrize("present", [False, True])
def test_the_cached_connack_is_the_encoded_one(limits: ServerLimits, present: bool) -> None:
    terms = negotiate_connect(Connect(client_id="a", protocol_version=5), limits, str)
    full = encode(Connack(present, 0, connack_properties(terms, limits, None)), 5)
    assert plain_connack(limits, present) == full
    assert plain_connack(limits, present) is plain_connack(limits, present)


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("present", [False, True])
async def test_the_mqtt_311_connack(version: int, present: bool) -> None:
    broker = Broker(CoreSettings())
    if present:
        _conn(broker, AnonymousAuthenticator())[0].handle(
            Connect(client_id="a", protocol_version=version, clean_start=False)
        )
    conn, link = _conn(broker, AnonymousAuthenticator())
    conn.handle(Connect(client_id="a", protocol_version=version, clean_start=not present))
    assert bytes(link.out) == encode(Connack(present, 0), version)


async def test_an_mqtt5_connack_with_extras_is_not_the_cached_one() -> None:
    broker = Broker(CoreSettings())
    conn, link = _conn(broker, AnonymousAuthenticator())
    props = Properties()
    props.session_expiry_interval = 0xFFFF_FFFF
    props.request_response_information = 1
    conn.handle(Connect(client_id="", protocol_version=5, properties=props))
    assert conn.state == CONNECTED
    assert bytes(link.out) != plain_connack(broker.settings.limits, False)
    assert b"response/" + conn.client_id.encode() in link.out


class _PlainAuthenticator:
    """An authenticator not marked ``inline`` (e.g. an adapter's): always a task."""

    async def authenticate(self, credentials: Credentials) -> AuthDecision:
        return AuthDecision(0, credentials.username)

    def start_exchange(self, method: str, credentials: Credentials) -> None:
        return None


async def test_an_authenticator_not_marked_inline_runs_in_a_task() -> None:
    broker = Broker(CoreSettings())
    link = _Link()
    conn = ClientConnection(broker, link, _PlainAuthenticator(), AllowAll())
    conn.handle(Connect(client_id="a", protocol_version=5))
    conn.handle(Pingreq())
    assert conn.state == AUTHENTICATING and conn.auth_task is not None
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert conn.state == CONNECTED and link.out[0] == 0x20 and link.out.endswith(b"\xd0\x00")


class _RefusingAtOnce(AnonymousAuthenticator):
    """Overrides only the coroutine (an account check that happens not to wait)."""

    async def authenticate(self, credentials: Credentials) -> AuthDecision:
        return AuthDecision(0x86, reason_string="wrong password")


async def test_a_subclass_that_overrides_only_authenticate_is_asked_not_bypassed() -> None:
    broker = Broker(CoreSettings())
    conn, link = _conn(broker, _RefusingAtOnce())
    conn.handle(Connect(client_id="a", protocol_version=5))
    assert conn.state == AUTHENTICATING and conn.auth_task is not None  # a task: not inline
    await conn.auth_task
    assert conn.state == CLOSED and link.out[0] == 0x20 and link.out[3] == 0x86


class _PickyAcl(AllowAll):
    """Overrides only ``acl_for``: its ``acl_now`` (inherited) is not its answer."""

    async def acl_for(self, decision: AuthDecision, client_id: str) -> ClientAcl:
        return RuleAcl([], username=decision.username, groups=(), client_id=client_id)


def test_a_login_is_inline_only_when_both_answers_come_from_one_class() -> None:
    assert is_inline_pair(AnonymousAuthenticator(), AllowAll())
    assert not is_inline_pair(_RefusingAtOnce(), AllowAll())
    assert not is_inline_pair(AnonymousAuthenticator(), _PickyAcl())
