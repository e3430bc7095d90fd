from __future__ import annotations

import pytest

from xmq.core.auth_ports import (
    AllowAll,
    AnonymousAuthenticator,
    AuthDecision,
    Credentials,
    NullAuthEvents,
    is_reserved_topic,
)


def creds(username: str | None = None, password: bytes | None = None) -> Credentials:
    return Credentials("c1", username, password, "127.0.0.1:5555", 5)


async def test_allow_all() -> None:
    acl = await AllowAll().acl_for(AuthDecision(0), "c1")
    assert acl.can_publish("a/b", 2, True)
    assert acl.can_subscribe("#", 2)
    assert acl.can_subscribe("$SYS/#", 0)
    assert not acl.can_publish("$SYS/broker/clients", 0, False)


@pytest.mark.parametrize(
    ("allow", "username", "code"),
    [(True, None, 0), (True, "bob", 0), (False, None, 0x86), (False, "bob", 0)],
    ids=["anon-allowed", "named-allowed", "anon-refused", "named-when-disabled"],
)
async def test_anonymous_authenticator(allow: bool, username: str | None, code: int) -> None:
    auth = AnonymousAuthenticator(allow_anonymous=allow)
    decision = await auth.authenticate(creds(username))
    assert decision.reason_code == code
    assert decision.ok is (code == 0)
    if code == 0:
        assert decision.username == username
    assert auth.start_exchange("SCRAM-SHA-256", creds(username)) is None


def test_reserved_topics_and_null_events() -> None:
    assert is_reserved_topic("$SYS/x")
    assert is_reserved_topic("$share")
    assert not is_reserved_topic("a/$SYS")
    events = NullAuthEvents()
    events.revoke("u", 0x87)
    events.acl_changed(None)
