"""The accounts schema in PostgreSQL: versioned, idempotent migrations.

Everything lives in the `xmq` schema. `xmq.schema_migrations` records the applied
versions; `migrate()` applies the missing ones in order, each in the same transaction
as its record, under an advisory lock (so nodes starting together do not race).

Every change to accounts, groups, memberships or rules sends a NOTIFY on channel
`xmq_accounts` with a JSON payload (table, op, username, group, enabled, old_enabled),
never a verifier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import asyncpg

NOTIFY_CHANNEL: Final = "xmq_accounts"
_LOCK_KEY: Final = 0x786D7100_0001  # "xmq\0" + 1
MAX_USERNAME_CHARS: Final = 512
MAX_GROUP_CHARS: Final = 128


class SchemaError(RuntimeError):
    """The database holds a schema this XMQ does not know (newer) or is not migrated."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    sql: str


_V1 = f"""
CREATE TABLE xmq.accounts (
    username    text PRIMARY KEY
                CHECK (length(username) BETWEEN 1 AND {MAX_USERNAME_CHARS}),
    verifier    text NOT NULL,
    scram       text,
    enabled     boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE xmq.groups (
    name        text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND {MAX_GROUP_CHARS}),
    description text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO xmq.groups (name, description) VALUES
    ('default', 'every account'),
    ('anonymous', 'clients without a user name')
ON CONFLICT (name) DO NOTHING;

CREATE TABLE xmq.memberships (
    username    text NOT NULL REFERENCES xmq.accounts (username) ON DELETE CASCADE,
    group_name  text NOT NULL REFERENCES xmq.groups (name) ON DELETE CASCADE,
    PRIMARY KEY (username, group_name)
);
CREATE INDEX memberships_group_idx ON xmq.memberships (group_name);

CREATE TABLE xmq.acl_rules (
    id           bigserial PRIMARY KEY,
    username     text REFERENCES xmq.accounts (username) ON DELETE CASCADE,
    group_name   text REFERENCES xmq.groups (name) ON DELETE CASCADE,
    permission   text NOT NULL CHECK (permission IN ('allow', 'deny')),
    action       text NOT NULL CHECK (action IN ('publish', 'subscribe', 'both')),
    topic_filter text NOT NULL CHECK (length(topic_filter) BETWEEN 1 AND 65535),
    priority     integer NOT NULL DEFAULT 0,
    max_qos      smallint CHECK (max_qos BETWEEN 0 AND 2),
    retain       boolean,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CHECK (username IS NULL OR group_name IS NULL)
);
CREATE INDEX acl_rules_username_idx ON xmq.acl_rules (username);
CREATE INDEX acl_rules_group_idx ON xmq.acl_rules (group_name);

CREATE FUNCTION xmq.add_default_membership() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO xmq.memberships (username, group_name)
    VALUES (NEW.username, 'default') ON CONFLICT DO NOTHING;
    RETURN NEW;
END;
$$;

CREATE TRIGGER accounts_default_group AFTER INSERT ON xmq.accounts
FOR EACH ROW EXECUTE FUNCTION xmq.add_default_membership();

CREATE FUNCTION xmq.notify_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    row_data jsonb;
    old_data jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN
        row_data := to_jsonb(OLD);
    ELSE
        row_data := to_jsonb(NEW);
    END IF;
    IF TG_OP = 'UPDATE' THEN
        old_data := to_jsonb(OLD);
    END IF;
    PERFORM pg_notify('{NOTIFY_CHANNEL}', jsonb_build_object(
        'table', TG_TABLE_NAME,
        'op', TG_OP,
        'username', row_data ->> 'username',
        'group', COALESCE(row_data ->> 'group_name',
                          CASE WHEN TG_TABLE_NAME = 'groups' THEN row_data ->> 'name' END),
        'enabled', row_data -> 'enabled',
        'old_enabled', old_data -> 'enabled'
    )::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER accounts_notify AFTER INSERT OR UPDATE OR DELETE ON xmq.accounts
FOR EACH ROW EXECUTE FUNCTION xmq.notify_change();
CREATE TRIGGER groups_notify AFTER INSERT OR UPDATE OR DELETE ON xmq.groups
FOR EACH ROW EXECUTE FUNCTION xmq.notify_change();
CREATE TRIGGER memberships_notify AFTER INSERT OR UPDATE OR DELETE ON xmq.memberships
FOR EACH ROW EXECUTE FUNCTION xmq.notify_change();
CREATE TRIGGER acl_rules_notify AFTER INSERT OR UPDATE OR DELETE ON xmq.acl_rules
FOR EACH ROW EXECUTE FUNCTION xmq.notify_change();
"""

MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(1, "accounts, groups, memberships, ACL rules, change notifications", _V1),
)
LATEST_VERSION: Final = MIGRATIONS[-1].version

_BOOTSTRAP = """
CREATE SCHEMA IF NOT EXISTS xmq;
CREATE TABLE IF NOT EXISTS xmq.schema_migrations (
    version     integer PRIMARY KEY,
    description text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
"""


async def migrate(conn: asyncpg.Connection) -> list[int]:
    """Apply the missing migrations; return the versions applied now (empty if none)."""
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        await conn.execute(_BOOTSTRAP)
        rows = await conn.fetch("SELECT version FROM xmq.schema_migrations")
        done = {int(row["version"]) for row in rows}
        if done and max(done) > LATEST_VERSION:
            raise SchemaError(
                f"database schema version {max(done)} is newer than this XMQ ({LATEST_VERSION})"
            )
        for migration in MIGRATIONS:
            if migration.version in done:
                continue
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO xmq.schema_migrations (version, description) VALUES ($1, $2)",
                migration.version,
                migration.description,
            )
            applied_now.append(migration.version)
    return applied_now


async def schema_version(conn: asyncpg.Connection) -> int | None:
    """The highest applied migration, or None when the schema was never migrated."""
    exists = await conn.fetchval("SELECT to_regclass('xmq.schema_migrations') IS NOT NULL")
    if not exists:
        return None
    version = await conn.fetchval("SELECT max(version) FROM xmq.schema_migrations")
    return int(version) if version is not None else None


async def require_current_schema(conn: asyncpg.Connection) -> None:
    version = await schema_version(conn)
    if version != LATEST_VERSION:
        raise SchemaError(
            f"accounts schema is at version {version}, this XMQ needs {LATEST_VERSION}: "
            "run `xmq db migrate`"
        )
