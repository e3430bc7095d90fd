from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from xmq.auth.file_accounts import AccountsFileError, FileAccounts
from xmq.auth.login_guard import GuardPolicy, LoginGuard
from xmq.auth.scram import ScramClient
from xmq.auth.verifiers import HashPolicy, derive_scram_credentials, hash_password
from xmq.core.auth_ports import AllowAll, AuthDecision, AuthExchange, AuthStep, Credentials

FAST = HashPolicy(pbkdf2_iterations=1000)


def user(password: str, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "password": hash_password(password, FAST),
        "scram": derive_scram_credentials(password, iterations=256).encode(),
    }
    entry.update(extra)
    return entry


def accounts_data(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "users": {
            "alice": user("wonderland", groups=["ops"]),
            "dave": user("disabled", enabled=False),
        },
        "acl": [
            {"permission": "allow", "action": "both", "topic": "users/%u/#"},
            {"permission": "allow", "action": "publish", "topic": "ops/#", "group": "ops"},
            {
                "permission": "allow",
                "action": "subscribe",
                "topic": "public/#",
                "group": "anonymous",
            },
        ],
    }
    data.update(extra)
    return data


def creds(username: str | None, password: bytes | None, peer: str = "10.0.0.1:4000") -> Credentials:
    return Credentials("c1", username, password, peer, 5)


@pytest.mark.parametrize(
    ("username", "password", "code"),
    [
        ("alice", b"wonderland", 0x00),
        ("alice", b"wrong", 0x86),
        ("alice", None, 0x86),
        ("nobody", b"wonderland", 0x86),
        ("dave", b"disabled", 0x87),
        ("dave", b"wrong", 0x86),
        (None, None, 0x86),
    ],
    ids=[
        "ok",
        "wrong-password",
        "no-password",
        "unknown",
        "disabled",
        "disabled-wrong",
        "anonymous-refused",
    ],
)
async def test_password_logins(username: str | None, password: bytes | None, code: int) -> None:
    accounts = FileAccounts(accounts_data(), hash_policy=FAST)
    decision = await accounts.authenticate(creds(username, password))
    assert decision.reason_code == code
    if code == 0:
        assert decision.username == "alice"
        assert decision.groups == ("default", "ops")


async def test_second_login_uses_the_verified_cache() -> None:
    accounts = FileAccounts(accounts_data(), hash_policy=FAST)
    assert (await accounts.authenticate(creds("alice", b"wonderland"))).ok
    assert len(accounts._verified) == 1
    assert (await accounts.authenticate(creds("alice", b"wonderland"))).ok
    assert not (await accounts.authenticate(creds("alice", b"wonderlan"))).ok


async def test_anonymous_when_allowed_gets_its_group_rules() -> None:
    accounts = FileAccounts(accounts_data(allow_anonymous=True), hash_policy=FAST)
    decision = await accounts.authenticate(creds(None, None))
    assert decision.ok and decision.groups == ("anonymous",)
    acl = await accounts.acl_for(decision, "anon-1")
    assert acl.can_subscribe("public/news", 0)
    assert not acl.can_publish("public/news", 0, False)
    assert not acl.can_publish("users//x", 0, False)


async def test_allow_anonymous_override(tmp_path: Path) -> None:
    path = tmp_path / "accounts.yaml"
    path.write_text(yaml.safe_dump(accounts_data(allow_anonymous=False)))
    assert (
        await FileAccounts.load(path, hash_policy=FAST).authenticate(creds(None, None))
    ).reason_code == 0x86
    opened = FileAccounts.load(path, allow_anonymous=True)
    assert (await opened.authenticate(creds(None, None))).ok
    opened.reload()
    assert opened.allow_anonymous


async def test_acl_for_user_and_group() -> None:
    accounts = FileAccounts(accounts_data(), hash_policy=FAST)
    decision = await accounts.authenticate(creds("alice", b"wonderland"))
    acl = await accounts.acl_for(decision, "c1")
    assert acl.can_publish("users/alice/a", 1, False)
    assert acl.can_publish("ops/deploy", 1, False)
    assert not acl.can_subscribe("ops/deploy", 1)
    assert not acl.can_publish("users/bob/a", 1, False)
    reloaded = await accounts.acl_for(AuthDecision(0, "alice"), "c1")  # bare, as on a reload
    assert reloaded.can_publish("ops/deploy", 1, False)
    anonymous = await accounts.acl_for(AuthDecision(0), "c2")
    assert anonymous.can_subscribe("public/x", 0)


async def test_without_acl_section_everything_but_reserved_is_allowed() -> None:
    data = accounts_data()
    del data["acl"]
    accounts = FileAccounts(data)
    acl = await accounts.acl_for(await accounts.authenticate(creds("alice", b"wonderland")), "c")
    assert isinstance(acl, AllowAll)


