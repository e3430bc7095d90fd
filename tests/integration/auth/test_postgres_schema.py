from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from xmq.auth.postgres_schema import (
    LATEST_VERSION,
    SchemaError,
    migrate,
    require_current_schema,
    schema_version,
)

pytestmark = pytest.mark.integration


async def test_migrations_apply_once_and_are_idempotent(postgres_dsn: str) -> None:
    conn = await asyncpg.connect(postgres_dsn)
    try:
        assert await schema_version(conn) is None
        with pytest.raises(SchemaError, match="migrate"):
            await require_current_schema(conn)
        assert await migrate(conn) == list(range(1, LATEST_VERSION + 1))
        assert await migrate(conn) == []
        assert await schema_version(conn) == LATEST_VERSION
        await require_current_schema(conn)
        rows = await conn.fetch("SELECT version FROM xmq.schema_migrations")
        assert len(rows) == LATEST_VERSION
        groups = {r["name"] for r in await conn.fetch("SELECT name FROM xmq.groups")}
        assert groups == {"default", "anonymous"}
    finally:
        await conn.close()


async def test_concurrent_migrations_do_not_race(postgres_dsn: str) -> None:
    conns = [await asyncpg.connect(postgres_dsn) for _ in range(4)]
    try:
        results = await asyncio.gather(*(migrate(conn) for conn in conns))
        assert sorted(len(result) for result in results) == [0, 0, 0, LATEST_VERSION]
    finally:
        for conn in conns:
            await conn.close()


async def test_newer_schema_is_refused(postgres_dsn: str) -> None:
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await migrate(conn)
        await conn.execute(
            "INSERT INTO xmq.schema_migrations (version, description) VALUES ($1, 'future')",
            LATEST_VERSION + 1,
        )
        with pytest.raises(SchemaError, match="newer"):
            await migrate(conn)
    finally:
        await conn.close()


async def test_every_account_is_in_default_and_changes_notify(postgres_dsn: str) -> None:
    conn = await asyncpg.connect(postgres_dsn)
    listener = await asyncpg.connect(postgres_dsn)
    payloads: asyncio.Queue[str] = asyncio.Queue()
    try:
        await migrate(conn)
        await listener.add_listener(
            "xmq_accounts", lambda _c, _p, _ch, payload: payloads.put_nowait(str(payload))
        )
        await conn.execute("INSERT INTO xmq.accounts (username, verifier) VALUES ('u', 'v')")
        groups = await conn.fetch("SELECT group_name FROM xmq.memberships WHERE username = 'u'")
        assert [row["group_name"] for row in groups] == ["default"]
        await conn.execute("UPDATE xmq.accounts SET enabled = false WHERE username = 'u'")
        seen = [await asyncio.wait_for(payloads.get(), 5) for _ in range(3)]
        events = [json.loads(payload) for payload in seen]
        inserts = {event["table"]: event for event in events[:2]}
        assert inserts["accounts"]["op"] == "INSERT" and inserts["accounts"]["username"] == "u"
        assert inserts["memberships"]["group"] == "default"
        assert events[2]["enabled"] is False and events[2]["old_enabled"] is True
        assert all("verifier" not in payload and '"v"' not in payload for payload in seen)
    finally:
        await listener.close()
        await conn.close()


async def test_accounts_store_can_migrate_at_start(postgres_dsn: str) -> None:
    from xmq.auth.postgres_accounts import PostgresAccounts, PostgresAccountsConfig

    store = PostgresAccounts(PostgresAccountsConfig(postgres_dsn, listen=False, migrate=True))
    await store.start()
    await store.close()
    conn = await asyncpg.connect(postgres_dsn)
    try:
        assert await schema_version(conn) == LATEST_VERSION
    finally:
        await conn.close()
