from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest

from xmq.auth import postgres_admin as admin
from xmq.auth.acl import AclRule, Action, Permission
from xmq.auth.login_guard import GuardPolicy
from xmq.auth.postgres_accounts import PostgresAccounts, PostgresAccountsConfig
from xmq.auth.postgres_schema import migrate
from xmq.auth.scram import ScramClient
from xmq.auth.verifiers import HashPolicy, parse_verifier
from xmq.core.auth_ports import AuthDecision, AuthStep, Credentials

pytestmark = pytest.mark.integration

FAST = HashPolicy(pbkdf2_iterations=1000, scram_iterations=512)
ALLOW, DENY = Permission.ALLOW, Permission.DENY
INJECTION = "alice'); DROP TABLE xmq.accounts; --"


class RecordingEvents:
    def __init__(self) -> None:
        self.revoked: list[tuple[str, int]] = []
        self.changed: list[str | None] = []
        self._seen = asyncio.Event()

    def revoke(self, username: str, reason_code: int) -> None:
        self.revoked.append((username, reason_code))
        self._seen.set()

    def acl_changed(self, username: str | None) -> None:
        self.changed.append(username)
        self._seen.set()

    async def wait_for(self, predicate: Callable[[], bool], within: float = 2.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while not predicate():
            self._seen.clear()
            remaining = deadline - loop.time()
            assert remaining > 0, f"not seen in {within}s: {self.revoked} {self.changed}"
            try:
                await asyncio.wait_for(self._seen.wait(), remaining)
            except TimeoutError:
                continue


def creds(username: str | None, password: bytes | None, peer: str = "10.1.1.1:1000") -> Credentials:
    return Credentials("client-1", username, password, peer, 5)


async def until_ok(accounts: PostgresAccounts, credentials: Credentials) -> None:
    for _ in range(50):
        if (await accounts.authenticate(credentials)).ok:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("login never succeeded")


@pytest.fixture
async def db(postgres_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(postgres_dsn)
    await migrate(conn)
    await admin.add_group(conn, "ops")
    await admin.add_user(conn, "alice", b"wonderland", policy=FAST, groups=("ops",))
    await admin.add_user(conn, "dave", b"disabled", policy=FAST, enabled=False)
    await admin.add_user(conn, INJECTION, b"x' OR '1'='1", policy=FAST)
    yield conn
    await conn.close()


@pytest.fixture
async def events() -> RecordingEvents:
    return RecordingEvents()


@pytest.fixture
async def accounts(
    postgres_dsn: str, db: asyncpg.Connection, events: RecordingEvents
) -> AsyncIterator[PostgresAccounts]:
    store = PostgresAccounts(
        PostgresAccountsConfig(postgres_dsn, hash_policy=FAST, allow_anonymous=True), events
    )
    await store.start()
    assert store._listener is not None
    await asyncio.wait_for(store._listener.wait_connected(), 10)
    yield store
    await store.close()


@pytest.mark.parametrize(
    ("username", "password", "code"),
    [
        ("alice", b"wonderland", 0x00),
        ("alice", b"Wonderland", 0x86),
        ("alice", None, 0x86),
        ("bob", b"wonderland", 0x86),
        ("dave", b"disabled", 0x87),
        ("dave", b"nope", 0x86),
        (INJECTION, b"x' OR '1'='1", 0x00),
        (INJECTION, b"' OR '1'='1", 0x86),
        ("alice' --", b"wonderland", 0x86),
    ],
    ids=[
        "ok",
        "wrong-case",
        "no-password",
        "unknown",
        "disabled",
        "disabled-wrong-password",
        "injection-user-ok",
        "injection-password",
        "injection-comment",
    ],
)
async def test_password_logins(
    accounts: PostgresAccounts, username: str, password: bytes | None, code: int
) -> None:
    decision = await accounts.authenticate(creds(username, password))
    assert decision.reason_code == code, decision
    if code == 0:
        assert decision.username == username
        assert "default" in decision.groups


async def test_groups_and_anonymous(accounts: PostgresAccounts) -> None:
    decision = await accounts.authenticate(creds("alice", b"wonderland"))
    assert decision.groups == ("default", "ops")
    anonymous = await accounts.authenticate(creds(None, None))
    assert anonymous.ok and anonymous.groups == ("anonymous",)


async def drive(accounts: PostgresAccounts, client: ScramClient) -> AuthStep:
    exchange = accounts.start_exchange("SCRAM-SHA-256", creds(None, None))
    assert exchange is not None
    step = await exchange.step(client.client_first())
    if step.reason_code != 0x18:
        return step
    assert step.data is not None
    return await exchange.step(client.client_final(step.data))


async def test_scram_against_the_same_accounts(accounts: PostgresAccounts) -> None:
    client = ScramClient("alice", "wonderland")
    final = await drive(accounts, client)
    assert final.reason_code == 0 and final.decision is not None
    assert final.decision.username == "alice" and final.decision.groups == ("default", "ops")
    assert final.data is not None
    client.verify_server_final(final.data)
    assert (await drive(accounts, ScramClient("alice", "alice"))).reason_code == 0x86
    assert (await drive(accounts, ScramClient("dave", "disabled"))).reason_code == 0x87
    assert (await drive(accounts, ScramClient(INJECTION, "x' OR '1'='1"))).reason_code == 0
    assert accounts.start_exchange("PLAIN", creds(None, None)) is None


async def test_acl_rules_substitution_priority_and_literal_topics(
    accounts: PostgresAccounts, db: asyncpg.Connection
) -> None:
    for rule in [
        AclRule(ALLOW, Action.BOTH, "users/%u/#", group="default"),
        AclRule(DENY, Action.PUBLISH, "users/%u/locked", group="default", priority=5),
        AclRule(ALLOW, Action.PUBLISH, "ops/#", group="ops", max_qos=1),
        AclRule(ALLOW, Action.PUBLISH, "x/'; DELETE FROM xmq.acl_rules; --", username=INJECTION),
        AclRule(ALLOW, Action.SUBSCRIBE, "public/#", group="anonymous"),
    ]:
        await admin.add_rule(db, rule)
    alice = await accounts.acl_for(await accounts.authenticate(creds("alice", b"wonderland")), "c")
    assert alice.can_publish("users/alice/a", 1, False)
    assert not alice.can_publish("users/alice/locked", 1, False)
    assert not alice.can_publish("users/bob/a", 1, False)
    assert alice.can_publish("ops/deploy", 1, False)
    assert not alice.can_publish("ops/deploy", 2, False)
    assert not alice.can_publish("$SYS/x", 0, False)
    odd = await accounts.acl_for(
        await accounts.authenticate(creds(INJECTION, b"x' OR '1'='1")), "c"
    )
    assert odd.can_publish("x/'; DELETE FROM xmq.acl_rules; --", 0, False)
    assert odd.can_publish(f"users/{INJECTION}/a", 0, False)
    assert not odd.can_publish("x/anything", 0, False)
    assert len(await admin.list_rules(db)) == 5
    anonymous = await accounts.acl_for(await accounts.authenticate(creds(None, None)), "anon")
    assert anonymous.can_subscribe("public/a", 0)
    assert not anonymous.can_publish("public/a", 0, False)
    bare = await accounts.acl_for(AuthDecision(0, "alice"), "c")  # as the core's ACL reload
    assert bare.can_publish("ops/deploy", 1, False)
    assert (await accounts.acl_for(AuthDecision(0), "anon")).can_subscribe("public/a", 0)
    assert await admin.check_user_access(db, "alice", "users/alice/x", Action.PUBLISH)
    assert not await admin.check_user_access(db, "alice", "users/alice/locked", Action.PUBLISH)


async def test_notify_revokes_and_reports_acl_changes(
    accounts: PostgresAccounts, db: asyncpg.Connection, events: RecordingEvents
) -> None:
    assert (await accounts.authenticate(creds("alice", b"wonderland"))).ok
    await admin.set_enabled(db, "alice", False)
    await events.wait_for(lambda: ("alice", 0x87) in events.revoked, within=1.0)
    assert (await accounts.authenticate(creds("alice", b"wonderland"))).reason_code == 0x87
    await admin.set_enabled(db, "alice", True)
    await until_ok(accounts, creds("alice", b"wonderland"))
    await admin.add_rule(db, AclRule(ALLOW, Action.PUBLISH, "a/#", username="alice"))
    await events.wait_for(lambda: "alice" in events.changed)
    await admin.add_rule(db, AclRule(ALLOW, Action.PUBLISH, "b/#", group="ops"))
    await events.wait_for(lambda: None in events.changed)
    await admin.delete_user(db, INJECTION)
    await events.wait_for(lambda: (INJECTION, 0x87) in events.revoked)
    assert (await accounts.authenticate(creds(INJECTION, b"x' OR '1'='1"))).reason_code == 0x86


async def test_cached_acl_reloaded_after_change(
    accounts: PostgresAccounts, db: asyncpg.Connection, events: RecordingEvents
) -> None:
    decision = await accounts.authenticate(creds("alice", b"wonderland"))
    assert not (await accounts.acl_for(decision, "c")).can_publish("new/x", 0, False)
    await admin.add_rule(db, AclRule(ALLOW, Action.PUBLISH, "new/#", username="alice"))
    await events.wait_for(lambda: "alice" in events.changed)
    assert (await accounts.acl_for(decision, "c")).can_publish("new/x", 0, False)


async def test_password_change_applies(accounts: PostgresAccounts, db: asyncpg.Connection) -> None:
    assert (await accounts.authenticate(creds("alice", b"wonderland"))).ok
    await admin.set_password(db, "alice", b"looking-glass", policy=FAST)
    await asyncio.sleep(0.3)  # the NOTIFY arrives
    assert (await accounts.authenticate(creds("alice", b"wonderland"))).reason_code == 0x86
    assert (await accounts.authenticate(creds("alice", b"looking-glass"))).ok


async def test_rehash_on_login_when_cost_rises(postgres_dsn: str, db: asyncpg.Connection) -> None:
    stronger = HashPolicy(pbkdf2_iterations=2000, scram_iterations=1024)
    store = PostgresAccounts(
        PostgresAccountsConfig(postgres_dsn, hash_policy=stronger, listen=False)
    )
    await store.start()
    try:
        assert (await store.authenticate(creds("alice", b"wonderland"))).ok
        while store._tasks:
            await asyncio.gather(*store._tasks)
        row = await db.fetchrow("SELECT verifier, scram FROM xmq.accounts WHERE username = 'alice'")
        assert row is not None
        assert parse_verifier(row["verifier"]).params == {"i": 2000}
        assert row["scram"].startswith("SCRAM-SHA-256$1024:")
        store.invalidate("alice")
        assert (await store.authenticate(creds("alice", b"wonderland"))).ok
        final = await drive(store, ScramClient("alice", "wonderland"))
        assert final.reason_code == 0
    finally:
        await store.close()


async def test_brute_force_guard(postgres_dsn: str, db: asyncpg.Connection) -> None:
    config = PostgresAccountsConfig(
        postgres_dsn,
        hash_policy=FAST,
        listen=False,
        guard_policy=GuardPolicy(failures_per_user=3, failures_per_address=5),
    )
    store = PostgresAccounts(config)
    await store.start()
    try:
        for _ in range(3):
            assert (await store.authenticate(creds("alice", b"guess"))).reason_code == 0x86
        assert (await store.authenticate(creds("alice", b"wonderland"))).reason_code == 0x9F
        other_user_same_address = creds("dave", b"guess")
        for _ in range(2):
            assert (await store.authenticate(other_user_same_address)).reason_code == 0x86
        assert (await store.authenticate(creds("ghost", b"x"))).reason_code == 0x9F
        assert (await store.authenticate(creds("ghost", b"x", "10.9.9.9:1"))).reason_code == 0x86
    finally:
        await store.close()


async def test_invalid_stored_rule_fails_closed(
    accounts: PostgresAccounts, db: asyncpg.Connection
) -> None:
    await admin.add_rule(db, AclRule(ALLOW, Action.BOTH, "users/%u/#"))
    await db.execute(  # written around `xmq acl`: not a valid filter
        "INSERT INTO xmq.acl_rules (username, permission, action, topic_filter) "
        "VALUES ('alice', 'deny', 'publish', 'users/alice/#/x')"
    )
    alice = await accounts.acl_for(await accounts.authenticate(creds("alice", b"wonderland")), "c")
    assert not alice.can_publish("users/alice/a", 0, False)
    assert not alice.can_subscribe("users/alice/a", 0)
    odd = await accounts.authenticate(creds(INJECTION, b"x' OR '1'='1"))
    assert (await accounts.acl_for(odd, "c")).can_publish(f"users/{INJECTION}/a", 0, False)


async def test_listener_reconnects_and_resynchronises(
    accounts: PostgresAccounts, db: asyncpg.Connection, events: RecordingEvents
) -> None:
    assert (await accounts.authenticate(creds("alice", b"wonderland"))).ok
    listener = accounts._listener
    assert listener is not None and listener.connects == 1
    terminated = await db.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = 'xmq-accounts-listener'"
    )
    assert terminated == 1
    # Changed while nobody listens: the resynchronisation must find it.
    await db.execute("UPDATE xmq.accounts SET enabled = false WHERE username = 'alice'")
    await events.wait_for(lambda: listener.connects >= 2 and None in events.changed, within=15)
    await events.wait_for(lambda: ("alice", 0x87) in events.revoked, within=1)
