"""Real MQTT clients against an in-process broker whose Authenticator/Authorizer are the
account stores: every reason code a client can see from authentication and ACLs."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.support.paho_client import V5, V311, PahoClient
from tests.support.raw_client import RawClient
from xmq.app.server import core_settings
from xmq.auth import postgres_admin as admin
from xmq.auth.acl import AclRule, Action, Permission
from xmq.auth.file_accounts import FileAccounts
from xmq.auth.postgres_accounts import PostgresAccounts, PostgresAccountsConfig
from xmq.auth.postgres_schema import migrate
from xmq.auth.scram import ScramClient
from xmq.auth.verifiers import HashPolicy, derive_scram_credentials, hash_password
from xmq.codec.packets import MQTT_3_1_1, Auth, Connack, Connect, Disconnect
from xmq.codec.properties import Properties
from xmq.config import BrokerConfig, ListenerConfig
from xmq.core.auth_ports import Authenticator, Authorizer
from xmq.core.broker import Broker
from xmq.net.listeners import ListenerSet

pytestmark = pytest.mark.integration

FAST = HashPolicy(pbkdf2_iterations=1000, scram_iterations=512)


def user_entry(password: str, **extra: Any) -> dict[str, Any]:
    return {
        "password": hash_password(password, FAST),
        "scram": derive_scram_credentials(password, iterations=512).encode(),
        **extra,
    }


ACCOUNTS = {
    "users": {"alice": user_entry("wonderland"), "dave": user_entry("disabled", enabled=False)},
    "acl": [
        {"permission": "allow", "action": "both", "topic": "users/%u/#"},
        {"permission": "allow", "action": "subscribe", "topic": "public/#"},
    ],
}


class Node:
    def __init__(self, broker: Broker, listeners: ListenerSet) -> None:
        self.broker = broker
        self.listeners = listeners
        self.port = listeners.bound[0].port


@contextlib.asynccontextmanager
async def running(authenticator: Authenticator, authorizer: Authorizer) -> AsyncIterator[Node]:
    config = BrokerConfig()
    broker = Broker(core_settings(config))
    listeners = ListenerSet(broker, authenticator, authorizer, config.mqtt.max_packet_size)
    await listeners.start((ListenerConfig(host="127.0.0.1", port=0),))
    try:
        yield Node(broker, listeners)
    finally:
        listeners.stop_accepting()
        for conn in list(broker.connections):
            conn.close_with(0x8B, "test over")
        try:
            await asyncio.wait_for(listeners.idle.wait(), 2)
        except TimeoutError:
            for client in list(listeners.clients):
                client.abort()
        await asyncio.sleep(0)  # let the aborted transports close


@pytest.fixture
async def file_node() -> AsyncIterator[Node]:
    accounts = FileAccounts(ACCOUNTS, hash_policy=FAST)
    async with running(accounts, accounts) as node:
        yield node


def paho_connect(port: int, version: Any, username: str | None, password: str | None) -> int:
    if version == V311:  # paho reports 3.1.1 return codes as MQTT 5 ones: read the wire
        return raw_connect(port, MQTT_3_1_1, username, password)
    client = PahoClient(port, "c-" + (username or "anon"), version=version)
    if username is not None:
        client.client.username_pw_set(username, password)
    try:
        return client.connect().reason
    finally:
        client.close()


@pytest.mark.spec("5:MQTT-3.1.4-2")
@pytest.mark.parametrize(
    ("version", "username", "password", "code"),
    [
        (V5, "alice", "wonderland", 0x00),
        (V5, "alice", "wrong", 0x86),
        (V5, "nobody", "x", 0x86),
        (V5, "dave", "disabled", 0x87),
        (V5, None, None, 0x86),
        (V311, "alice", "wonderland", 0x00),
        (V311, "alice", "wrong", 0x04),
        (V311, "dave", "disabled", 0x05),
    ],
    ids=[
        "v5-ok",
        "v5-wrong",
        "v5-unknown",
        "v5-disabled",
        "v5-anonymous",
        "v311-ok",
        "v311-wrong",
        "v311-disabled",
    ],
)
async def test_connect_reason_codes(
    file_node: Node, version: Any, username: str | None, password: str | None, code: int
) -> None:
    result = await asyncio.to_thread(paho_connect, file_node.port, version, username, password)
    assert result == code


def raw_connect(port: int, version: int, username: str | None, password: str | None) -> int:
    client = RawClient(port, version=version)
    try:
        client.send_packet(
            Connect(
                protocol_version=version,
                client_id="raw",
                username=username,
                password=password.encode() if password is not None else None,
            )
        )
        ack = client.read_packet()
        assert isinstance(ack, Connack)
        return ack.reason_code
    finally:
        client.close()


def publish_and_subscribe(port: int, version: Any) -> tuple[int, int, list[int], list[int]]:
    client = PahoClient(port, "alice-1", version=version)
    client.client.username_pw_set("alice", "wonderland")
    try:
        assert client.connect().reason == 0
        allowed = client.publish("users/alice/x", b"1", qos=1)
        denied = client.publish("users/bob/x", b"1", qos=1)
        sub_ok = client.subscribe("public/#", qos=1)
        sub_denied = client.subscribe("users/bob/#", qos=1)
        return allowed, denied, sub_ok, sub_denied
    finally:
        client.close()


async def test_publish_and_subscribe_denied(file_node: Node) -> None:
    allowed, denied, sub_ok, sub_denied = await asyncio.to_thread(
        publish_and_subscribe, file_node.port, V5
    )
    assert (allowed, denied, sub_ok, sub_denied) == (0x10, 0x87, [1], [0x87])  # 0x10: no subscriber
    _, _, sub_ok, sub_denied = await asyncio.to_thread(publish_and_subscribe, file_node.port, V311)
    assert (sub_ok, sub_denied) == ([1], [0x80])


def scram_connect(port: int, username: str, password: str) -> tuple[int, bool]:
    """SCRAM-SHA-256 over CONNECT / AUTH / CONNACK; (reason, server signature verified)."""
    client = RawClient(port)
    scram = ScramClient(username, password)
    try:
        client.send_packet(
            Connect(
                client_id="scram-1",
                properties=Properties(
                    authentication_method="SCRAM-SHA-256", authentication_data=scram.client_first()
                ),
            )
        )
        reply = client.read_packet(timeout=3)
        if isinstance(reply, Connack):
            return reply.reason_code, False
        assert isinstance(reply, Auth) and reply.reason_code == 0x18 and reply.properties
        server_first = reply.properties.authentication_data
        assert server_first is not None
        final = scram.client_final(server_first)
        client.send_packet(
            Auth(
                0x18,
                Properties(authentication_method="SCRAM-SHA-256", authentication_data=final),
            )
        )
        ack = client.read_packet(timeout=3)
        assert isinstance(ack, Connack)
        if ack.reason_code != 0:
            return ack.reason_code, False
        assert ack.properties is not None and ack.properties.authentication_data is not None
        scram.verify_server_final(ack.properties.authentication_data)
        return 0, True
    finally:
        client.close()


@pytest.mark.spec("5:MQTT-4.12.0-2")
@pytest.mark.parametrize(
    ("username", "password", "expected"),
    [
        ("alice", "wonderland", (0, True)),
        ("alice", "nope", (0x86, False)),
        ("ghost", "x", (0x86, False)),
        ("dave", "disabled", (0x87, False)),
    ],
    ids=["ok", "wrong-password", "unknown-user", "disabled"],
)
async def test_scram_enhanced_authentication(
    file_node: Node, username: str, password: str, expected: tuple[int, bool]
) -> None:
    assert await asyncio.to_thread(scram_connect, file_node.port, username, password) == expected


def raw_connect_method(port: int, method: str) -> int:
    client = RawClient(port)
    try:
        client.send_packet(
            Connect(client_id="m", properties=Properties(authentication_method=method))
        )
        ack = client.read_packet()
        assert isinstance(ack, Connack)
        return ack.reason_code
    finally:
        client.close()


@pytest.mark.spec("5:MQTT-4.12.0-1")
async def test_unknown_method(file_node: Node) -> None:
    assert await asyncio.to_thread(raw_connect_method, file_node.port, "KERBEROS") == 0x8C


def connect_and_wait_for_disconnect(port: int, ready: Any) -> int | None:
    client = RawClient(port)
    try:
        client.send_packet(
            Connect(client_id="alice-live", username="alice", password=b"wonderland")
        )
        ack = client.read_packet()
        assert isinstance(ack, Connack) and ack.reason_code == 0, ack
        ready()
        packet = client.read_packet(timeout=10)
        return packet.reason_code if isinstance(packet, Disconnect) else None
    finally:
        client.close()


async def test_postgres_change_disconnects_a_connected_client(postgres_dsn: str) -> None:
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await migrate(conn)
        await admin.add_user(conn, "alice", b"wonderland", policy=FAST)
        await admin.add_rule(conn, AclRule(Permission.ALLOW, Action.BOTH, "users/%u/#"))
        store = PostgresAccounts(PostgresAccountsConfig(postgres_dsn, hash_policy=FAST))
        async with running(store, store) as node:
            store.events = node.broker
            await store.start()
            assert store._listener is not None
            await asyncio.wait_for(store._listener.wait_connected(), 10)
            loop = asyncio.get_running_loop()
            connected = asyncio.Event()
            waiter = asyncio.ensure_future(
                asyncio.to_thread(
                    connect_and_wait_for_disconnect,
                    node.port,
                    lambda: loop.call_soon_threadsafe(connected.set),
                )
            )
            await asyncio.wait_for(connected.wait(), 10)
            await admin.set_enabled(conn, "alice", False)
            assert await asyncio.wait_for(waiter, 5) == 0x87
            await store.close()
    finally:
        await conn.close()


def scram_reauthenticate(port: int) -> tuple[int, int]:
    """Connect with SCRAM, then re-authenticate (AUTH 0x19): (CONNACK code, final AUTH code)."""
    client = RawClient(port)
    method = "SCRAM-SHA-256"

    def exchange(first_code: int, scram: ScramClient, connect: bool) -> Any:
        first = Properties(authentication_method=method, authentication_data=scram.client_first())
        if connect:
            client.send_packet(Connect(client_id="reauth-1", properties=first))
        else:
            client.send_packet(Auth(first_code, first))
        reply = client.read_packet(timeout=3)
        assert isinstance(reply, Auth) and reply.properties is not None, reply
        assert reply.properties.authentication_data is not None
        final = scram.client_final(reply.properties.authentication_data)
        props = Properties(authentication_method=method, authentication_data=final)
        client.send_packet(Auth(0x18, props))
        done = client.read_packet(timeout=3)
        assert isinstance(done, Connack | Auth), done
        if done.reason_code == 0:
            assert done.properties is not None and done.properties.authentication_data
            scram.verify_server_final(done.properties.authentication_data)
        return done

    try:
        connack = exchange(0, ScramClient("alice", "wonderland"), connect=True)
        assert isinstance(connack, Connack)
        again = exchange(0x19, ScramClient("alice", "wonderland"), connect=False)
        assert isinstance(again, Auth)
        return connack.reason_code, again.reason_code
    finally:
        client.close()


async def test_scram_reauthentication(file_node: Node) -> None:
    assert await asyncio.to_thread(scram_reauthenticate, file_node.port) == (0, 0)


def subscriber_loses_rights(port: int, revoke: Any) -> tuple[int, int]:
    """alice subscribes; bob publishes before and after `revoke()`: messages alice got."""
    alice = PahoClient(port, "alice-sub")
    alice.client.username_pw_set("alice", "wonderland")
    bob = PahoClient(port, "bob-pub")
    bob.client.username_pw_set("bob", "builder")
    try:
        assert alice.connect().reason == 0 and bob.connect().reason == 0
        assert alice.subscribe("shared/feed", qos=1) == [1]
        bob.publish("shared/feed", b"before", qos=1)
        before = len(alice.expect(1))
        revoke()
        time.sleep(1.0)  # NOTIFY -> acl_changed -> subscription removed
        bob.publish("shared/feed", b"after", qos=1)
        try:
            alice.expect_none(wait=1.0)
            after = 0
        except AssertionError:
            after = 1
        return before, after
    finally:
        alice.close()
        bob.close()


async def test_revoked_subscription_right_takes_effect(postgres_dsn: str) -> None:
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await migrate(conn)
        await admin.add_user(conn, "alice", b"wonderland", policy=FAST)
        await admin.add_user(conn, "bob", b"builder", policy=FAST)
        rule_id = await admin.add_rule(
            conn, AclRule(Permission.ALLOW, Action.SUBSCRIBE, "shared/#", username="alice")
        )
        await admin.add_rule(conn, AclRule(Permission.ALLOW, Action.PUBLISH, "shared/#"))
        store = PostgresAccounts(PostgresAccountsConfig(postgres_dsn, hash_policy=FAST))
        async with running(store, store) as node:
            store.events = node.broker
            await store.start()
            assert store._listener is not None
            await asyncio.wait_for(store._listener.wait_connected(), 10)
            loop = asyncio.get_running_loop()

            def revoke() -> None:
                future = asyncio.run_coroutine_threadsafe(admin.delete_rule(conn, rule_id), loop)
                future.result(timeout=5)

            result = await asyncio.to_thread(subscriber_loses_rights, node.port, revoke)
            assert result == (1, 0)
            await store.close()
    finally:
        await conn.close()
