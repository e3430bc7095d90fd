from __future__ import annotations

import asyncio
import io

import asyncpg
import pytest

from xmq.app.accounts_cli import add_accounts_commands, build_parser, main
from xmq.auth.postgres_accounts import PostgresAccounts, PostgresAccountsConfig
from xmq.auth.verifiers import HashPolicy, parse_verifier
from xmq.core.auth_ports import Credentials

pytestmark = pytest.mark.integration

FAST = ["--pbkdf2-iterations", "1000"]
ODD_USER = "robert'); DROP TABLE xmq.accounts;--"
ODD_TOPIC = "t/'; DELETE FROM xmq.acl_rules; --/%u"


def run(dsn: str, *argv: str, stdin: str = "") -> int:
    return main([*argv[:2], "--dsn", dsn, *argv[2:]], stdin=io.StringIO(stdin))


def cli(dsn: str, capsys: pytest.CaptureFixture[str], *argv: str, stdin: str = "") -> str:
    status = run(dsn, *argv, stdin=stdin)
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return captured.out


def login(dsn: str, username: str, password: bytes) -> int:
    async def attempt() -> int:
        store = PostgresAccounts(
            PostgresAccountsConfig(
                dsn, listen=False, hash_policy=HashPolicy(pbkdf2_iterations=1000)
            )
        )
        await store.start()
        try:
            decision = await store.authenticate(Credentials("c", username, password, "h:1", 5))
            return decision.reason_code
        finally:
            await store.close()

    return asyncio.run(attempt())


def test_migrate_twice(postgres_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert "applied migrations 1" in cli(postgres_dsn, capsys, "db", "migrate")
    assert "already at version" in cli(postgres_dsn, capsys, "db", "migrate")


def test_users_round_trip(postgres_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    cli(postgres_dsn, capsys, "db", "migrate")
    cli(postgres_dsn, capsys, "groups", "add", "ops", "--description", "operators")
    cli(postgres_dsn, capsys, "users", "add", "alice", "--group", "ops", *FAST, stdin="s3cret\n")
    cli(postgres_dsn, capsys, "users", "add", ODD_USER, *FAST, stdin="x' OR 1=1 --\n")
    listing = cli(postgres_dsn, capsys, "users", "list")
    assert "'alice'\tenabled\tdefault,ops" in listing
    assert repr(ODD_USER) in listing
    assert login(postgres_dsn, "alice", b"s3cret") == 0
    assert login(postgres_dsn, ODD_USER, b"x' OR 1=1 --") == 0
    assert login(postgres_dsn, ODD_USER, b"' OR 1=1 --") == 0x86

    cli(postgres_dsn, capsys, "users", "passwd", "alice", *FAST, stdin="n3w\n")
    assert login(postgres_dsn, "alice", b"s3cret") == 0x86
    assert login(postgres_dsn, "alice", b"n3w") == 0
    cli(postgres_dsn, capsys, "users", "disable", "alice")
    assert "'alice'\tdisabled" in cli(postgres_dsn, capsys, "users", "list")
    assert login(postgres_dsn, "alice", b"n3w") == 0x87
    cli(postgres_dsn, capsys, "users", "enable", "alice")
    assert login(postgres_dsn, "alice", b"n3w") == 0

    assert "'alice'" in cli(postgres_dsn, capsys, "groups", "members", "ops")
    cli(postgres_dsn, capsys, "groups", "deluser", "ops", "alice")
    assert cli(postgres_dsn, capsys, "groups", "members", "ops") == ""
    cli(postgres_dsn, capsys, "groups", "adduser", "ops", ODD_USER)
    assert "'ops'\t1 members\toperators" in cli(postgres_dsn, capsys, "groups", "list")
    cli(postgres_dsn, capsys, "users", "del", ODD_USER)
    assert ODD_USER not in cli(postgres_dsn, capsys, "users", "list")
    cli(postgres_dsn, capsys, "groups", "del", "ops")
    assert "'ops'" not in cli(postgres_dsn, capsys, "groups", "list")


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (["users", "add", "alice"], "", "empty password"),
        (["users", "del", "nobody"], "", "no user"),
        (["users", "disable", "nobody"], "", "no user"),
        (["groups", "del", "default"], "", "built in"),
        (["groups", "deluser", "default", "alice"], "", "every account"),
        (["groups", "adduser", "nogroup", "alice"], "", "no group"),
        (["acl", "add", "allow", "publish", "a/#/b"], "", "last level"),
        (["acl", "add", "allow", "publish", "a", "--user", "nobody"], "", "no user"),
        (["acl", "del", "999"], "", "no rule"),
        (["acl", "check", "nobody", "a", "publish"], "", "no user"),
    ],
    ids=[
        "empty-password",
        "del-unknown",
        "disable-unknown",
        "del-default-group",
        "leave-default-group",
        "unknown-group",
        "bad-filter",
        "rule-for-unknown-user",
        "del-unknown-rule",
        "check-unknown-user",
    ],
)
def test_refused_changes(
    postgres_dsn: str,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    stdin: str,
    message: str,
) -> None:
    cli(postgres_dsn, capsys, "db", "migrate")
    cli(postgres_dsn, capsys, "users", "add", "alice", *FAST, stdin="pw\n")
    assert run(postgres_dsn, *argv, stdin=stdin) == 1
    assert message in capsys.readouterr().err


