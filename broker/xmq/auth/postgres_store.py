"""Reading accounts and rules from PostgreSQL (shared by the adapter and the admin tools).

All values travel as bind parameters, never through SQL text.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import asyncpg

from xmq.auth.accounts import ANONYMOUS_GROUP, AccountRecord, with_default_group
from xmq.auth.acl import AclRule, Action, Permission
from xmq.auth.verifiers import ScramCredentials, VerifierError

logger = logging.getLogger(__name__)

_RULE_COLUMNS = (
    "id, username, group_name, permission, action, topic_filter, priority, max_qos, retain"
)

_ACCOUNT_QUERY = """
SELECT a.username, a.verifier, a.scram, a.enabled,
       ARRAY(SELECT m.group_name FROM xmq.memberships m
             WHERE m.username = a.username ORDER BY m.group_name) AS groups,
       COALESCE((SELECT json_agg(json_build_object(
                    'id', r.id, 'username', r.username, 'group_name', r.group_name,
                    'permission', r.permission, 'action', r.action,
                    'topic_filter', r.topic_filter, 'priority', r.priority,
                    'max_qos', r.max_qos, 'retain', r.retain) ORDER BY r.id)
                 FROM xmq.acl_rules r
                 WHERE r.username = a.username
                    OR (r.username IS NULL AND r.group_name IS NULL)
                    OR r.group_name = 'default'
                    OR r.group_name IN (SELECT m.group_name FROM xmq.memberships m
                                        WHERE m.username = a.username)), '[]') AS rules
FROM xmq.accounts a
WHERE a.username = $1
"""

_ANONYMOUS_RULES_QUERY = f"""
SELECT {_RULE_COLUMNS} FROM xmq.acl_rules
WHERE (username IS NULL AND group_name IS NULL) OR group_name = $1
ORDER BY id
"""


@dataclass(frozen=True, slots=True)
class StoredAccount:
    """An account and every rule that can apply to it."""

    record: AccountRecord
    rules: tuple[AclRule, ...]


FAIL_CLOSED_PRIORITY = 2**31 - 1


def rule_from_mapping(row: Any) -> AclRule:
    """An AclRule from a row or JSON object. A stored rule that is invalid (written around
    `xmq acl`, e.g. a malformed filter) fails closed: it becomes a deny-everything rule of
    the highest priority for the same user or group, and is logged."""
    try:
        return AclRule(
            permission=Permission(row["permission"]),
            action=Action(row["action"]),
            topic_filter=row["topic_filter"],
            priority=int(row["priority"]),
            max_qos=row["max_qos"],
            retain=row["retain"],
            username=row["username"],
            group=row["group_name"],
            rule_id=int(row["id"]),
        )
    except (ValueError, KeyError, TypeError):
        logger.error("invalid ACL rule %r: denying everything to whom it applies", row.get("id"))
        username, group = row.get("username"), row.get("group_name")
        if not isinstance(username, str):
            username = None
        if username is not None or not isinstance(group, str):
            group = None
        return AclRule(
            permission=Permission.DENY,
            action=Action.BOTH,
            topic_filter="#",
            priority=FAIL_CLOSED_PRIORITY,
            username=username,
            group=group,
        )


def _rules(rows: Any) -> tuple[AclRule, ...]:
    return tuple(rule_from_mapping(row) for row in rows)


def _scram(username: str, text: str | None) -> ScramCredentials | None:
    if not text:
        return None
    try:
        return ScramCredentials.decode(text)
    except VerifierError:
        logger.warning("ignoring invalid SCRAM credentials of user %r", username)
        return None


async def fetch_account(conn: asyncpg.Connection, username: str) -> StoredAccount | None:
    """One round trip: the account, its groups and the rules that can apply to it."""
    row = await conn.fetchrow(_ACCOUNT_QUERY, username)
    if row is None:
        return None
    record = AccountRecord(
        username=row["username"],
        verifier=row["verifier"],
        scram=_scram(row["username"], row["scram"]),
        enabled=bool(row["enabled"]),
        groups=with_default_group(list(row["groups"])),
    )
    return StoredAccount(record, _rules(json.loads(row["rules"])))


async def fetch_anonymous_rules(conn: asyncpg.Connection) -> tuple[AclRule, ...]:
    """Rules for clients without a user name: everyone's and group `anonymous`."""
    return _rules(await conn.fetch(_ANONYMOUS_RULES_QUERY, ANONYMOUS_GROUP))


async def fetch_rules(
    conn: asyncpg.Connection, *, username: str | None = None, group: str | None = None
) -> tuple[AclRule, ...]:
    """Rules stored for a user, a group, or (neither) all rules."""
    if username is not None:
        rows = await conn.fetch(
            f"SELECT {_RULE_COLUMNS} FROM xmq.acl_rules WHERE username = $1 ORDER BY id", username
        )
    elif group is not None:
        rows = await conn.fetch(
            f"SELECT {_RULE_COLUMNS} FROM xmq.acl_rules WHERE group_name = $1 ORDER BY id", group
        )
    else:
        rows = await conn.fetch(f"SELECT {_RULE_COLUMNS} FROM xmq.acl_rules ORDER BY id")
    return _rules(rows)
