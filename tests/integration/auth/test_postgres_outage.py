"""The database stopped and restarted under load: cached decisions keep serving, logins that
need the database get 0x88, nothing crashes, and service resumes by itself."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import asyncpg
import pytest

from tests.support.postgres import PostgresServer
from xmq.auth import postgres_admin as admin
from xmq.auth.acl import AclRule, Action, DenyAll, Permission
from xmq.auth.postgres_accounts import PostgresAccounts, PostgresAccountsConfig
from xmq.auth.postgres_schema import migrate
from xmq.auth.verifiers import HashPolicy
from xmq.core.auth_ports import AuthDecision, Credentials

pytestmark = pytest.mark.integration

FAST = HashPolicy(pbkdf2_iterations=1000, scram_iterations=512)


class Events:
    def __init__(self) -> None:
        self.revoked: list[tuple[str, int]] = []
        self.changed: list[str | None] = []

    def revoke(self, username: str, reason_code: int) -> None:
        self.revoked.append((username, reason_code))

    def acl_changed(self, username: str | None) -> None:
        self.changed.append(username)


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    server = PostgresServer.create()
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


def creds(username: str, password: bytes, port: int = 1) -> Credentials:
    return Credentials(f"c{port}", username, password, f"10.2.{port % 250}.1:{port}", 5)


def available(store: PostgresAccounts) -> bool:
    return store.available  # a call, so mypy does not narrow the attribute across awaits


async def eventually(check: Callable[[], Awaitable[bool]], seconds: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.1)


async def test_database_stopped_and_restarted_under_load(own_server: PostgresServer) -> None:
    dsn = own_server.dsn()
    conn = await asyncpg.connect(dsn)
    await migrate(conn)
    await admin.add_user(conn, "alice", b"wonderland", policy=FAST)
    await admin.add_user(conn, "bob", b"builder", policy=FAST)
    await admin.add_rule(conn, AclRule(Permission.ALLOW, Action.BOTH, "users/%u/#"))
    await conn.close()

    events = Events()
    config = PostgresAccountsConfig(dsn, hash_policy=FAST, connect_timeout=1.0)
    store = PostgresAccounts(config, events)
    await store.start()
    try:
        assert store._listener is not None
        await asyncio.wait_for(store._listener.wait_connected(), 10)
        alice = await store.authenticate(creds("alice", b"wonderland"))
        assert alice.ok and available(store)
        assert await store.check_ready()

        own_server.stop("immediate")
        store.invalidate(None)  # everything cached is now stale, as after a missed NOTIFY

        async def login(index: int) -> AuthDecision:
            name, password = ("alice", b"wonderland") if index % 4 else ("bob", b"builder")
            return await store.authenticate(creds(name, password, index))

        results = await asyncio.gather(*(login(index) for index in range(200)))
        codes = {(r.username or "bob", r.reason_code) for r in results}
        assert codes == {("alice", 0x00), ("bob", 0x88)}
        assert not available(store)
        assert not await store.check_ready()
        acl = await store.acl_for(alice, "c1")
        assert acl.can_publish("users/alice/x", 0, False)  # stale rules keep serving
        bob_acl = await store.acl_for(AuthDecision(0, username="bob"), "c2")
        assert isinstance(bob_acl, DenyAll)
        assert (await store.authenticate(creds("alice", b"wrong"))).reason_code == 0x86

        own_server.start()

        async def bob_back() -> bool:
            return (await store.authenticate(creds("bob", b"builder", 9999))).ok

        await eventually(bob_back)
        assert available(store) and await store.check_ready()

        async def listening() -> bool:
            return store._listener is not None and store._listener.connects >= 2

        await eventually(listening)
        assert None in events.changed  # the core was asked to re-evaluate everyone

        conn = await asyncpg.connect(dsn)
        await admin.set_enabled(conn, "alice", False)
        await conn.close()

        async def revoked() -> bool:
            return ("alice", 0x87) in events.revoked

        await eventually(revoked, 2.0)
    finally:
        await store.close()


async def test_start_while_database_is_down(own_server: PostgresServer) -> None:
    dsn = own_server.dsn()
    conn = await asyncpg.connect(dsn)
    await migrate(conn)
    await admin.add_user(conn, "alice", b"wonderland", policy=FAST)
    await conn.close()
    own_server.stop()
    store = PostgresAccounts(PostgresAccountsConfig(dsn, hash_policy=FAST, connect_timeout=1.0))
    await store.start()
    try:
        assert (await store.authenticate(creds("alice", b"wonderland"))).reason_code == 0x88
        own_server.start()

        async def alice_ok() -> bool:
            return (await store.authenticate(creds("alice", b"wonderland"))).ok

        await eventually(alice_ok)
    finally:
        await store.close()
