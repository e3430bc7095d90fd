"""Administration of accounts, groups and ACL rules in PostgreSQL (used by `xmq users|groups|acl`).

Every value is a bind parameter. Changes fire the schema's NOTIFY triggers, so running
brokers apply them at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from xmq.auth.accounts import ANONYMOUS_GROUP, DEFAULT_GROUP
from xmq.auth.acl import AclRule, Action, check_access
from xmq.auth.postgres_schema import MAX_GROUP_CHARS, MAX_USERNAME_CHARS
from xmq.auth.postgres_store import fetch_account, fetch_anonymous_rules, fetch_rules
from xmq.auth.verifiers import HashPolicy, derive_scram_credentials, hash_password

BUILTIN_GROUPS = frozenset({DEFAULT_GROUP, ANONYMOUS_GROUP})


class AdminError(Exception):
    """A refused administrative change (unknown user, duplicate, invalid value...)."""


@dataclass(frozen=True, slots=True)
class UserRow:
    username: str
    enabled: bool
    groups: tuple[str, ...]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class GroupRow:
    name: str
    description: str
    members: int


def validate_username(username: str) -> None:
    if not username or len(username) > MAX_USERNAME_CHARS or "\x00" in username:
        raise AdminError(f"a user name has 1 to {MAX_USERNAME_CHARS} characters and no NUL")


def validate_group(name: str) -> None:
    if not name or len(name) > MAX_GROUP_CHARS or "\x00" in name:
        raise AdminError(f"a group name has 1 to {MAX_GROUP_CHARS} characters and no NUL")


async def password_columns(password: bytes, policy: HashPolicy) -> tuple[str, str]:
    """(verifier, SCRAM credentials) for a new password, computed off the event loop."""
    if not password:
        raise AdminError("empty password")

    def compute() -> tuple[str, str]:
        scram = derive_scram_credentials(password, iterations=policy.scram_iterations)
        return hash_password(password, policy), scram.encode()

    return await asyncio.to_thread(compute)


async def add_user(
    conn: asyncpg.Connection,
    username: str,
    password: bytes,
    *,
    policy: HashPolicy,
    groups: tuple[str, ...] = (),
    enabled: bool = True,
) -> None:
    validate_username(username)
    verifier, scram = await password_columns(password, policy)
    async with conn.transaction():
        try:
            await conn.execute(
                "INSERT INTO xmq.accounts (username, verifier, scram, enabled) "
                "VALUES ($1, $2, $3, $4)",
                username,
                verifier,
                scram,
                enabled,
            )
        except asyncpg.UniqueViolationError as exc:
            raise AdminError(f"user {username!r} already exists") from exc
        for group in groups:
            await add_member(conn, group, username)


async def delete_user(conn: asyncpg.Connection, username: str) -> None:
    status = await conn.execute("DELETE FROM xmq.accounts WHERE username = $1", username)
    if status != "DELETE 1":
        raise AdminError(f"no user {username!r}")


async def set_password(
    conn: asyncpg.Connection, username: str, password: bytes, *, policy: HashPolicy
) -> None:
    verifier, scram = await password_columns(password, policy)
    status = await conn.execute(
        "UPDATE xmq.accounts SET verifier = $2, scram = $3, updated_at = now() WHERE username = $1",
        username,
        verifier,
        scram,
    )
    if status != "UPDATE 1":
        raise AdminError(f"no user {username!r}")


async def set_enabled(conn: asyncpg.Connection, username: str, enabled: bool) -> None:
    status = await conn.execute(
        "UPDATE xmq.accounts SET enabled = $2, updated_at = now() WHERE username = $1",
        username,
        enabled,
    )
    if status != "UPDATE 1":
        raise AdminError(f"no user {username!r}")


async def list_users(conn: asyncpg.Connection) -> list[UserRow]:
    rows = await conn.fetch(
        "SELECT a.username, a.enabled, a.created_at, a.updated_at, "
        "ARRAY(SELECT m.group_name FROM xmq.memberships m "
        "      WHERE m.username = a.username ORDER BY m.group_name) AS groups "
        "FROM xmq.accounts a ORDER BY a.username"
    )
    return [
        UserRow(
            row["username"],
            row["enabled"],
            tuple(row["groups"]),
            row["created_at"],
            row["updated_at"],
        )
        for row in rows
    ]


async def add_group(conn: asyncpg.Connection, name: str, description: str = "") -> None:
    validate_group(name)
    try:
        await conn.execute(
            "INSERT INTO xmq.groups (name, description) VALUES ($1, $2)", name, description
        )
    except asyncpg.UniqueViolationError as exc:
        raise AdminError(f"group {name!r} already exists") from exc


async def delete_group(conn: asyncpg.Connection, name: str) -> None:
    if name in BUILTIN_GROUPS:
        raise AdminError(f"group {name!r} is built in")
    status = await conn.execute("DELETE FROM xmq.groups WHERE name = $1", name)
    if status != "DELETE 1":
        raise AdminError(f"no group {name!r}")


async def list_groups(conn: asyncpg.Connection) -> list[GroupRow]:
    rows = await conn.fetch(
        "SELECT g.name, g.description, "
        "(SELECT count(*) FROM xmq.memberships m WHERE m.group_name = g.name) AS members "
        "FROM xmq.groups g ORDER BY g.name"
    )
    return [GroupRow(row["name"], row["description"], int(row["members"])) for row in rows]


async def group_members(conn: asyncpg.Connection, name: str) -> list[str]:
    rows = await conn.fetch(
        "SELECT username FROM xmq.memberships WHERE group_name = $1 ORDER BY username", name
    )
    return [row["username"] for row in rows]


async def add_member(conn: asyncpg.Connection, group: str, username: str) -> None:
    try:
        await conn.execute(
            "INSERT INTO xmq.memberships (username, group_name) VALUES ($1, $2) "
            "ON CONFLICT DO NOTHING",
            username,
            group,
        )
    except asyncpg.ForeignKeyViolationError as exc:
        raise AdminError(f"no user {username!r} or no group {group!r}") from exc


async def remove_member(conn: asyncpg.Connection, group: str, username: str) -> None:
    if group == DEFAULT_GROUP:
        raise AdminError("every account is in group 'default'")
    status = await conn.execute(
        "DELETE FROM xmq.memberships WHERE username = $1 AND group_name = $2", username, group
    )
    if status != "DELETE 1":
        raise AdminError(f"user {username!r} is not in group {group!r}")


async def add_rule(conn: asyncpg.Connection, rule: AclRule) -> int:
    try:
        rule_id = await conn.fetchval(
            "INSERT INTO xmq.acl_rules (username, group_name, permission, action, topic_filter, "
            "priority, max_qos, retain) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            rule.username,
            rule.group,
            rule.permission.value,
            rule.action.value,
            rule.topic_filter,
            rule.priority,
            rule.max_qos,
            rule.retain,
        )
    except asyncpg.ForeignKeyViolationError as exc:
        raise AdminError(f"no user {rule.username!r} or no group {rule.group!r}") from exc
    return int(rule_id)


async def delete_rule(conn: asyncpg.Connection, rule_id: int) -> None:
    status = await conn.execute("DELETE FROM xmq.acl_rules WHERE id = $1", rule_id)
    if status != "DELETE 1":
        raise AdminError(f"no rule {rule_id}")


async def list_rules(
    conn: asyncpg.Connection, *, username: str | None = None, group: str | None = None
) -> tuple[AclRule, ...]:
    return await fetch_rules(conn, username=username, group=group)


async def check_user_access(
    conn: asyncpg.Connection,
    username: str | None,
    topic: str,
    action: Action,
    *,
    client_id: str = "",
    qos: int = 0,
    retain: bool = False,
    no_match_allows: bool = False,
) -> bool:
    """The decision the broker would make for this user (None: anonymous)."""
    if username is None:
        rules = await fetch_anonymous_rules(conn)
        groups: tuple[str, ...] = (ANONYMOUS_GROUP,)
    else:
        stored = await fetch_account(conn, username)
        if stored is None:
            raise AdminError(f"no user {username!r}")
        rules, groups = stored.rules, stored.record.groups
    return check_access(
        rules,
        username=username,
        groups=groups,
        client_id=client_id,
        topic=topic,
        action=action,
        qos=qos,
        retain=retain,
        no_match_allows=no_match_allows,
    )