async def test_brute_force_guard() -> None:
    guard = LoginGuard(GuardPolicy(failures_per_user=3, failures_per_address=100))
    accounts = FileAccounts(accounts_data(), guard=guard, hash_policy=FAST)
    for _ in range(3):
        assert (await accounts.authenticate(creds("alice", b"guess"))).reason_code == 0x86
    assert (await accounts.authenticate(creds("alice", b"wonderland"))).reason_code == 0x9F


async def drive(exchange: AuthExchange, client: ScramClient) -> AuthStep:
    step = await exchange.step(client.client_first())
    if step.reason_code != 0x18:
        return step
    assert step.data is not None
    return await exchange.step(client.client_final(step.data))


async def test_scram_exchange_success() -> None:
    accounts = FileAccounts(accounts_data(), hash_policy=FAST)
    assert accounts.start_exchange("SCRAM-SHA-1", creds(None, None)) is None
    exchange = accounts.start_exchange("SCRAM-SHA-256", creds(None, None))
    assert exchange is not None
    client = ScramClient("alice", "wonderland")
    final = await drive(exchange, client)
    assert final.reason_code == 0 and final.decision is not None
    assert final.decision.username == "alice" and final.decision.groups == ("default", "ops")
    assert final.data is not None
    client.verify_server_final(final.data)
    assert (await exchange.step(b"more")).reason_code == 0x86


@pytest.mark.parametrize(
    ("username", "password", "code"),
    [("alice", "nope", 0x86), ("ghost", "x", 0x86), ("dave", "disabled", 0x87)],
    ids=["wrong-password", "unknown-user", "disabled"],
)
async def test_scram_exchange_failures(username: str, password: str, code: int) -> None:
    accounts = FileAccounts(accounts_data(), hash_policy=FAST)
    exchange = accounts.start_exchange("SCRAM-SHA-256", creds(None, None))
    assert exchange is not None
    final = await drive(exchange, ScramClient(username, password))
    assert final.reason_code == code
    assert final.decision is not None and final.decision.reason_code == code


async def test_scram_exchange_malformed_first_message() -> None:
    exchange = FileAccounts(accounts_data(), hash_policy=FAST).start_exchange(
        "SCRAM-SHA-256", creds(None, None)
    )
    assert exchange is not None
    step = await exchange.step(b"garbage")
    assert step.reason_code == 0x86 and step.decision is not None


class RecordingEvents:
    def __init__(self) -> None:
        self.revoked: list[tuple[str, int]] = []
        self.changed: list[str | None] = []

    def revoke(self, username: str, reason_code: int) -> None:
        self.revoked.append((username, reason_code))

    def acl_changed(self, username: str | None) -> None:
        self.changed.append(username)


async def test_load_and_reload(tmp_path: Path) -> None:
    path = tmp_path / "accounts.yaml"
    data = accounts_data()
    path.write_text(yaml.safe_dump(data))
    accounts = FileAccounts.load(path, hash_policy=FAST)
    assert (await accounts.authenticate(creds("alice", b"wonderland"))).ok
    data["users"]["alice"]["enabled"] = False
    data["users"]["bob"] = user("builder")
    data["acl"].pop()
    path.write_text(yaml.safe_dump(data))
    events = RecordingEvents()
    accounts.reload(events)
    assert events.revoked == [("alice", 0x87)]
    assert events.changed == [None]
    assert (await accounts.authenticate(creds("alice", b"wonderland"))).reason_code == 0x87
    assert (await accounts.authenticate(creds("bob", b"builder"))).ok


@pytest.mark.parametrize(
    "data",
    [
        {"users": {"a": {"password": "clear-text"}}},
        {"users": {"a": {"scram": "nonsense"}}},
        {"users": {"a": {"colour": "blue"}}},
        {"acl": [{"permission": "allow", "action": "both", "topic": "a/#/b"}]},
        {"acl": [{"permission": "maybe", "action": "both", "topic": "a"}]},
        [1, 2],
    ],
    ids=[
        "clear-text-password",
        "bad-scram",
        "unknown-key",
        "bad-filter",
        "bad-permission",
        "not-a-mapping",
    ],
)
def test_invalid_files(data: Any) -> None:
    with pytest.raises(AccountsFileError):
        FileAccounts(data)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(AccountsFileError):
        FileAccounts.load(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("users: [unclosed")
    with pytest.raises(AccountsFileError):
        FileAccounts.load(tmp_path / "bad.yaml")


async def test_unknown_user_costs_a_verification() -> None:
    accounts = FileAccounts(accounts_data(), hash_policy=FAST)
    before = accounts._shield._verifier
    assert (await accounts.authenticate(creds("nobody", b"pw"))).reason_code == 0x86
    after = accounts._shield._verifier
    assert before is None
    assert after is not None and after.startswith("pbkdf2-sha256$i=1000$")
