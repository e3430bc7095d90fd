from __future__ import annotations

import json

import pytest

from xmq.auth.postgres_notify import ChangeHandler, parse_notification
from xmq.core.auth_ports import AuthEvents


class Owner:
    def __init__(self) -> None:
        self.invalidated: list[str | None] = []
        self.revoked: list[tuple[str, int]] = []
        self.changed: list[str | None] = []
        self.refreshed: list[list[str]] = []
        self.events: AuthEvents = self

    def invalidate(self, username: str | None) -> None:
        self.invalidated.append(username)

    def cached_usernames(self) -> list[str]:
        return ["alice", "bob"]

    async def refresh(self, usernames: list[str]) -> None:
        self.refreshed.append(usernames)

    def revoke(self, username: str, reason_code: int) -> None:
        self.revoked.append((username, reason_code))

    def acl_changed(self, username: str | None) -> None:
        self.changed.append(username)


def note(table: str, op: str, **fields: object) -> str:
    return json.dumps({"table": table, "op": op, **fields})


@pytest.mark.parametrize(
    ("payload", "invalidated", "revoked", "changed"),
    [
        (note("accounts", "INSERT", username="a", enabled=True), ["a"], [], []),
        (
            note("accounts", "UPDATE", username="a", enabled=False, old_enabled=True),
            ["a"],
            [("a", 0x87)],
            [],
        ),
        (note("accounts", "UPDATE", username="a", enabled=False, old_enabled=False), ["a"], [], []),
        (note("accounts", "UPDATE", username="a", enabled=True, old_enabled=True), ["a"], [], []),
        (note("accounts", "DELETE", username="a", enabled=True), ["a"], [("a", 0x87)], []),
        (note("memberships", "DELETE", username="a", group="ops"), ["a"], [], ["a"]),
        (note("acl_rules", "INSERT", username="a"), ["a"], [], ["a"]),
        (note("acl_rules", "DELETE", username=None, group="ops"), [None], [], [None]),
        (note("groups", "INSERT", group="ops"), [], [], []),
        (note("groups", "DELETE", group="ops"), [None], [], [None]),
        ("not json", [None], [], [None]),
        ("[1]", [None], [], [None]),
    ],
    ids=[
        "account-added",
        "disabled",
        "still-disabled",
        "password-changed",
        "deleted",
        "membership",
        "user-rule",
        "group-rule",
        "group-added",
        "group-deleted",
        "garbage",
        "not-an-object",
    ],
)
def test_notifications(
    payload: str,
    invalidated: list[str | None],
    revoked: list[tuple[str, int]],
    changed: list[str | None],
) -> None:
    owner = Owner()
    handler = ChangeHandler(owner)
    handler.handle(payload)
    assert owner.invalidated == invalidated
    assert owner.revoked == revoked
    assert owner.changed == changed
    assert handler.notifications == 1


async def test_resynchronise_revalidates_everything() -> None:
    owner = Owner()
    await ChangeHandler(owner).resynchronise()
    assert owner.invalidated == [None]
    assert owner.refreshed == [["alice", "bob"]]
    assert owner.changed == [None]


def test_parse_notification() -> None:
    assert parse_notification('{"a": 1}') == {"a": 1}
    assert parse_notification("1") is None