def test_acl_round_trip_and_check(postgres_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    cli(postgres_dsn, capsys, "db", "migrate")
    cli(postgres_dsn, capsys, "users", "add", "alice", *FAST, stdin="pw\n")
    cli(postgres_dsn, capsys, "users", "add", ODD_USER, *FAST, stdin="pw\n")
    cli(postgres_dsn, capsys, "acl", "add", "allow", "both", "users/%u/#", "--group", "default")
    out = cli(
        postgres_dsn,
        capsys,
        "acl",
        "add",
        "deny",
        "publish",
        "users/%u/ro",
        "--group",
        "default",
        "--priority",
        "10",
    )
    deny_id = out.split()[-1]
    cli(
        postgres_dsn,
        capsys,
        "acl",
        "add",
        "allow",
        "publish",
        ODD_TOPIC,
        "--user",
        ODD_USER,
        "--max-qos",
        "1",
        "--retain",
        "false",
    )
    listing = cli(postgres_dsn, capsys, "acl", "list")
    assert "deny\tpublish\t'users/%u/ro'\tgroup 'default'" in listing
    assert f"{ODD_TOPIC!r}\tuser {ODD_USER!r} max_qos=1 retain=false" in listing
    assert cli(postgres_dsn, capsys, "acl", "list", "--user", ODD_USER).count("\n") == 1

    def check(user: str, topic: str, action: str, *extra: str) -> int:
        status = run(postgres_dsn, "acl", "check", user, topic, action, *extra)
        out = capsys.readouterr().out.strip()
        assert out == ("allow" if status == 0 else "deny")
        return status

    assert check("alice", "users/alice/x", "publish") == 0
    assert check("alice", "users/alice/x", "both") == 0
    assert check("alice", "users/alice/ro", "publish") == 3
    assert check("alice", "users/alice/ro", "subscribe") == 0
    assert check("alice", "users/bob/x", "publish") == 3
    literal_topic = ODD_TOPIC.replace("%u", ODD_USER)
    assert check(ODD_USER, literal_topic, "publish") == 0
    assert check(ODD_USER, literal_topic, "publish", "--qos", "2") == 3
    assert check(ODD_USER, literal_topic, "publish", "--retain") == 3
    assert check(ODD_USER, "t/x/" + ODD_USER, "publish") == 3
    cli(postgres_dsn, capsys, "acl", "del", deny_id)
    assert check("alice", "users/alice/ro", "publish") == 0


def test_users_hash_prints_an_accounts_file_entry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["users", "hash", *FAST], stdin=io.StringIO("pw\n")) == 0
    out = capsys.readouterr().out
    verifier = out.split("password: ")[1].split("\n")[0].strip("'")
    assert parse_verifier(verifier).params == {"i": 1000}
    assert "scram: 'SCRAM-SHA-256$4096:" in out


def test_password_is_never_an_argument() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["users", "add", "alice", "--password", "x"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["users", "add", "alice", "pw"])


def test_missing_schema_and_unreachable_database(
    postgres_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(postgres_dsn, "users", "list") == 1
    assert "xmq db migrate" in capsys.readouterr().err
    assert run("postgresql://xmq@127.0.0.1:1/none", "users", "list") == 2
    assert "database error" in capsys.readouterr().err


def test_add_accounts_commands_plugs_into_another_parser() -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="xmq")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("serve")
    add_accounts_commands(commands)
    args = parser.parse_args(["acl", "check", "u", "t", "publish", "--qos", "1"])
    assert callable(args.func) and args.qos == 1


async def test_cli_change_reaches_a_running_node(postgres_dsn: str) -> None:
    assert await asyncio.to_thread(main, ["db", "migrate", "--dsn", postgres_dsn]) == 0
    add = ["users", "add", "alice", "--dsn", postgres_dsn, *FAST]
    assert await asyncio.to_thread(main, add, io.StringIO("pw\n")) == 0

    revoked: list[tuple[str, int]] = []
    seen = asyncio.Event()

    class Events:
        def revoke(self, username: str, reason_code: int) -> None:
            revoked.append((username, reason_code))
            seen.set()

        def acl_changed(self, username: str | None) -> None:
            return None

    store = PostgresAccounts(PostgresAccountsConfig(postgres_dsn), Events())
    await store.start()
    try:
        assert store._listener is not None
        await asyncio.wait_for(store._listener.wait_connected(), 10)
        disable = ["users", "disable", "alice", "--dsn", postgres_dsn]
        assert await asyncio.to_thread(main, disable) == 0
        await asyncio.wait_for(seen.wait(), 1.0)
        assert revoked == [("alice", 0x87)]
    finally:
        await store.close()
    conn = await asyncpg.connect(postgres_dsn)
    try:
        assert (
            await conn.fetchval("SELECT enabled FROM xmq.accounts WHERE username='alice'") is False
        )
    finally:
        await conn.close()
