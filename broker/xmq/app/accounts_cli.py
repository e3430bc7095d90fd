"""`xmq db`, `xmq users`, `xmq groups` and `xmq acl`: the accounts store from the command line.

The main CLI calls `add_accounts_commands(subparsers)`; every parser it adds sets
`func`, a callable `(argparse.Namespace) -> int` (the exit status). Passwords are read
from a prompt (twice, on a terminal) or from the first line of stdin: never from argv.

The database is given by `--dsn`, else `$XMQ_AUTH__POSTGRES_DSN`, else `$XMQ_POSTGRES_DSN`.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO

import asyncpg

from xmq.auth import postgres_admin as admin
from xmq.auth.acl import AclRule, Action, Permission
from xmq.auth.acl_patterns import PatternError
from xmq.auth.postgres_schema import LATEST_VERSION, SchemaError, migrate
from xmq.auth.verifiers import HashPolicy, derive_scram_credentials, hash_password

DSN_ENVIRONMENT = ("XMQ_AUTH__POSTGRES_DSN", "XMQ_POSTGRES_DSN")
DB_ERRORS = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)

Handler = Callable[[asyncpg.Connection, argparse.Namespace, TextIO], Awaitable[int]]


class CliError(Exception):
    """A user error: printed without a traceback, exit status 1."""


def read_password(stdin: TextIO, *, confirm: bool = True) -> bytes:
    """A password from a prompt (terminal) or the first line of stdin (pipe)."""
    if stdin.isatty():
        first = getpass.getpass("Password: ")
        if confirm and getpass.getpass("Password (again): ") != first:
            raise CliError("the passwords differ")
        password = first
    else:
        password = stdin.readline().rstrip("\r\n")
    if not password:
        raise CliError("empty password")
    return password.encode()


def resolve_dsn(args: argparse.Namespace) -> str:
    dsn: str | None = getattr(args, "dsn", None)
    for name in DSN_ENVIRONMENT:
        dsn = dsn or os.environ.get(name)
    if not dsn:
        raise CliError("no database: pass --dsn or set XMQ_AUTH__POSTGRES_DSN")
    return dsn


def _policy(args: argparse.Namespace) -> HashPolicy:
    iterations = getattr(args, "pbkdf2_iterations", None)
    return HashPolicy(pbkdf2_iterations=iterations) if iterations else HashPolicy()


def _optional_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError("expected true or false")


# -- handlers (each gets a connection, the arguments and stdin; prints to stdout) -----------


async def _db_migrate(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    applied = await migrate(conn)
    if applied:
        print(f"applied migrations {', '.join(map(str, applied))}; schema at {LATEST_VERSION}")
    else:
        print(f"schema already at version {LATEST_VERSION}")
    return 0


async def _users_add(conn: asyncpg.Connection, args: argparse.Namespace, stdin: TextIO) -> int:
    password = read_password(stdin)
    await admin.add_user(
        conn,
        args.username,
        password,
        policy=_policy(args),
        groups=tuple(args.group or ()),
        enabled=not args.disabled,
    )
    print(f"added user {args.username!r}")
    return 0


async def _users_del(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    await admin.delete_user(conn, args.username)
    print(f"deleted user {args.username!r}")
    return 0


async def _users_passwd(conn: asyncpg.Connection, args: argparse.Namespace, stdin: TextIO) -> int:
    await admin.set_password(conn, args.username, read_password(stdin), policy=_policy(args))
    print(f"changed the password of {args.username!r}")
    return 0


async def _users_enable(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    await admin.set_enabled(conn, args.username, True)
    print(f"enabled user {args.username!r}")
    return 0


async def _users_disable(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    await admin.set_enabled(conn, args.username, False)
    print(f"disabled user {args.username!r}")
    return 0


async def _users_list(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    for user in await admin.list_users(conn):
        state = "enabled" if user.enabled else "disabled"
        print(f"{user.username!r}\t{state}\t{','.join(user.groups)}")
    return 0


async def _groups_add(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    await admin.add_group(conn, args.name, args.description)
    print(f"added group {args.name!r}")
    return 0


async def _groups_del(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    await admin.delete_group(conn, args.name)
    print(f"deleted group {args.name!r}")
    return 0


async def _groups_list(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    for group in await admin.list_groups(conn):
        print(f"{group.name!r}\t{group.members} members\t{group.description}")
    return 0


async def _groups_members(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    for username in await admin.group_members(conn, args.name):
        print(repr(username))
    return 0


async def _groups_adduser(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    await admin.add_member(conn, args.name, args.username)
    print(f"added {args.username!r} to group {args.name!r}")
    return 0


async def _groups_deluser(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    await admin.remove_member(conn, args.name, args.username)
    print(f"removed {args.username!r} from group {args.name!r}")
    return 0


def _rule_text(rule: AclRule) -> str:
    who = (
        f"user {rule.username!r}"
        if rule.username is not None
        else f"group {rule.group!r}"
        if rule.group is not None
        else "everyone"
    )
    extra = ""
    if rule.max_qos is not None:
        extra += f" max_qos={rule.max_qos}"
    if rule.retain is not None:
        extra += f" retain={str(rule.retain).lower()}"
    return (
        f"{rule.rule_id}\t{rule.priority}\t{rule.permission.value}\t{rule.action.value}\t"
        f"{rule.topic_filter!r}\t{who}{extra}"
    )


async def _acl_add(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    try:
        rule = AclRule(
            permission=Permission(args.permission),
            action=Action(args.action),
            topic_filter=args.topic,
            priority=args.priority,
            max_qos=args.max_qos,
            retain=args.retain,
            username=args.user,
            group=args.group,
        )
    except (PatternError, ValueError) as exc:
        raise CliError(str(exc)) from exc
    rule_id = await admin.add_rule(conn, rule)
    print(f"added rule {rule_id}")
    return 0


async def _acl_del(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    await admin.delete_rule(conn, args.rule_id)
    print(f"deleted rule {args.rule_id}")
    return 0


async def _acl_list(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    for rule in await admin.list_rules(conn, username=args.user, group=args.group):
        print(_rule_text(rule))
    return 0


async def _acl_check(conn: asyncpg.Connection, args: argparse.Namespace, _in: TextIO) -> int:
    allowed = await admin.check_user_access(
        conn,
        args.username,
        args.topic,
        Action(args.action),
        client_id=args.client_id,
        qos=args.qos,
        retain=args.retain,
        no_match_allows=args.no_match_allow,
    )
    print("allow" if allowed else "deny")
    return 0 if allowed else 3


# -- running ---------------------------------------------------------------------------------


async def run_with_connection(
    handler: Handler, args: argparse.Namespace, stdin: TextIO, dsn: str
) -> int:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return await handler(conn, args, stdin)
    finally:
        await conn.close()


def _database_command(handler: Handler) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        stdin: TextIO = getattr(args, "stdin", None) or sys.stdin
        try:
            return asyncio.run(run_with_connection(handler, args, stdin, resolve_dsn(args)))
        except (CliError, admin.AdminError, SchemaError) as exc:
            print(f"xmq: {exc}", file=sys.stderr)
            return 1
        except asyncpg.UndefinedTableError:
            print("xmq: the accounts schema is missing: run `xmq db migrate`", file=sys.stderr)
            return 1
        except DB_ERRORS as exc:
            print(f"xmq: database error: {exc}", file=sys.stderr)
            return 2

    return run


def _users_hash(args: argparse.Namespace) -> int:
    """Print an accounts-file entry (verifier + SCRAM credentials); no database."""
    stdin: TextIO = getattr(args, "stdin", None) or sys.stdin
    try:
        password = read_password(stdin)
    except CliError as exc:
        print(f"xmq: {exc}", file=sys.stderr)
        return 1
    policy = _policy(args)
    scram = derive_scram_credentials(password, iterations=policy.scram_iterations)
    print(f"password: {hash_password(password, policy)!r}")
    print(f"scram: {scram.encode()!r}")
    return 0


def _add(
    commands: Any, name: str, help_text: str, handler: Handler, *, dsn: bool = True
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(name, help=help_text)
    if dsn:
        parser.add_argument("--dsn", help="PostgreSQL DSN (default: $XMQ_AUTH__POSTGRES_DSN)")
    parser.set_defaults(func=_database_command(handler))
    return parser


def add_accounts_commands(subparsers: Any) -> None:
    """Add `db`, `users`, `groups` and `acl` to the main CLI's sub-parsers."""
    db = subparsers.add_parser("db", help="the accounts database").add_subparsers(
        dest="db_command", required=True
    )
    _add(db, "migrate", "create or upgrade the accounts schema (idempotent)", _db_migrate)

    users = subparsers.add_parser("users", help="accounts").add_subparsers(
        dest="users_command", required=True
    )
    add = _add(users, "add", "add a user (password from prompt or stdin)", _users_add)
    add.add_argument("username")
    add.add_argument("--group", action="append", help="also add to this group (repeatable)")
    add.add_argument("--disabled", action="store_true", help="create the account disabled")
    add.add_argument("--pbkdf2-iterations", type=int, help=argparse.SUPPRESS)
    passwd = _add(users, "passwd", "change a password (prompt or stdin)", _users_passwd)
    passwd.add_argument("username")
    passwd.add_argument("--pbkdf2-iterations", type=int, help=argparse.SUPPRESS)
    for name, text, handler in (
        ("del", "delete a user (disconnects its clients)", _users_del),
        ("enable", "enable a user", _users_enable),
        ("disable", "disable a user (disconnects its clients)", _users_disable),
    ):
        _add(users, name, text, handler).add_argument("username")
    _add(users, "list", "list users", _users_list)
    hasher = users.add_parser("hash", help="print an accounts-file entry for a password")
    hasher.add_argument("--pbkdf2-iterations", type=int, help=argparse.SUPPRESS)
    hasher.set_defaults(func=_users_hash)

    groups = subparsers.add_parser("groups", help="groups of accounts").add_subparsers(
        dest="groups_command", required=True
    )
    group_add = _add(groups, "add", "add a group", _groups_add)
    group_add.add_argument("name")
    group_add.add_argument("--description", default="")
    _add(groups, "del", "delete a group", _groups_del).add_argument("name")
    _add(groups, "list", "list groups", _groups_list)
    _add(groups, "members", "list a group's members", _groups_members).add_argument("name")
    for name, text, handler in (
        ("adduser", "add a user to a group", _groups_adduser),
        ("deluser", "remove a user from a group", _groups_deluser),
    ):
        member = _add(groups, name, text, handler)
        member.add_argument("name", help="group")
        member.add_argument("username")

    acl = subparsers.add_parser("acl", help="access rules").add_subparsers(
        dest="acl_command", required=True
    )
    acl_add = _add(acl, "add", "add a rule", _acl_add)
    acl_add.add_argument("permission", choices=[p.value for p in Permission])
    acl_add.add_argument("action", choices=[a.value for a in Action])
    acl_add.add_argument("topic", help="topic filter; %%u = user name, %%c = client id")
    whom = acl_add.add_mutually_exclusive_group()
    whom.add_argument("--user", help="the rule is for this user")
    whom.add_argument("--group", help="the rule is for this group (default: everyone)")
    acl_add.add_argument("--priority", type=int, default=0, help="higher first (default 0)")
    acl_add.add_argument("--max-qos", type=int, choices=(0, 1, 2))
    acl_add.add_argument("--retain", type=_optional_bool, help="match only this retain flag")
    acl_del = _add(acl, "del", "delete a rule by id", _acl_del)
    acl_del.add_argument("rule_id", type=int)
    acl_list = _add(acl, "list", "list rules", _acl_list)
    list_whom = acl_list.add_mutually_exclusive_group()
    list_whom.add_argument("--user")
    list_whom.add_argument("--group")
    check = _add(acl, "check", "what the broker decides (exit 0 allow, 3 deny)", _acl_check)
    check.add_argument("username")
    check.add_argument("topic")
    check.add_argument("action", choices=[a.value for a in Action])
    check.add_argument("--client-id", default="")
    check.add_argument("--qos", type=int, default=0, choices=(0, 1, 2))
    check.add_argument("--retain", action="store_true")
    check.add_argument("--no-match-allow", action="store_true", help=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xmq")
    add_accounts_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None) -> int:
    """Run one accounts command (the main CLI can use `args.func` instead)."""
    args = build_parser().parse_args(argv)
    if stdin is not None:
        args.stdin = stdin
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)
